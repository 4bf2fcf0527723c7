// The SQL half of a publish cycle (see claim.hpp).
//
// Index use (see the install script): due retries come from events_retry_idx
// in next_attempt_at order, never-tried events from events_ready_idx in id
// order; neither walks published, dead, parked or unrouted rows. Outcomes
// are written by outcomes.cpp.
//
// Memory: everything is palloc'd in the caller's per-cycle context. The only
// C++ objects are the trivially destructible views handed to the Dispatcher,
// whose Dispatch call runs no PostgreSQL code.
#include "publisher/claim.hpp"

#include <new>

#include "shmem/emit_horizon.hpp"
#include "fault_injection.hpp"
#include "guc.hpp"
#include "publisher/key_ownership.hpp"
#include "core/partition_calendar.hpp"
#include "emit/payload_json.hpp"
#include "publisher/outcomes.hpp"
#include "publisher/spi_rows.hpp"

extern "C" {
#include "access/twophase.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/wait_event.h"
#include "access/detoast.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

namespace outbox {
namespace {

SPIPlanPtr claim_retry_plan = nullptr;
SPIPlanPtr claim_ready_plan = nullptr;
SPIPlanPtr prepared_plan = nullptr;

// Columns of both claim queries.
enum Column { kTableOid = 1, kCtid, kId, kTopic, kKey, kPayload, kHeaders, kAttempts, kCreatedAt };

#define CLAIM_COLUMNS "tableoid, ctid, id, topic, key, payload, headers, attempts, created_at"

// $1 limit, $2 owned key slots (NULL: all), $3 topics waiting for a sink
// that is down (Dispatcher::TopicsBehindDownSinks), left alone until it is
// due.
constexpr const char kClaimRetrySql[] =
    "SELECT " CLAIM_COLUMNS
    " FROM outbox.events WHERE status = 'pending' AND next_attempt_at IS NOT NULL"
    " AND next_attempt_at <= now() AND topic <> ALL($3) AND" OWNED_KEYS(
        "$2") " ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED";
// $1 limit, $2 floor (inclusive), $3 owned key slots (NULL: all), $4
// ceiling (exclusive), $5 topics left alone, $6 and $7 the created_at range
// the ids in [$2, $4) can have (ReadyRange: only the partitions that can hold
// them are scanned), $8 the LIKE patterns of the routes that deliver
// (Dispatcher::DeliverableLikePatterns: events of other topics stay where
// they are, at no cost, until a route takes them).
constexpr const char kClaimReadySql[] =
    "SELECT " CLAIM_COLUMNS
    " FROM outbox.events WHERE status = 'pending' AND next_attempt_at IS NULL"
    " AND created_at >= $6 AND created_at <= $7 AND id >= $2 AND id < $4"
    " AND topic LIKE ANY($8) AND topic <> ALL($5) AND" OWNED_KEYS(
        "$3") " ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED";
constexpr Oid kClaimRetryTypes[] = {INT4OID, BYTEAOID, TEXTARRAYOID};
constexpr Oid kClaimReadyTypes[] = {INT4OID,      UUIDOID,        BYTEAOID,       UUIDOID,
                                    TEXTARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTARRAYOID};

void PreparePlans() {
  if (claim_retry_plan == nullptr) claim_retry_plan = KeepPlan(kClaimRetrySql, 3, kClaimRetryTypes);
  // Generic: its partitions are pruned when it starts, from $6 and $7, where
  // a custom plan would be planned again for every claim.
  if (claim_ready_plan == nullptr) {
    claim_ready_plan = KeepPlan(kClaimReadySql, 8, kClaimReadyTypes, CURSOR_OPT_GENERIC_PLAN);
  }
}

// The ready claim's starting point.
//
// Published events leave the ready index, but their index entries stay until
// they are known dead to every snapshot; while a long transaction holds the
// xmin horizon back, a claim starting at the head of the index would visit
// every event published since. So the claim starts at a floor below which no
// ready event it would take can exist:
// - the ready index only receives new events (retries and revived events go
//   through the retry index);
// - an event not yet committed has an id (its emit time) no earlier than
//   the time its transaction published in the emit horizon before taking
//   it (emit_horizon.hpp): the floor never exceeds the oldest such time in
//   this database, nor now minus a second (a margin for clock steps);
// - except for transactions that emitted more than kPassHoldersAfterUs ago
//   and are still open (an emit role's idle or prepared transaction): the
//   floor passes them, else every claim would walk every event published
//   since they began, whose index entries their snapshot keeps. Each
//   reports its commit before its events are visible; the claims then look
//   back to its first emit once (TakeHolderCommits, at a cycle's start and
//   after every ready claim, which is claimed again from there or, in a
//   window's later batch, left for the next cycle). The floor a cycle that
//   took a report leaves stays at or below that first emit, and so does the
//   bound of every later cycle until the commit is visible (a committing
//   transaction counts in the emit horizon again): the events cannot become
//   visible below the floor after the report was taken;
// - a claim covers everything visible from the floor up to its last row,
//   except the events it leaves in place: those of topics no unpaused route
//   takes, and those behind a sink that is down. They stay below the floor,
//   at no cost, until the routes change or the sink is back, which starts
//   the claims from the beginning again;
// - the floor moves only once the cycle that claimed up to it committed (an
//   aborted cycle leaves its rows as they were, possibly below it).
// Prepared transactions that were prepared before the server started are of
// unknown content: while any exists here, claims start at the beginning.
// Anything else that may put a claimable event below the floor starts the
// claims from the beginning once it commits (DatabaseSlot::floor_resets):
// maintenance moving rows out of the default partition, a statement other
// than emit() that makes a row never-tried (event_counts.cpp), and
// outbox.wakeup(). Left are rows another session held locked when a claim
// passed them (SKIP LOCKED; a SELECT ... FOR UPDATE of an operator), and rows
// INSERTed through outbox.events without emit(): a full scan every 10 s
// picks them up, less often when it walks so many events left in place that
// it would take more than 1% of the publisher's time.
constexpr int64 kFullScanIntervalUs = 10 * USECS_PER_SEC;
constexpr int64 kFullScanTimeShare = 100;  // interval >= 100 x the scan's duration
constexpr int64 kPassHoldersAfterUs = USECS_PER_SEC;
// The lowest first emit of the passed transactions' commits taken in this
// cycle (all 0xff: none), below which its floor stays.
pg_uuid_t holder_cap;
pg_uuid_t ready_floor;  // all zero: from the beginning
// Where the floor goes once this cycle commits (CommitClaimFloor).
pg_uuid_t pending_floor;
bool floor_pending = false;
// Set when the routes that deliver changed while a window was open: the
// floor restarts from the beginning at its commit instead of moving on.
bool floor_reset_requested = false;
TimestampTz last_full_scan = 0;
int64 full_scan_interval_us = kFullScanIntervalUs;
uint64 seen_floor_resets = 0;
// The owned key slots the floor was computed for: slots gained since may
// hold ready events below it.
uint64 floor_generation = 0;

// The created_at of an event with a given id: emit() takes both from one
// clock reading, but a session's ids never go back when the clock does
// (uuid7.hpp), so an id may run ahead of its created_at by a clock step. The
// ready claims look this far around the times their ids stand for; an event
// further off (a clock stepped back by more, or a row INSERTed by hand) is
// claimed by a full scan, which has no created_at bound.
constexpr int64 kClockStepMarginUs = 3600 * USECS_PER_SEC;

// The LIKE patterns of the routes that deliver (a text[] in
// deliverable_context), and whether there is any.
MemoryContext deliverable_context = nullptr;
Datum deliverable_patterns = 0;
int ndeliverable = 0;
uint64 deliverable_hash = 0;

// What the claims know about the retry index (our keys' events waiting for a
// time): the earliest next_attempt_at there, 0 for none. Exact when read
// (NextRetryAt) in a cycle's transaction, then lowered by every time this
// process writes; unknown again after anything else may have written one (a
// reload releasing events, outbox.wakeup(), key slots gained, an error) and
// at least once a second, for writers nobody tells us about.
constexpr int64 kRetryRecheckUs = USECS_PER_SEC;
bool retry_known = false;
TimestampTz retry_due = 0;
TimestampTz retry_read_at = 0;
TimestampTz last_claims_at = 0;  // LastClaimsAt

// The database's prepared transactions, when there can be any.
int PreparedXids(TransactionId **xids) {
  *xids = nullptr;
  if (max_prepared_xacts == 0) return 0;
  if (prepared_plan == nullptr) {
    prepared_plan = KeepPlan(
        "SELECT transaction FROM pg_catalog.pg_prepared_xacts"
        " WHERE database OPERATOR(pg_catalog.=) pg_catalog.current_database()",
        0, nullptr);
  }
  if (SPI_execute_plan(prepared_plan, nullptr, nullptr, true, 0) != SPI_OK_SELECT) {
    elog(ERROR, "outbox: cannot list prepared transactions");
  }
  const int n = static_cast<int>(SPI_processed);
  *xids = static_cast<TransactionId *>(palloc(sizeof(TransactionId) * (n + 1)));
  for (int i = 0; i < n; ++i) {
    bool isnull = false;
    (*xids)[i] = DatumGetTransactionId(
        SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
  }
  return n;
}

// The lowest id an event emitted at `t` or later can have (all zero for
// times before 1970).
pg_uuid_t IdFloorAt(TimestampTz t) {
  pg_uuid_t id;
  memset(&id, 0, sizeof id);
  const int64 unix_ms = t / 1000 + kPgEpochUnixSeconds * 1000;
  if (unix_ms <= 0) return id;
  for (int i = 0; i < 6; ++i) id.data[i] = static_cast<uint8>(unix_ms >> (40 - 8 * i));
  return id;
}

// The highest floor that is safe now (see above). `now` was read before.
pg_uuid_t SafeBound(TimestampTz now) {
  pg_uuid_t bound;
  memset(&bound, 0, sizeof bound);
  TransactionId *prepared = nullptr;
  const int nprepared = PreparedXids(&prepared);
  const EmitHorizon horizon =
      ReadEmitHorizon(MyDatabaseId, prepared, nprepared, now - kPassHoldersAfterUs);
  if (horizon.unknown_prepared) return bound;
  TimestampTz t = now - USECS_PER_SEC;
  if (horizon.oldest != 0 && horizon.oldest < t) t = horizon.oldest;
  return IdFloorAt(t);
}

int CompareUuid(const pg_uuid_t &a, const pg_uuid_t &b) { return memcmp(a.data, b.data, UUID_LEN); }

// Passed transactions that committed since the floor last looked (see
// above): lowers *floor to the first emit of the earliest. Returns whether
// it lowered it: a transaction that first emitted at or above the floor has
// all its events in the range a claim from there covers, in id order.
bool LookBackForHolders(pg_uuid_t *floor) {
  TimestampTz since = 0;
  if (!TakeHolderCommitsForClaims(&since)) return false;
  const pg_uuid_t back = IdFloorAt(since);
  if (CompareUuid(back, holder_cap) < 0) holder_cap = back;
  if (CompareUuid(back, *floor) >= 0) return false;
  *floor = back;
  return true;
}

// A claimed row's payload and headers as compact JSON text: made once, by
// the claim that weighs them (RunClaim), and used for the message.
struct RowTexts {
  StringInfoData payload;
  StringInfoData headers;  // "{}" when the row has none
};

// Fill *event from a claimed row and its texts (all strings palloc'd).
void ReadEvent(HeapTuple row, TupleDesc desc, const RowTexts &texts, EventRow *event,
               Claimed *claimed) {
  bool isnull = false;
  claimed->tableoid = DatumGetObjectId(SPI_getbinval(row, desc, kTableOid, &isnull));
  claimed->ctid =
      *reinterpret_cast<ItemPointer>(DatumGetPointer(SPI_getbinval(row, desc, kCtid, &isnull)));
  Datum id = SPI_getbinval(row, desc, kId, &isnull);
  event->id = View(DatumGetCString(DirectFunctionCall1(uuid_out, id)));
  event->topic = View(TextColumn(row, desc, kTopic, &isnull));
  const char *key = TextColumn(row, desc, kKey, &isnull);
  event->has_key = !isnull;
  event->key = isnull ? std::string_view() : View(key);

  event->payload = std::string_view(texts.payload.data, texts.payload.len);

  Datum headers_datum = SPI_getbinval(row, desc, kHeaders, &isnull);
  if (!isnull) {
    Jsonb *headers = DatumGetJsonbP(headers_datum);
    const int count = JB_ROOT_COUNT(headers);
    Header *list = static_cast<Header *>(palloc0(sizeof(Header) * (count + 1)));
    int i = 0;
    ForEachMember(headers, [&](std::string_view key, const JsonbValue &value) {
      new (&list[i]) Header();
      list[i].name = std::string_view(pnstrdup(key.data(), key.size()), key.size());
      if (value.type == jbvString) {  // emit() allows only strings
        list[i].value = std::string_view(pnstrdup(value.val.string.val, value.val.string.len),
                                         value.val.string.len);
      }
      ++i;
    });
    event->headers = list;
    event->header_count = static_cast<size_t>(i);
  }
  event->headers_json = std::string_view(texts.headers.data, texts.headers.len);
  event->attempts = DatumGetInt32(SPI_getbinval(row, desc, kAttempts, &isnull));
  event->created_at = DatumGetTimestampTz(SPI_getbinval(row, desc, kCreatedAt, &isnull));
}

int CompareEventIds(const void *a, const void *b) {
  const EventRow *x = *static_cast<EventRow *const *>(a);
  const EventRow *y = *static_cast<EventRow *const *>(b);
  return x->id.compare(y->id);
}

// Topics the claims leave alone this cycle (a text[] in the cycle's memory).
Datum skipped_topics = 0;

// The rows one claim took, in the order the claim returned them.
struct ClaimedRows {
  HeapTuple *rows = nullptr;
  RowTexts *texts = nullptr;  // rows[i]'s; unset for a row that is not Publishable
  TupleDesc desc = nullptr;
  int n = 0;
  bool cut = false;  // stopped by the byte budget: more rows may be waiting
};

// A payload or headers value whose jsonb is larger than this cannot become
// a message: as JSON text it may grow sixfold (control characters), or far
// more (a number's exponent), past the 1 GB PostgreSQL can hold in one
// value. emit() never stores one with
// the default settings; a row INSERTed by hand or an outbox.max_payload_bytes
// raised that far can. Such an event goes dead at once instead of failing
// every cycle (and holding up every other event) for good.
constexpr int64 kMaxPublishableBytes = int64{160} * 1024 * 1024;

// Whether a claimed row can be turned into a message (see above).
bool Publishable(HeapTuple row, TupleDesc desc, int64 *size) {
  for (int col : {kPayload, kHeaders}) {
    bool isnull = false;
    const Datum d = SPI_getbinval(row, desc, col, &isnull);
    if (isnull) continue;
    *size = static_cast<int64>(toast_raw_datum_size(d));
    if (*size > kMaxPublishableBytes) return false;
  }
  return true;
}

// What a claimed row costs the publisher to hold for the cycle: the row
// itself, its payload and headers as jsonb (detoasted when they were
// compressed or stored apart) and as the JSON text the messages carry (made
// here, into *texts, and used for the message; counted as allocated), and
// its key. The text matters most: a jsonb number such as 1e100000 takes a
// few bytes and prints as 100,001 digits, so the jsonb size is no bound on
// what the publisher holds; the rest bounds how many small events a claim
// takes. A row too large to publish is weighed, but not turned into text,
// by its jsonb sizes.
int64 WeighRow(HeapTuple row, TupleDesc desc, RowTexts *texts) {
  int64 weight = static_cast<int64>(row->t_len);
  for (int col : {kKey, kPayload, kHeaders}) {
    bool isnull = false;
    const Datum d = SPI_getbinval(row, desc, col, &isnull);
    if (!isnull) weight += static_cast<int64>(toast_raw_datum_size(d));
  }
  int64 size = 0;
  if (!Publishable(row, desc, &size)) return weight;
  bool isnull = false;
  initStringInfo(&texts->payload);
  Jsonb *payload = DatumGetJsonbP(SPI_getbinval(row, desc, kPayload, &isnull));
  AppendCompactJson(&texts->payload, &payload->root);
  initStringInfo(&texts->headers);
  const Datum headers = SPI_getbinval(row, desc, kHeaders, &isnull);
  if (isnull) {
    appendStringInfoString(&texts->headers, "{}");
  } else {
    AppendCompactJson(&texts->headers, &DatumGetJsonbP(headers)->root);
  }
  return weight + texts->payload.maxlen + texts->headers.maxlen;
}

// The time an event id stands for (its first 48 bits: Unix milliseconds).
TimestampTz IdTime(const pg_uuid_t &id) {
  int64 unix_ms = 0;
  for (int i = 0; i < 6; ++i) unix_ms = (unix_ms << 8) | id.data[i];
  return (unix_ms - kPgEpochUnixSeconds * 1000) * 1000;
}

bool IsZero(const pg_uuid_t &id) {
  for (const uint8 b : id.data) {
    if (b != 0) return false;
  }
  return true;
}

// Run a claim as a cursor, a few rows at a time, taking rows until `limit`
// or until they weigh *bytes_left (WeighRow; always at least one row). Rows
// the cursor locked beyond that stay as they are (pending; the next claim
// of this window starts after the last one taken and meets them again, as
// our own locks do not make it skip them). Ready claims take ids in
// [*floor, *ceiling) (a zero floor: a full scan); retry claims pass neither.
ClaimedRows RunClaim(SPIPlanPtr plan, int limit, int64 *bytes_left, TimestampTz now,
                     const pg_uuid_t *floor = nullptr, const pg_uuid_t *ceiling = nullptr) {
  constexpr int kFetchRows = 64;
  // Owning every key slot (one publisher), the claims need no key filter.
  const Datum owned = OwnedSlots().all ? (Datum)0 : OwnedBitmap();
  const char owned_null = OwnedSlots().all ? 'n' : ' ';
  Datum retry_args[3] = {Int32GetDatum(limit), owned, skipped_topics};
  const char retry_nulls[3] = {' ', owned_null, ' '};
  // The created_at range of the ids claimed (kClockStepMarginUs); none for a
  // full scan. Retry claims (no floor) have no such range.
  const bool ready = floor != nullptr;
  const bool full_scan = ready && IsZero(*floor);
  const TimestampTz low = !ready || full_scan ? DT_NOBEGIN : IdTime(*floor) - kClockStepMarginUs;
  const TimestampTz high = !ready || full_scan ? DT_NOEND : now + kClockStepMarginUs;
  Datum ready_args[8] = {Int32GetDatum(limit),
                         UUIDPGetDatum(const_cast<pg_uuid_t *>(floor)),
                         owned,
                         UUIDPGetDatum(const_cast<pg_uuid_t *>(ceiling)),
                         skipped_topics,
                         TimestampTzGetDatum(low),
                         TimestampTzGetDatum(high),
                         deliverable_patterns};
  const char ready_nulls[8] = {' ', ' ', owned_null, ' ', ' ', ' ', ' ', ' '};
  Portal portal = floor == nullptr ? SPI_cursor_open(nullptr, plan, retry_args, retry_nulls, false)
                                   : SPI_cursor_open(nullptr, plan, ready_args, ready_nulls, false);
  ClaimedRows claimed;
  claimed.rows = static_cast<HeapTuple *>(palloc(sizeof(HeapTuple) * limit));
  claimed.texts = static_cast<RowTexts *>(palloc0(sizeof(RowTexts) * limit));
  while (claimed.n < limit && !claimed.cut) {
    SPI_cursor_fetch(portal, true, Min(limit - claimed.n, kFetchRows));
    const int got = static_cast<int>(SPI_processed);
    if (got == 0) break;
    claimed.desc = SPI_tuptable->tupdesc;
    for (int i = 0; i < got && !claimed.cut; ++i) {
      HeapTuple row = SPI_tuptable->vals[i];
      *bytes_left -= WeighRow(row, claimed.desc, &claimed.texts[claimed.n]);
      claimed.rows[claimed.n++] = row;
      claimed.cut = *bytes_left <= 0 && claimed.n < limit;
    }
  }
  SPI_cursor_close(portal);
  return claimed;
}

// A list of strings from the dispatcher (TopicsBehindDownSinks,
// DeliverableLikePatterns), NUL-separated in one buffer, with an FNV-1a hash
// of the list. The C++ objects live only inside FlattenStrings, which calls
// no PostgreSQL code: an ERROR can never jump over their destructors.
struct FlatStrings {
  char *data = nullptr;  // palloc'd (InPalloc)
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

// Set the claims' text[] of topics to leave alone this cycle (out of memory:
// none). Returns true when a topic left alone last cycle is not any more: its
// events may sit below the ready floor.
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

// The smallest id above `id` (big-endian increment): the next claim of a
// window starts after the rows this transaction already holds.
pg_uuid_t After(const pg_uuid_t &id) {
  pg_uuid_t next = id;
  for (int i = UUID_LEN - 1; i >= 0; --i) {
    if (++next.data[i] != 0) break;
  }
  return next;
}

TimestampTz NextRetryAt();

// One claimed batch of a window, in id order. The first `sendable` rows go
// to the dispatcher; the others were too large to turn into a message at all
// (kMaxPublishableBytes) and are dead already.
struct Batch {
  Dispatcher::Ticket ticket = 0;  // Dispatcher::Begin's; 0 when nothing was sent
  int n = 0;
  int sendable = 0;
  EventRow *rows = nullptr;  // [sendable]
  Claimed *claimed = nullptr;
  RowOutcome *outcomes = nullptr;
};

// Read and sort the rows of the last claims into a batch (palloc'd).
Batch ReadBatch(Dispatcher *dispatcher, const ClaimedRows &retry, const ClaimedRows &ready) {
  Batch b;
  b.n = retry.n + ready.n;
  EventRow *events = static_cast<EventRow *>(palloc(sizeof(EventRow) * b.n));
  Claimed *claimed_by_event = static_cast<Claimed *>(palloc(sizeof(Claimed) * b.n));
  b.claimed = static_cast<Claimed *>(palloc(sizeof(Claimed) * b.n));
  b.outcomes = static_cast<RowOutcome *>(palloc(sizeof(RowOutcome) * b.n));
  int nevents = 0;
  int ndead = 0;
  for (int i = 0; i < b.n; ++i) {
    const ClaimedRows &from = i < retry.n ? retry : ready;
    const int at_claim = i < retry.n ? i : i - retry.n;
    HeapTuple row = from.rows[at_claim];
    int64 size = 0;
    if (Publishable(row, from.desc, &size)) {
      new (&events[nevents]) EventRow();
      ReadEvent(row, from.desc, from.texts[at_claim], &events[nevents], &claimed_by_event[nevents]);
      ++nevents;
      continue;
    }
    // At the end of the batch, dead with a reason; never detoasted.
    const int at = b.n - 1 - ndead++;
    bool isnull = false;
    b.claimed[at].tableoid = DatumGetObjectId(SPI_getbinval(row, from.desc, kTableOid, &isnull));
    b.claimed[at].ctid = *reinterpret_cast<ItemPointer>(
        DatumGetPointer(SPI_getbinval(row, from.desc, kCtid, &isnull)));
    RowOutcome *o = new (&b.outcomes[at]) RowOutcome();
    o->outcome = Outcome::kDead;
    o->attempts = DatumGetInt32(SPI_getbinval(row, from.desc, kAttempts, &isnull)) + 1;
    snprintf(o->error, sizeof o->error, "too large to publish: %lld bytes as jsonb (at most %lld)",
             static_cast<long long>(size), static_cast<long long>(kMaxPublishableBytes));
    const char *id =
        DatumGetCString(DirectFunctionCall1(uuid_out, SPI_getbinval(row, from.desc, kId, &isnull)));
    ereport(WARNING, (errmsg("outbox: event %s is dead: %s", id, o->error)));
    // It no longer holds back its key (it may have, after retry_dead()).
    EventRow dead;
    dead.id = View(id);
    dead.topic = View(TextColumn(row, from.desc, kTopic, &isnull));
    const char *key = TextColumn(row, from.desc, kKey, &isnull);
    dead.has_key = !isnull;
    if (dead.has_key) dead.key = View(key);
    if (!dispatcher->NoteDead(dead)) {
      ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                      errmsg("outbox: the publisher ran out of memory while updating the "
                             "per-key order state")));
    }
  }
  // The dispatcher wants id order (= emit order per session).
  b.sendable = nevents;
  EventRow **order = static_cast<EventRow **>(palloc(sizeof(EventRow *) * (nevents + 1)));
  for (int i = 0; i < nevents; ++i) order[i] = &events[i];
  qsort(order, nevents, sizeof(EventRow *), CompareEventIds);
  b.rows = static_cast<EventRow *>(palloc(sizeof(EventRow) * (nevents + 1)));
  for (int i = 0; i < nevents; ++i) {
    new (&b.rows[i]) EventRow(*order[i]);
    b.claimed[i] = claimed_by_event[order[i] - events];
    new (&b.outcomes[i]) RowOutcome();
  }
  return b;
}

// The dispatcher gave up the window (Dispatcher::Begin and Finish): the
// cycle goes with it, so that nothing it decided is written; the worker's
// error path reloads the order state from the database.
[[noreturn]] void WindowFailed() {
  ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                  errmsg("outbox: the publisher ran out of memory while batches were in flight; "
                         "the cycle is abandoned and its events stay pending")));
}

// Wait for a batch's answers, count them, and write its outcomes.
void FinishBatch(Dispatcher *dispatcher, const Batch &b, Sink::InterruptCheck interrupted,
                 CycleStats *stats) {
  OUTBOX_FAULT("publisher.before_finish");
  // While the brokers answer, pg_stat_activity shows the publisher waiting
  // (wait_event_type Extension) rather than active on the CPU. Finish runs
  // no PostgreSQL code and never throws, so the wait always ends here.
  if (b.ticket != 0) {
    pgstat_report_wait_start(PG_WAIT_EXTENSION);
    const bool finished = dispatcher->Finish(b.ticket, interrupted);
    pgstat_report_wait_end();
    if (!finished) WindowFailed();
  }
  OUTBOX_FAULT("publisher.after_finish");
  for (int i = 0; i < b.n; ++i) {
    const RowOutcome &o = b.outcomes[i];
    // An event left as it was may be a ready one below the new floor: the
    // next claim starts from the beginning.
    if (o.outcome == Outcome::kUntouched) {
      memset(&ready_floor, 0, sizeof ready_floor);
      floor_pending = false;
    }
    if (o.outcome == Outcome::kPublished) stats->published++;
    if (o.outcome == Outcome::kRetry || o.outcome == Outcome::kDead) {
      stats->failed++;
      strlcpy(stats->last_error, o.error, sizeof stats->last_error);
    }
    if (o.outcome == Outcome::kRetry || o.outcome == Outcome::kPark) {
      stats->NoteRetryAt(o.next_attempt_us);
    }
  }
  // One pass per partition the batch touched (usually one or two).
  for (int i = 0; i < b.n; ++i) {
    bool seen = false;
    for (int j = 0; j < i && !seen; ++j) seen = b.claimed[j].tableoid == b.claimed[i].tableoid;
    if (!seen) WriteOutcomes(b.claimed[i].tableoid, b.claimed, b.outcomes, b.n);
  }
  OUTBOX_FAULT("publisher.after_outcomes");
}

}  // namespace

int ClaimAndPublish(Dispatcher *dispatcher, Sink::InterruptCheck interrupted,
                    ConfigCheck config_current, CycleStats *stats) {
  PreparePlans();
  const int batch = guc::batch_size;

  // Due retries first (they are older), then never-tried events from the
  // floor on (or from the beginning: a full scan).
  const TimestampTz now = GetCurrentTimestamp();
  last_claims_at = now;
  DispatchSettings settings;
  settings.max_attempts = guc::max_attempts;
  settings.backoff_min_ms = guc::backoff_min_ms;
  settings.backoff_max_ms = guc::backoff_max_ms;
  settings.now_us = now;
  settings.source = guc::CloudEventsSource();
  settings.ack_wait_ms = guc::ack_wait_ms;
  settings.clock_us = [] { return static_cast<int64_t>(GetCurrentTimestamp()); };
  // First the late answers that came in: a sink whose answers all came in
  // takes new events again, and its topics are claimed again (below).
  WriteLateOutcomes(dispatcher, settings, stats);
  const pg_uuid_t bound = SafeBound(now);
  // Reasons to start the ready claims from the beginning. Each resets the
  // remembered floor itself, not this cycle's copy: a cycle may run no ready
  // claim at all (its batch filled with due retries), and the reset must hold
  // until one does. Per-key order depends on it: a never-tried event below
  // the floor whose later events of the same key lie above it would go out
  // after them.
  if (SetSkippedTopics(dispatcher, now)) {
    // Topics left alone until now hold ready events below the floor.
    memset(&ready_floor, 0, sizeof ready_floor);
  }
  if (OwnedSlots().generation != floor_generation) {
    memset(&ready_floor, 0, sizeof ready_floor);  // slots gained: their events
    floor_generation = OwnedSlots().generation;
    retry_known = false;  // and their retry times
  }
  if (const uint64 resets = ClaimFloorResets(); resets != seen_floor_resets) {
    // Events were put where the floor may have passed them (see above), or
    // given a retry time this process does not know.
    memset(&ready_floor, 0, sizeof ready_floor);
    retry_known = false;
    seen_floor_resets = resets;
  }
  if (floor_reset_requested) {
    memset(&ready_floor, 0, sizeof ready_floor);  // the routes that deliver changed
    floor_reset_requested = false;
  }
  if (now - last_full_scan >= full_scan_interval_us) {
    memset(&ready_floor, 0, sizeof ready_floor);
    last_full_scan = now;
  }
  memset(holder_cap.data, 0xff, UUID_LEN);
  LookBackForHolders(&ready_floor);
  pg_uuid_t floor = ready_floor;
  // Retries are claimed only when one may be due (retry_known above).
  if (now - retry_read_at >= kRetryRecheckUs) retry_known = false;
  const bool claim_retries = !retry_known || (retry_due != 0 && retry_due <= now);
  bool retries_left = false;  // the retry claim came back full

  // The window: claim a batch and send it; while the brokers answer, claim
  // and send the next, as long as claims come back full. Then finish them in
  // order. Per key, what goes on the wire must be in id order with no gap:
  // - later batches hold only never-tried events with ids above the previous
  //   batch's (a batch's retries sit anywhere in id order, so they come only
  //   in the first);
  // - and only ids below `bound`. Every event with a lower id had committed
  //   (or aborted) before SafeBound looked, hence before the first claim's
  //   snapshot (see SafeBound): none of them can turn up later below a batch
  //   already sent. An event above the bound can: its transaction may commit
  //   after one claim and before the next, below the next one's start, while
  //   a later event of its key lies above it. Such events wait for the next
  //   window, whose first claim starts at the bound.
  Batch *window = static_cast<Batch *>(palloc0(sizeof(Batch) * guc::batches_in_flight));
  int nbatches = 0;
  pg_uuid_t next_floor = ready_floor;
  bool ready_claimed = false;
  pg_uuid_t ceiling;  // exclusive; none for the first claim
  memset(ceiling.data, 0xff, UUID_LEN);
  floor_pending = false;
  for (int w = 0; w < guc::batches_in_flight; ++w) {
    OUTBOX_FAULT("publisher.before_claim");
    // Each claim takes at most outbox.max_batch_bytes (RunClaim). The ready
    // claim has a budget of its own: large due retries (events released
    // when a route appears, say) must not keep new events out of a cycle.
    int64 retry_bytes = guc::max_batch_bytes;
    int64 ready_bytes = guc::max_batch_bytes;
    ClaimedRows retry;
    if (w == 0 && claim_retries) {
      retry = RunClaim(claim_retry_plan, batch, &retry_bytes, now);
      retries_left = retry.n == batch || retry.cut;
    }
    const int nretry = retry.n;
    // No route delivers: nothing to take from the ready index.
    const int ready_limit = ndeliverable > 0 ? batch - nretry : 0;
    if (w == 1) ceiling = bound;
    ClaimedRows ready;
    bool holder_committed = false;  // this batch's ready claim may miss a passed one's events
    for (int again = 0; ready_limit > 0; ++again) {
      const bool full_scan = IsZero(floor);
      const TimestampTz started = full_scan ? GetCurrentTimestamp() : 0;
      int64 bytes = ready_bytes;
      ready = RunClaim(claim_ready_plan, ready_limit, &bytes, now, &floor, &ceiling);
      if (full_scan) {
        // A full scan walks every event left in place (no route takes it):
        // it may take at most 1 / kFullScanTimeShare of the time.
        full_scan_interval_us =
            Max(kFullScanIntervalUs, (GetCurrentTimestamp() - started) * kFullScanTimeShare);
      }
      // A passed transaction committed: if this claim's snapshot saw its
      // events, those below `floor` were not claimed, while later ones of
      // their keys may have been. The floor goes back to its first emit, for
      // good (an abort keeps it; a commit, holder_cap) and for this claim: the first batch is
      // claimed again from there (our own locks do not hide its rows), a
      // later one is left for the next cycle, and so is the first after two
      // tries (more commits may keep coming: the earlier batches go out).
      pg_uuid_t back = floor;
      if (!LookBackForHolders(&back)) break;
      if (CompareUuid(back, ready_floor) < 0) ready_floor = back;
      floor = back;
      if (w > 0 || again == 2) {
        elog(DEBUG1,
             "outbox: a transaction open since before the claims' floor committed during"
             " a claim: its batch waits for the next cycle");
        holder_committed = true;
        stats->more_waiting = true;
        break;
      }
      elog(DEBUG1,
           "outbox: a transaction open since before the claims' floor committed during"
           " a claim: claiming again from its first emit");
    }
    if (holder_committed) break;
    const int nready = ready.n;
    if (retry.cut || ready.cut) stats->more_waiting = true;
    if (nretry + nready > 0 && !config_current(nbatches == 0)) {
      // Sinks or routes changed since the window began: this batch waits for
      // the next cycle, which decides it with the new ones. The floor stays
      // where the batches before it left it.
      break;
    }
    // Loading them for the first batch changed which topics the claims take
    // (NoteRoutesLoaded): this batch was claimed with the old ones, and a
    // next claim with the new ones would start above its last row, past
    // never-tried events of a newly taken topic whose later events of the
    // same key it would send first. The window ends with this batch; the
    // next cycle's claims start from the beginning.
    const bool claims_changed = floor_reset_requested;
    // Next floor: everything visible from `floor` up to the last row claimed
    // (or all of it, when the claim came back short) has been claimed.
    const bool full = ready_limit > 0 && (nready == ready_limit || ready.cut);
    if (ready_limit > 0) {
      ready_claimed = true;
      next_floor = bound;
      if (full) {
        bool isnull = false;
        const pg_uuid_t *last =
            DatumGetUUIDP(SPI_getbinval(ready.rows[nready - 1], ready.desc, kId, &isnull));
        if (CompareUuid(*last, next_floor) < 0) next_floor = *last;
        floor = After(*last);
      }
    }
    if (nretry + nready == 0) break;
    OUTBOX_FAULT("publisher.after_claim");
    window[nbatches] = ReadBatch(dispatcher, retry, ready);
    Batch &b = window[nbatches++];
    stats->claimed += b.n;
    if (b.sendable > 0) {
      pgstat_report_wait_start(PG_WAIT_EXTENSION);
      b.ticket = dispatcher->Begin(b.rows, static_cast<size_t>(b.sendable), settings, b.outcomes,
                                   interrupted);
      pgstat_report_wait_end();
      if (b.ticket == 0) WindowFailed();
    }
    OUTBOX_FAULT("publisher.after_begin");
    if (!full || claims_changed || (interrupted != nullptr && interrupted())) break;
  }
  // The floor moves when this transaction has committed (CommitClaimFloor):
  // if it aborts, the rows claimed here are pending again below next_floor.
  if (ready_claimed) {
    pending_floor = CompareUuid(holder_cap, next_floor) < 0 ? holder_cap : next_floor;
    floor_pending = true;
  }

  for (int w = 0; w < nbatches; ++w) FinishBatch(dispatcher, window[w], interrupted, stats);

  // What the retry index holds now. After a retry claim that took every
  // due retry, read its earliest time again (our outcomes are written:
  // this transaction sees them); otherwise it is what it was, or earlier
  // if this cycle wrote an earlier time.
  if (claim_retries && !retries_left) {
    retry_due = NextRetryAt();
    retry_known = true;
    retry_read_at = now;
  } else if (claim_retries) {
    retry_known = false;  // more are due: claim them next cycle
  } else if (stats->earliest_retry != 0 && (retry_due == 0 || stats->earliest_retry < retry_due)) {
    retry_due = stats->earliest_retry;
  }
  return stats->claimed;
}

void CommitClaimFloor() {
  if (floor_reset_requested) {
    memset(&ready_floor, 0, sizeof ready_floor);
    floor_reset_requested = false;
  } else if (floor_pending) {
    ready_floor = pending_floor;
  }
  floor_pending = false;
}

void ForgetClaimFloor() {
  floor_pending = false;
  retry_known = false;  // the aborted cycle's reading went with it
}

void NoteRoutesLoaded(const Dispatcher *dispatcher) {
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
  // Events of topics a route takes now may lie below the floor, left in
  // place while none did: start from the beginning (at once, and at the
  // commit of a window that is open).
  if (flat.hash != deliverable_hash) {
    deliverable_hash = flat.hash;
    floor_reset_requested = true;
  }
  retry_known = false;  // the load released events waiting for a route, due now
}

bool HasDeliverableRoutes() { return ndeliverable > 0; }

TimestampTz KnownRetryDue(bool *known) {
  *known = retry_known;
  return retry_due;
}

TimestampTz LastClaimsAt() { return last_claims_at; }

Datum LateAnswerIds(const Dispatcher *dispatcher) {
  const FlatStrings flat = FlattenStrings([dispatcher] { return dispatcher->LateIds(); });
  if (flat.failed) {
    ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                    errmsg("outbox: the publisher ran out of memory while loading routes")));
  }
  return TextArrayOf(flat);
}

const char *PublisherStatement(const char *name) {
  if (strcmp(name, "claim_retry") == 0) return kClaimRetrySql;
  if (strcmp(name, "claim_ready") == 0) return kClaimReadySql;
  return nullptr;
}

namespace {

// When the earliest event of our keys that waits for a time, and that a
// retry claim may take, is due (0 if none). Sees this transaction's own
// outcomes. Events of the topics the claims leave alone (behind a sink that
// is down or owes late answers) do not count: the claims would not take
// them when due, and the idle publisher would wake for nothing, at once and
// again (it spun through thousands of empty transactions a second while a
// sink's answers were late). What ends their wait wakes it anyway: the
// sink's retry time (Dispatcher::NextSinkRetryUs) or its answers.
TimestampTz NextRetryAt() {
  // Prepared once: planning a min() over every partition costs more than
  // running it.
  static SPIPlanPtr plan = nullptr;
  if (plan == nullptr) {
    Oid types[2] = {BYTEAOID, TEXTARRAYOID};
    plan = KeepPlan(
        "SELECT min(next_attempt_at) FROM outbox.events"
        " WHERE status = 'pending' AND next_attempt_at IS NOT NULL"
        " AND next_attempt_at < 'infinity' AND topic <> ALL($2) AND" OWNED_KEYS("$1"),
        2, types);
  }
  Datum args[2] = {OwnedBitmap(), skipped_topics};
  if (SPI_execute_plan(plan, args, nullptr, false, 1) != SPI_OK_SELECT || SPI_processed != 1) {
    return 0;
  }
  bool isnull = false;
  Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
  return isnull ? 0 : DatumGetTimestampTz(d);
}

}  // namespace

}  // namespace outbox
