// The Dispatcher's lists as the claims' text[] parameters (see
// claim_lists.hpp).
#include "publisher/claim_lists.hpp"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
}

namespace outbox {
namespace {

// A list of strings from the dispatcher (TopicsBehindDownSinks,
// DeliverableLikePatterns, LateIds), NUL-separated in one buffer, with an FNV-1a hash
// of the list. The C++ objects live only inside FlattenStrings, which calls
// no PostgreSQL code: an ERROR can never jump over their destructors.
struct FlatStrings {
  char *data = nullptr;  // palloc'd in CurrentMemoryContext
  size_t bytes = 0;
  int count = 0;
  uint64 hash = 1469598103934665603ULL;
  bool failed = false;  // out of memory: no list
};

template <typename Produce>
FlatStrings FlattenStrings(Produce produce) noexcept {
  FlatStrings flat;
  char *buffer = nullptr;
  try {
    const std::vector<std::string> strings = produce();
    for (const std::string &t : strings) flat.bytes += t.size() + 1;
    buffer = static_cast<char *>(malloc(flat.bytes + 1));
    if (buffer != nullptr) {
      char *p = buffer;
      for (const std::string &t : strings) {
        memcpy(p, t.data(), t.size());
        p[t.size()] = '\0';
        p += t.size() + 1;
      }
      flat.count = static_cast<int>(strings.size());
    }
  } catch (...) {
    free(buffer);
    buffer = nullptr;
  }
  // Into PostgreSQL's memory, without raising: a longjmp here would leak the
  // malloc'd buffer.
  if (buffer != nullptr) {
    flat.data = static_cast<char *>(
        MemoryContextAllocExtended(CurrentMemoryContext, flat.bytes + 1, MCXT_ALLOC_NO_OOM));
    if (flat.data != nullptr) memcpy(flat.data, buffer, flat.bytes);
    free(buffer);
  }
  if (flat.data == nullptr) return FlatStrings{nullptr, 0, 0, flat.hash, true};
  for (size_t i = 0; i < flat.bytes; ++i) {
    flat.hash = (flat.hash ^ static_cast<unsigned char>(flat.data[i])) * 1099511628211ULL;
  }
  return flat;
}

// The strings as a text[] in CurrentMemoryContext.
Datum TextArrayOf(const FlatStrings &flat) {
  Datum *elems = static_cast<Datum *>(palloc(sizeof(Datum) * (flat.count + 1)));
  const char *p = flat.data;
  for (int i = 0; i < flat.count; ++i) {
    elems[i] = CStringGetTextDatum(p);
    p += strlen(p) + 1;
  }
  return PointerGetDatum(construct_array(elems, flat.count, TEXTOID, -1, false, TYPALIGN_INT));
}

// Topics the claims leave alone this cycle (a text[] in the cycle's memory).
Datum skipped_topics = 0;

// The LIKE patterns of the routes that deliver (a text[] in
// deliverable_context), and whether there is any.
MemoryContext deliverable_context = nullptr;
Datum deliverable_patterns = 0;
int ndeliverable = 0;
uint64 deliverable_hash = 0;

}  // namespace

bool SetSkippedTopics(const Dispatcher *dispatcher, TimestampTz now) {
  static int previous = 0;
  static uint64 previous_hash = 0;
  const FlatStrings flat =
      FlattenStrings([dispatcher, now] { return dispatcher->TopicsBehindDownSinks(now); });
  skipped_topics = TextArrayOf(flat);
  const bool released = previous > 0 && (flat.count != previous || flat.hash != previous_hash);
  previous = flat.count;
  previous_hash = flat.hash;
  return released;
}

Datum SkippedTopics() { return skipped_topics; }

bool SetDeliverablePatterns(const Dispatcher *dispatcher) {
  // The patterns as a text[], in a context of their own that lives until the
  // next load: they are a parameter of every ready claim.
  const FlatStrings flat =
      FlattenStrings([dispatcher] { return dispatcher->DeliverableLikePatterns(); });
  if (flat.failed) {
    ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                    errmsg("outbox: the publisher ran out of memory while loading routes")));
  }
  MemoryContext fresh =
      AllocSetContextCreate(TopMemoryContext, "outbox deliverable routes", ALLOCSET_SMALL_SIZES);
  MemoryContext caller = MemoryContextSwitchTo(fresh);
  const Datum patterns = TextArrayOf(flat);
  MemoryContextSwitchTo(caller);
  if (deliverable_context != nullptr) MemoryContextDelete(deliverable_context);
  deliverable_context = fresh;
  deliverable_patterns = patterns;
  ndeliverable = flat.count;
  if (flat.hash == deliverable_hash) return false;
  deliverable_hash = flat.hash;
  return true;
}

Datum DeliverablePatterns() { return deliverable_patterns; }
int DeliverableCount() { return ndeliverable; }

Datum LateAnswerIds(const Dispatcher *dispatcher) {
  const FlatStrings flat = FlattenStrings([dispatcher] { return dispatcher->LateIds(); });
  if (flat.failed) {
    ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                    errmsg("outbox: the publisher ran out of memory while listing late answers")));
  }
  return TextArrayOf(flat);
}

}  // namespace outbox
