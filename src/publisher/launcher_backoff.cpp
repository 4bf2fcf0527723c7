// See launcher_backoff.hpp.
#include "publisher/launcher_backoff.hpp"

#include "guc.hpp"
#include "shmem/shmem.hpp"

extern "C" {
#include "utils/memutils.h"
}

namespace outbox {
namespace {

struct ProbeRecord {
  Oid dboid;
  int failures;
  TimestampTz next_start;
};
ProbeRecord *records = nullptr;  // oldest first
int nrecords = 0;

int Find(Oid dboid) {
  for (int i = 0; i < nrecords; ++i) {
    if (records[i].dboid == dboid) return i;
  }
  return -1;
}

void RemoveAt(int i) {
  for (int k = i + 1; k < nrecords; ++k) records[k - 1] = records[k];
  --nrecords;
}

}  // namespace

// A publisher that was started here and is gone: note why.
void NoteExit(Publisher *p, int w, Oid dboid, const char *datname, uint64 word, bool paused,
              TimestampTz now) {
  pfree(p->handle);  // allocated by RegisterDynamicBackgroundWorker in TopMemoryContext
  p->handle = nullptr;
  // Fine if the extension is gone, was created again since it started (it
  // left for a DROP EXTENSION that CREATE EXTENSION followed), or the
  // database is paused; otherwise it failed: back off before the next start.
  if (StateOf(word) == ExtensionState::kAbsent || GenerationOf(word) != p->started_generation ||
      paused) {
    return;
  }
  p->failures = now - p->started_at > kRestartBackoffMaxMs * 1000L ? 1 : p->failures + 1;
  long wait = 1000L << (p->failures < 7 ? p->failures - 1 : 6);
  if (wait > kRestartBackoffMaxMs) wait = kRestartBackoffMaxMs;
  p->next_start = TimestampTzPlusMilliseconds(now, wait);
  if (w == 0 && StateOf(word) == ExtensionState::kUnknown) {
    RememberProbeFailures(dboid, p->failures, p->next_start);
  }
  if (guc::workers > 1) {
    ereport(LOG, (errmsg("outbox: publisher %d for database \"%s\" exited; restarting in %ld s", w,
                         datname, wait / 1000)));
  } else {
    ereport(LOG, (errmsg("outbox: publisher for database \"%s\" exited; restarting in %ld s",
                         datname, wait / 1000)));
  }
}

void RememberProbeFailures(Oid dboid, int failures, TimestampTz next_start) {
  if (records == nullptr) {
    records = static_cast<ProbeRecord *>(
        MemoryContextAlloc(TopMemoryContext, sizeof(ProbeRecord) * kMaxRememberedProbes));
  }
  const int i = Find(dboid);
  if (i >= 0) RemoveAt(i);
  if (nrecords == kMaxRememberedProbes) RemoveAt(0);
  records[nrecords++] = ProbeRecord{dboid, failures, next_start};
}

bool RecallProbeFailures(Oid dboid, int *failures, TimestampTz *next_start) {
  const int i = Find(dboid);
  if (i < 0) return false;
  *failures = records[i].failures;
  *next_start = records[i].next_start;
  return true;
}

void ForgetProbeFailures(Oid dboid) {
  const int i = Find(dboid);
  if (i >= 0) RemoveAt(i);
}

bool OwnerProbesFail(const DatabaseList &dbs, Oid owner) {
  for (int i = 0; i < nrecords; ++i) {
    if (records[i].failures <= 0) continue;
    const int j = IndexOf(dbs, records[i].dboid);
    if (j >= 0 && dbs.owners[j] == owner) return true;
  }
  return false;
}

}  // namespace outbox
