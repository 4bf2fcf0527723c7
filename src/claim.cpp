// The SQL half of a publish cycle (see claim.hpp).
//
// Index use (see the install script): due retries come from events_retry_idx
// in next_attempt_at order, never-tried events from events_ready_idx in id
// order; neither walks published, dead, parked or unrouted rows. Outcomes are
// written by ctid, partition by partition: we hold the rows locks, so their
// ctids cannot change under us, and no index on id is needed.
//
// published_at is clock_timestamp() when the outcome is written, i.e. just
// after the broker acknowledged: published_at - created_at is the latency
// from emit to acknowledgement, not from emit to claim.
//
// Memory: everything is palloc'd in the caller's per-cycle context. The only
// C++ objects are the trivially destructible views handed to the Dispatcher,
// whose Dispatch call runs no PostgreSQL code.
#include "claim.hpp"

#include <new>

#include "emit_horizon.hpp"
#include "fault_injection.hpp"
#include "guc.hpp"
#include "key_ownership.hpp"
#include "partition_calendar.hpp"
#include "payload_json.hpp"
#include "sink_catalog.hpp"

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

// Rows this publisher may take: keyless ones, and those whose key hashes into
// a slot it owns ($N: the bitmap of key_ownership.hpp). With one publisher it
// owns every slot; the filter then costs a hash per row and skips nothing.
#define OWNED_KEYS(param) \
  " (key IS NULL OR pg_catalog.get_byte(" param ", " OUTBOX_KEY_SLOT_SQL ") = 1)"

// $1 limit, $2 owned key slots, $3 topics waiting for a sink that is down
// (Dispatcher::TopicsBehindDownSinks), left alone until it is due.
constexpr const char kClaimRetrySql[] =
    "SELECT " CLAIM_COLUMNS
    " FROM outbox.events WHERE status = 'pending' AND next_attempt_at IS NOT NULL"
    " AND next_attempt_at <= now() AND topic <> ALL($3) AND" OWNED_KEYS(
        "$2") " ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED";
// $1 limit, $2 floor (inclusive), $3 owned key slots, $4 ceiling
// (exclusive), $5 topics left alone.
constexpr const char kClaimReadySql[] =
    "SELECT " CLAIM_COLUMNS
    " FROM outbox.events WHERE status = 'pending' AND next_attempt_at IS NULL"
    " AND id >= $2 AND id < $4 AND topic <> ALL($5) AND" OWNED_KEYS(
        "$3") " ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED";
constexpr Oid kClaimRetryTypes[] = {INT4OID, BYTEAOID, TEXTARRAYOID};
constexpr Oid kClaimReadyTypes[] = {INT4OID, UUIDOID, BYTEAOID, UUIDOID, TEXTARRAYOID};

SPIPlanPtr Prepare(const char *sql, int nargs, const Oid *types, int cursor_options = 0) {
  SPIPlanPtr plan = SPI_prepare_cursor(sql, nargs, const_cast<Oid *>(types), cursor_options);
  if (plan == nullptr) elog(ERROR, "outbox: could not prepare: %s", sql);
  if (SPI_keepplan(plan) != 0) elog(ERROR, "outbox: could not keep plan: %s", sql);
  return plan;
}

void PreparePlans() {
  if (claim_retry_plan == nullptr) claim_retry_plan = Prepare(kClaimRetrySql, 3, kClaimRetryTypes);
  if (claim_ready_plan == nullptr) claim_ready_plan = Prepare(kClaimReadySql, 5, kClaimReadyTypes);
}

// The ready claim's starting point.
//
// Published events leave the ready index, but their index entries stay until
// they are known dead to every snapshot; while a long transaction holds the
// xmin horizon back, a claim starting at the head of the index would visit
// every event published since. So the claim starts at a floor below which no
// ready event can exist:
// - the ready index only receives new events (retries, revived and unrouted
//   events go through the retry index);
// - an event not yet committed has an id (its emit time) no earlier than
//   the time its transaction published in the emit horizon before taking
//   it (emit_horizon.hpp): the floor never exceeds the oldest such time in
//   this database, nor now minus a second (a margin for clock steps);
// - a claim covers everything visible from the floor up to its last row;
// - the floor moves only once the cycle that claimed up to it committed (an
//   aborted cycle leaves its rows as they were, possibly below it).
// Prepared transactions that were prepared before the server started are of
// unknown content: while any exists here, claims start at the beginning.
// Rows moved out of the default partition by maintenance reset the floor
// (DatabaseSlot::floor_resets). Rows another session held locked when we
// skipped them (SKIP LOCKED), and rows INSERTed into outbox.events without
// emit(), can sit below the floor: a full scan every few seconds picks them
// up.
constexpr int64 kFullScanIntervalUs = 10 * USECS_PER_SEC;
pg_uuid_t ready_floor;  // all zero: from the beginning
// Where the floor goes once this cycle commits (CommitClaimFloor).
pg_uuid_t pending_floor;
bool floor_pending = false;
TimestampTz last_full_scan = 0;
uint64 seen_floor_resets = 0;
// The owned key slots the floor was computed for: slots gained since may
// hold ready events below it.
uint64 floor_generation = 0;

// The database's prepared transactions, when there can be any.
int PreparedXids(TransactionId **xids) {
  *xids = nullptr;
  if (max_prepared_xacts == 0) return 0;
  if (prepared_plan == nullptr) {
    prepared_plan = Prepare(
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

// The highest floor that is safe now (see above). `now` was read before.
pg_uuid_t SafeBound(TimestampTz now) {
  pg_uuid_t bound;
  memset(&bound, 0, sizeof bound);
  TransactionId *prepared = nullptr;
  const int nprepared = PreparedXids(&prepared);
  const EmitHorizon horizon = ReadEmitHorizon(MyDatabaseId, prepared, nprepared);
  if (horizon.unknown_prepared) return bound;
  TimestampTz t = now - USECS_PER_SEC;
  if (horizon.oldest != 0 && horizon.oldest < t) t = horizon.oldest;
  const int64 unix_ms = t / 1000 + kPgEpochUnixSeconds * 1000;
  if (unix_ms <= 0) return bound;
  for (int i = 0; i < 6; ++i) bound.data[i] = static_cast<uint8>(unix_ms >> (40 - 8 * i));
  return bound;
}

int CompareUuid(const pg_uuid_t &a, const pg_uuid_t &b) { return memcmp(a.data, b.data, UUID_LEN); }

// One claimed row, copied out of SPI's tuple table.
struct Claimed {
  Oid tableoid;
  ItemPointerData ctid;
};

std::string_view View(const char *s) { return std::string_view(s, strlen(s)); }

const char *TextColumn(HeapTuple row, TupleDesc desc, int col, bool *isnull) {
  Datum d = SPI_getbinval(row, desc, col, isnull);
  return *isnull ? nullptr : TextDatumGetCString(d);
}

// Fill *event from a claimed row (all strings palloc'd).
void ReadEvent(HeapTuple row, TupleDesc desc, EventRow *event, Claimed *claimed) {
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

  StringInfoData payload;
  initStringInfo(&payload);
  Jsonb *jb = DatumGetJsonbP(SPI_getbinval(row, desc, kPayload, &isnull));
  AppendCompactJson(&payload, &jb->root);
  event->payload = std::string_view(payload.data, payload.len);

  Datum headers_datum = SPI_getbinval(row, desc, kHeaders, &isnull);
  StringInfoData headers_json;
  initStringInfo(&headers_json);
  if (isnull) {
    appendStringInfoString(&headers_json, "{}");
  } else {
    Jsonb *headers = DatumGetJsonbP(headers_datum);
    AppendCompactJson(&headers_json, &headers->root);
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
  event->headers_json = std::string_view(headers_json.data, headers_json.len);
  event->attempts = DatumGetInt32(SPI_getbinval(row, desc, kAttempts, &isnull));
  event->created_at = DatumGetTimestampTz(SPI_getbinval(row, desc, kCreatedAt, &isnull));
}

int CompareEventIds(const void *a, const void *b) {
  const EventRow *x = *static_cast<EventRow *const *>(a);
  const EventRow *y = *static_cast<EventRow *const *>(b);
  return x->id.compare(y->id);
}

const char *OutcomeStatus(Outcome o) { return o == Outcome::kDead ? "dead" : "pending"; }

// The two statements that write outcomes into one partition, prepared once
// per partition (a cycle that sends a single event would otherwise spend
// most of its time parsing and planning them). A few partitions are live at
// a time (today's, and the days retries or a backlog reach back to); the
// oldest entry gives way when all are taken. Keyed by OID and name: the SQL
// names the partition, so a renamed one is prepared again.
struct OutcomePlans {
  Oid partition = InvalidOid;
  NameData name;
  SPIPlanPtr published = nullptr;
  SPIPlanPtr failed = nullptr;
};
constexpr int kOutcomePlanSlots = 8;
OutcomePlans outcome_plans[kOutcomePlanSlots];
int next_outcome_slot = 0;

const OutcomePlans &PlansFor(Oid partition) {
  const char *name = get_rel_name(partition);
  if (name == nullptr) elog(ERROR, "outbox: partition %u vanished under a claim", partition);
  for (const OutcomePlans &p : outcome_plans) {
    if (p.partition == partition && strcmp(NameStr(p.name), name) == 0) return p;
  }
  OutcomePlans &slot = outcome_plans[next_outcome_slot];
  next_outcome_slot = (next_outcome_slot + 1) % kOutcomePlanSlots;
  if (slot.published != nullptr) SPI_freeplan(slot.published);
  if (slot.failed != nullptr) SPI_freeplan(slot.failed);
  slot = OutcomePlans();
  const char *qname = quote_identifier(name);
  Oid published_types[1] = {TIDARRAYOID};
  slot.published = Prepare(
      psprintf("UPDATE outbox.%s SET status = 'published', published_at = clock_timestamp(),"
               " last_error = NULL WHERE ctid = ANY($1)",
               qname),
      1, published_types);
  Oid failed_types[5] = {TIDARRAYOID, TEXTARRAYOID, INT4ARRAYOID, TIMESTAMPTZARRAYOID,
                         TEXTARRAYOID};
  // Planned for each call's arrays (a custom plan): a generic plan cannot
  // know how many rows unnest() yields and hash-joins a scan of the whole
  // partition, where a handful of failures wants a nested loop.
  slot.failed = Prepare(psprintf("UPDATE outbox.%s e SET status = u.status, attempts = u.attempts,"
                                 " next_attempt_at = u.next, last_error = u.error"
                                 " FROM unnest($1, $2, $3, $4, $5) AS u(t, status, attempts, next,"
                                 " error) WHERE e.ctid = u.t",
                                 qname),
                        5, failed_types, CURSOR_OPT_CUSTOM_PLAN);
  slot.partition = partition;
  namestrcpy(&slot.name, name);
  return slot;
}

// Write the outcomes of the rows claimed from one partition.
void WriteOutcomes(Oid partition, const Claimed *claimed, const RowOutcome *outcomes, int n) {
  const OutcomePlans &plans = PlansFor(partition);
  Datum *published = static_cast<Datum *>(palloc(sizeof(Datum) * n));
  Datum *failed = static_cast<Datum *>(palloc(sizeof(Datum) * n));
  Datum *statuses = static_cast<Datum *>(palloc(sizeof(Datum) * n));
  Datum *attempts = static_cast<Datum *>(palloc(sizeof(Datum) * n));
  Datum *next = static_cast<Datum *>(palloc(sizeof(Datum) * n));
  bool *next_null = static_cast<bool *>(palloc(sizeof(bool) * n));
  Datum *errors = static_cast<Datum *>(palloc(sizeof(Datum) * n));
  int npublished = 0, nfailed = 0;
  for (int i = 0; i < n; ++i) {
    if (claimed[i].tableoid != partition) continue;
    const RowOutcome &o = outcomes[i];
    Datum ctid = PointerGetDatum(&claimed[i].ctid);
    if (o.outcome == Outcome::kPublished) {
      published[npublished++] = ctid;
    } else if (o.outcome != Outcome::kUntouched) {
      failed[nfailed] = ctid;
      statuses[nfailed] = CStringGetTextDatum(OutcomeStatus(o.outcome));
      attempts[nfailed] = Int32GetDatum(o.attempts);
      next_null[nfailed] = o.outcome == Outcome::kDead;
      next[nfailed] = TimestampTzGetDatum(o.next_attempt_us);  // INT64_MAX is 'infinity'
      errors[nfailed] = CStringGetTextDatum(o.error);
      ++nfailed;
    }
  }
  if (npublished > 0) {
    Datum args[1] = {PointerGetDatum(construct_array(
        published, npublished, TIDOID, sizeof(ItemPointerData), false, TYPALIGN_SHORT))};
    const int rc = SPI_execute_plan(plans.published, args, nullptr, false, 0);
    if (rc != SPI_OK_UPDATE) elog(ERROR, "outbox: marking events published failed");
  }
  if (nfailed > 0) {
    int dims[1] = {nfailed};
    int lbs[1] = {1};
    Datum args[5] = {
        PointerGetDatum(construct_array(failed, nfailed, TIDOID, sizeof(ItemPointerData), false,
                                        TYPALIGN_SHORT)),
        PointerGetDatum(construct_array(statuses, nfailed, TEXTOID, -1, false, TYPALIGN_INT)),
        PointerGetDatum(construct_array(attempts, nfailed, INT4OID, 4, true, TYPALIGN_INT)),
        PointerGetDatum(construct_md_array(next, next_null, 1, dims, lbs, TIMESTAMPTZOID, 8,
                                           FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
        PointerGetDatum(construct_array(errors, nfailed, TEXTOID, -1, false, TYPALIGN_INT))};
    const int rc = SPI_execute_plan(plans.failed, args, nullptr, false, 0);
    if (rc != SPI_OK_UPDATE) elog(ERROR, "outbox: recording failed deliveries failed");
  }
}

// Late outcomes (dispatch.hpp, "Slow sinks") are written only into rows
// still exactly as the dispatcher parked them: anything else (replayed,
// paused, claimed again after the park ran out) means the row has moved on,
// and the answer is dropped (at least once: the row is or was sent again).
// Through the parent, so that its statement trigger counts the change once.
constexpr const char *kLateOutcomeSql =
    "UPDATE outbox.events e SET status = u.status, attempts = u.attempts,"
    " next_attempt_at = CASE WHEN u.status OPERATOR(pg_catalog.=) 'published'::pg_catalog.text"
    " THEN e.next_attempt_at ELSE u.next END,"
    " published_at = CASE WHEN u.status OPERATOR(pg_catalog.=) 'published'::pg_catalog.text"
    " THEN pg_catalog.clock_timestamp() END,"
    " last_error = u.error"
    " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),"
    " pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($6),"
    " pg_catalog.unnest($7), pg_catalog.unnest($8))"
    " AS u(id, created, expected, parked, status, attempts, next, error)"
    " WHERE e.id OPERATOR(pg_catalog.=) u.id"
    " AND e.created_at OPERATOR(pg_catalog.=) u.created"
    " AND e.status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text"
    " AND e.attempts OPERATOR(pg_catalog.=) u.expected"
    " AND e.next_attempt_at OPERATOR(pg_catalog.=) u.parked";
const Oid kLateOutcomeTypes[8] = {UUIDARRAYOID,        TIMESTAMPTZARRAYOID, INT4ARRAYOID,
                                  TIMESTAMPTZARRAYOID, TEXTARRAYOID,        INT4ARRAYOID,
                                  TIMESTAMPTZARRAYOID, TEXTARRAYOID};
SPIPlanPtr late_outcome_plan = nullptr;

// Rows the order state rebuild reads at a time (LoadConfiguration).
constexpr long kRebuildChunkRows = 1000;

// Judge the late answers that have come in and write them. The order state
// has them already (SettleLate); if this transaction fails, the error path
// reloads it from the rows, which then still say "parked".
void WriteLateOutcomes(Dispatcher *dispatcher, const DispatchSettings &settings,
                       CycleStats *stats) {
  if (!dispatcher->HasLate()) return;
  if (!dispatcher->SettleLate(settings)) {
    ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                    errmsg("outbox: the publisher ran out of memory while judging late answers "
                           "from its sinks; their events wait and are sent again")));
  }
  int capacity = 16, n = 0;
  auto grow = [&capacity](Datum *a) {
    return static_cast<Datum *>(repalloc(a, sizeof(Datum) * capacity));
  };
  Datum *ids = static_cast<Datum *>(palloc(sizeof(Datum) * capacity));
  Datum *created = static_cast<Datum *>(palloc(sizeof(Datum) * capacity));
  Datum *expected = static_cast<Datum *>(palloc(sizeof(Datum) * capacity));
  Datum *parked = static_cast<Datum *>(palloc(sizeof(Datum) * capacity));
  Datum *statuses = static_cast<Datum *>(palloc(sizeof(Datum) * capacity));
  Datum *attempts = static_cast<Datum *>(palloc(sizeof(Datum) * capacity));
  Datum *next = static_cast<Datum *>(palloc(sizeof(Datum) * capacity));
  bool *next_null = static_cast<bool *>(palloc(sizeof(bool) * capacity));
  Datum *errors = static_cast<Datum *>(palloc(sizeof(Datum) * capacity));
  bool *error_null = static_cast<bool *>(palloc(sizeof(bool) * capacity));
  LateOutcome late;  // plain data: nothing to destroy if an ERROR jumps out
  while (dispatcher->NextLateOutcome(&late)) {
    if (n == capacity) {
      capacity *= 2;
      ids = grow(ids);
      created = grow(created);
      expected = grow(expected);
      parked = grow(parked);
      statuses = grow(statuses);
      attempts = grow(attempts);
      next = grow(next);
      errors = grow(errors);
      next_null = static_cast<bool *>(repalloc(next_null, sizeof(bool) * capacity));
      error_null = static_cast<bool *>(repalloc(error_null, sizeof(bool) * capacity));
    }
    const RowOutcome &o = late.outcome;
    ids[n] = DirectFunctionCall1(uuid_in, CStringGetDatum(late.id));
    created[n] = TimestampTzGetDatum(late.created_at);
    expected[n] = Int32GetDatum(late.attempts);
    parked[n] = TimestampTzGetDatum(late.parked_until_us);
    const bool published = o.outcome == Outcome::kPublished;
    statuses[n] = CStringGetTextDatum(published ? "published" : OutcomeStatus(o.outcome));
    attempts[n] = Int32GetDatum(o.attempts);
    next_null[n] = o.outcome == Outcome::kDead || published;
    next[n] = TimestampTzGetDatum(o.next_attempt_us);  // INT64_MAX is 'infinity'
    error_null[n] = published;
    errors[n] = published ? static_cast<Datum>(0) : CStringGetTextDatum(o.error);
    if (published) stats->published++;
    if (o.outcome == Outcome::kRetry || o.outcome == Outcome::kDead) {
      stats->failed++;
      strlcpy(stats->last_error, o.error, sizeof stats->last_error);
    }
    ++n;
  }
  if (n == 0) return;
  if (late_outcome_plan == nullptr)
    late_outcome_plan = Prepare(kLateOutcomeSql, 8, kLateOutcomeTypes);
  int dims[1] = {n};
  int lbs[1] = {1};
  Datum args[8] = {
      PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR)),
      PointerGetDatum(
          construct_array(created, n, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
      PointerGetDatum(construct_array(expected, n, INT4OID, 4, true, TYPALIGN_INT)),
      PointerGetDatum(
          construct_array(parked, n, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
      PointerGetDatum(construct_array(statuses, n, TEXTOID, -1, false, TYPALIGN_INT)),
      PointerGetDatum(construct_array(attempts, n, INT4OID, 4, true, TYPALIGN_INT)),
      PointerGetDatum(construct_md_array(next, next_null, 1, dims, lbs, TIMESTAMPTZOID, 8,
                                         FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
      PointerGetDatum(
          construct_md_array(errors, error_null, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT))};
  OUTBOX_FAULT("publisher.before_late_outcomes");
  const int rc = SPI_execute_plan(late_outcome_plan, args, nullptr, false, 0);
  if (rc != SPI_OK_UPDATE) elog(ERROR, "outbox: recording late answers failed");
  ereport(DEBUG1, (errmsg("outbox: recorded %d late answer(s) from the sinks; %d found their "
                          "event changed meanwhile and were dropped",
                          static_cast<int>(SPI_processed), n - static_cast<int>(SPI_processed))));
}

Datum OwnedBitmap() { return PointerGetDatum(OwnedSlots().bitmap); }

// Topics the claims leave alone this cycle (a text[] in the cycle's memory).
Datum skipped_topics = 0;

// The rows one claim took, in the order the claim returned them.
struct ClaimedRows {
  HeapTuple *rows = nullptr;
  TupleDesc desc = nullptr;
  int n = 0;
  bool cut = false;  // stopped by the byte budget: more rows may be waiting
};

// What a claimed row costs the publisher to hold, before anything is
// detoasted: its payload's and headers' jsonb sizes and its key's length.
int64 RowWeight(HeapTuple row, TupleDesc desc) {
  int64 weight = 0;
  for (int col : {kKey, kPayload, kHeaders}) {
    bool isnull = false;
    const Datum d = SPI_getbinval(row, desc, col, &isnull);
    if (!isnull) weight += static_cast<int64>(toast_raw_datum_size(d));
  }
  return weight;
}

// Run a claim as a cursor, a few rows at a time, taking rows until `limit`
// or until they weigh *bytes_left (RowWeight; always at least one row). Rows
// the cursor locked beyond that stay as they are (pending; the next claim
// of this window starts after the last one taken and meets them again, as
// our own locks do not make it skip them). Ready claims take ids in
// [*floor, *ceiling); retry claims pass neither.
ClaimedRows RunClaim(SPIPlanPtr plan, int limit, int64 *bytes_left,
                     const pg_uuid_t *floor = nullptr, const pg_uuid_t *ceiling = nullptr) {
  constexpr int kFetchRows = 64;
  Datum retry_args[3] = {Int32GetDatum(limit), OwnedBitmap(), skipped_topics};
  Datum ready_args[5] = {Int32GetDatum(limit), UUIDPGetDatum(const_cast<pg_uuid_t *>(floor)),
                         OwnedBitmap(), UUIDPGetDatum(const_cast<pg_uuid_t *>(ceiling)),
                         skipped_topics};
  Portal portal =
      SPI_cursor_open(nullptr, plan, floor == nullptr ? retry_args : ready_args, nullptr, false);
  ClaimedRows claimed;
  claimed.rows = static_cast<HeapTuple *>(palloc(sizeof(HeapTuple) * limit));
  while (claimed.n < limit && !claimed.cut) {
    SPI_cursor_fetch(portal, true, Min(limit - claimed.n, kFetchRows));
    const int got = static_cast<int>(SPI_processed);
    if (got == 0) break;
    claimed.desc = SPI_tuptable->tupdesc;
    for (int i = 0; i < got && !claimed.cut; ++i) {
      HeapTuple row = SPI_tuptable->vals[i];
      claimed.rows[claimed.n++] = row;
      *bytes_left -= RowWeight(row, claimed.desc);
      claimed.cut = *bytes_left <= 0 && claimed.n < limit;
    }
  }
  SPI_cursor_close(portal);
  return claimed;
}

// Dispatcher::TopicsBehindDownSinks, NUL-separated in one malloc'd buffer.
// The C++ objects live only inside this function, which calls no PostgreSQL
// code: an ERROR can never jump over their destructors.
struct FlatTopics {
  char *data = nullptr;  // malloc'd; free() it
  size_t bytes = 0;
  int count = 0;
};

FlatTopics TopicsToSkip(const Dispatcher *dispatcher, int64_t now_us) noexcept {
  FlatTopics flat;
  try {
    const std::vector<std::string> topics = dispatcher->TopicsBehindDownSinks(now_us);
    for (const std::string &t : topics) flat.bytes += t.size() + 1;
    flat.data = static_cast<char *>(malloc(flat.bytes + 1));
    if (flat.data == nullptr) return FlatTopics{};
    char *p = flat.data;
    for (const std::string &t : topics) {
      memcpy(p, t.data(), t.size());
      p[t.size()] = '\0';
      p += t.size() + 1;
    }
    flat.count = static_cast<int>(topics.size());
  } catch (...) {
    free(flat.data);
    return FlatTopics{};
  }
  return flat;
}

// Set the claims' text[] of topics to leave alone this cycle. Returns true
// when a topic left alone last cycle is not any more: its events may sit
// below the ready floor.
bool SetSkippedTopics(const Dispatcher *dispatcher, TimestampTz now) {
  static int previous = 0;
  static uint64 previous_hash = 0;
  FlatTopics flat = TopicsToSkip(dispatcher, now);
  char *copy = nullptr;
  if (flat.data != nullptr) {
    copy = static_cast<char *>(
        MemoryContextAllocExtended(CurrentMemoryContext, flat.bytes + 1, MCXT_ALLOC_NO_OOM));
    if (copy != nullptr) memcpy(copy, flat.data, flat.bytes);
    free(flat.data);
  }
  const int count = copy != nullptr ? flat.count : 0;
  Datum *elems = static_cast<Datum *>(palloc(sizeof(Datum) * (count + 1)));
  const char *p = copy;
  for (int i = 0; i < count; ++i) {
    elems[i] = CStringGetTextDatum(p);
    p += strlen(p) + 1;
  }
  skipped_topics = PointerGetDatum(construct_array(elems, count, TEXTOID, -1, false, TYPALIGN_INT));
  uint64 hash = 1469598103934665603ULL;  // FNV-1a of the list
  for (size_t i = 0; copy != nullptr && i < flat.bytes; ++i) {
    hash = (hash ^ static_cast<unsigned char>(copy[i])) * 1099511628211ULL;
  }
  const bool released = previous > 0 && (count != previous || hash != previous_hash);
  previous = count;
  previous_hash = hash;
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

// A payload or headers value whose jsonb is larger than this cannot become
// a message: as JSON text it may grow sixfold (control characters), past
// the 1 GB PostgreSQL can hold in one value. emit() never stores one with
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
    HeapTuple row = from.rows[i < retry.n ? i : i - retry.n];
    int64 size = 0;
    if (Publishable(row, from.desc, &size)) {
      new (&events[nevents]) EventRow();
      ReadEvent(row, from.desc, &events[nevents], &claimed_by_event[nevents]);
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
pg_attribute_noreturn() void WindowFailed() {
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
  // floor on (or from the beginning, every kFullScanIntervalUs).
  const TimestampTz now = GetCurrentTimestamp();
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
  }
  if (const uint64 resets = ClaimFloorResets(); resets != seen_floor_resets) {
    memset(&ready_floor, 0, sizeof ready_floor);  // maintenance moved events below it
    seen_floor_resets = resets;
  }
  if (now - last_full_scan >= kFullScanIntervalUs) {
    memset(&ready_floor, 0, sizeof ready_floor);
    last_full_scan = now;
  }
  pg_uuid_t floor = ready_floor;

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
    if (w == 0) retry = RunClaim(claim_retry_plan, batch, &retry_bytes);
    const int nretry = retry.n;
    const int ready_limit = batch - nretry;
    if (w == 1) ceiling = bound;
    ClaimedRows ready;
    if (ready_limit > 0) {
      ready = RunClaim(claim_ready_plan, ready_limit, &ready_bytes, &floor, &ceiling);
    }
    const int nready = ready.n;
    if (retry.cut || ready.cut) stats->more_waiting = true;
    if (nretry + nready > 0 && !config_current(nbatches == 0)) {
      // Sinks or routes changed since the window began: this batch waits for
      // the next cycle, which decides it with the new ones. The floor stays
      // where the batches before it left it.
      break;
    }
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
    if (!full || (interrupted != nullptr && interrupted())) break;
  }
  // The floor moves when this transaction has committed (CommitClaimFloor):
  // if it aborts, the rows claimed here are pending again below next_floor.
  if (ready_claimed) {
    pending_floor = next_floor;
    floor_pending = true;
  }

  for (int w = 0; w < nbatches; ++w) FinishBatch(dispatcher, window[w], interrupted, stats);
  return stats->claimed;
}

void CommitClaimFloor() {
  if (floor_pending) ready_floor = pending_floor;
  floor_pending = false;
}

void ForgetClaimFloor() { floor_pending = false; }

const char *PublisherStatement(const char *name) {
  if (strcmp(name, "claim_retry") == 0) return kClaimRetrySql;
  if (strcmp(name, "claim_ready") == 0) return kClaimReadySql;
  return nullptr;
}

void LoadConfiguration(Dispatcher *dispatcher) {
  // Whoever can write outbox.sinks (its owner, the extension owner, or a
  // superuser) chose the options: a superuser's options only when both
  // owners are superusers (sink_options.hpp).
  if (SPI_execute("SELECT r.rolsuper AND s.rolsuper FROM pg_catalog.pg_extension e"
                  " JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) e.extowner"
                  " JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=)"
                  " 'outbox.sinks'::pg_catalog.regclass"
                  " JOIN pg_catalog.pg_roles s ON s.oid OPERATOR(pg_catalog.=) c.relowner"
                  " WHERE e.extname OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.name",
                  true, 1) != SPI_OK_SELECT) {
    elog(ERROR, "outbox: cannot read the extension's owner");
  }
  bool privileged = false;
  if (SPI_processed == 1) {
    bool isnull = false;
    const Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    privileged = !isnull && DatumGetBool(d);
  }
  if (SPI_execute("SELECT name, kind, options FROM outbox.sinks ORDER BY name", false, 0) !=
      SPI_OK_SELECT) {
    elog(ERROR, "outbox: cannot read outbox.sinks");
  }
  const int nsinks = static_cast<int>(SPI_processed);
  SPITupleTable *sink_rows = SPI_tuptable;
  SinkRow *sinks = static_cast<SinkRow *>(palloc(sizeof(SinkRow) * (nsinks + 1)));
  for (int i = 0; i < nsinks; ++i) {
    new (&sinks[i]) SinkRow();
    bool isnull = false;
    HeapTuple row = sink_rows->vals[i];
    sinks[i].name = View(TextColumn(row, sink_rows->tupdesc, 1, &isnull));
    sinks[i].kind = View(TextColumn(row, sink_rows->tupdesc, 2, &isnull));
    Jsonb *options = DatumGetJsonbP(SPI_getbinval(row, sink_rows->tupdesc, 3, &isnull));
    int count = 0;
    sinks[i].options = FlattenSinkOptions(options, &count);
    sinks[i].option_count = static_cast<size_t>(count);
    sinks[i].privileged = privileged;
  }

  if (SPI_execute("SELECT pattern, sink, target, paused, format FROM outbox.routes", false, 0) !=
      SPI_OK_SELECT) {
    elog(ERROR, "outbox: cannot read outbox.routes");
  }
  const int nroutes = static_cast<int>(SPI_processed);
  SPITupleTable *route_rows = SPI_tuptable;
  RouteRow *routes = static_cast<RouteRow *>(palloc(sizeof(RouteRow) * (nroutes + 1)));
  for (int i = 0; i < nroutes; ++i) {
    new (&routes[i]) RouteRow();
    bool isnull = false;
    HeapTuple row = route_rows->vals[i];
    routes[i].pattern = View(TextColumn(row, route_rows->tupdesc, 1, &isnull));
    routes[i].sink = View(TextColumn(row, route_rows->tupdesc, 2, &isnull));
    const char *target = TextColumn(row, route_rows->tupdesc, 3, &isnull);
    routes[i].has_target = !isnull;
    routes[i].target = isnull ? std::string_view() : View(target);
    routes[i].paused = DatumGetBool(SPI_getbinval(row, route_rows->tupdesc, 4, &isnull));
    // The table's CHECK admits only names ParseMessageFormat knows.
    routes[i].format = ParseMessageFormat(View(TextColumn(row, route_rows->tupdesc, 5, &isnull)))
                           .value_or(MessageFormat::kRaw);
  }
  if (!dispatcher->Configure(routes, static_cast<size_t>(nroutes), sinks,
                             static_cast<size_t>(nsinks))) {
    ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                    errmsg("outbox: the publisher ran out of memory while loading sinks and "
                           "routes")));
  }

  // Events parked for lack of a route (or behind a paused one) get another
  // look under the new routes
  // (due now, through the retry index: the ready index only ever receives
  // new events, which keeps the ready claim's starting point valid).
  // Only those of keys we own (and keyless ones): another publisher's are
  // its business, and updating them could wait for its row locks.
  Oid types[1] = {BYTEAOID};
  Datum args[1] = {OwnedBitmap()};
  if (SPI_execute_with_args(
          "UPDATE outbox.events SET next_attempt_at = now()"
          " WHERE status = 'pending' AND next_attempt_at = 'infinity' AND" OWNED_KEYS("$1")
          // Only those a route may now take: events of topics no route
          // matches stay as they are, at no cost per reload (patterns are
          // [A-Za-z0-9._-*]: only '_' needs escaping for LIKE, with '!',
          // which neither holds, whatever standard_conforming_strings says).
          " AND EXISTS (SELECT FROM outbox.routes r WHERE NOT r.paused AND topic LIKE"
          " pg_catalog.replace(pg_catalog.replace(r.pattern, '_', '!_'), '*', '%') ESCAPE '!')",
          1, types, args, nullptr, false, 0) != SPI_OK_UPDATE) {
    elog(ERROR, "outbox: cannot release events that waited for a route");
  }

  // Rebuild the per-key order state from the events of our keys that wait
  // for a retry. Their number has no bound (a poison event parks every later
  // event of its key, and keys may be 4 kB): a cursor reads them a chunk at
  // a time into memory reset per chunk, and the guard keeps ~60 bytes per
  // event whatever its key (order_guard.hpp).
  Portal portal = SPI_cursor_open_with_args(
      nullptr,
      "SELECT id, topic, key, next_attempt_at FROM outbox.events"
      " WHERE status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text"
      " AND next_attempt_at IS NOT NULL"
      " AND next_attempt_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz"
      " AND key IS NOT NULL AND" OWNED_KEYS("$1") " ORDER BY id",
      // Not read-only: it must see the events released above (now due).
      1, types, args, nullptr, false, 0);
  MemoryContext chunk_context = AllocSetContextCreate(
      CurrentMemoryContext, "outbox order state rebuild", ALLOCSET_DEFAULT_SIZES);
  for (;;) {
    SPI_cursor_fetch(portal, true, kRebuildChunkRows);
    if (SPI_processed == 0) break;
    MemoryContext caller = MemoryContextSwitchTo(chunk_context);
    for (uint64 i = 0; i < SPI_processed; ++i) {
      HeapTuple row = SPI_tuptable->vals[i];
      TupleDesc desc = SPI_tuptable->tupdesc;
      bool isnull = false;
      EventRow event;
      event.id = View(
          DatumGetCString(DirectFunctionCall1(uuid_out, SPI_getbinval(row, desc, 1, &isnull))));
      event.topic = View(TextColumn(row, desc, 2, &isnull));
      event.has_key = true;
      event.key = View(TextColumn(row, desc, 3, &isnull));
      const TimestampTz until = DatumGetTimestampTz(SPI_getbinval(row, desc, 4, &isnull));
      if (!dispatcher->NoteWaiting(event, until)) {
        ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                        errmsg("outbox: the publisher ran out of memory while rebuilding the "
                               "per-key order state")));
      }
    }
    MemoryContextSwitchTo(caller);
    MemoryContextReset(chunk_context);
    SPI_freetuptable(SPI_tuptable);
  }
  SPI_cursor_close(portal);
  MemoryContextDelete(chunk_context);
}

TimestampTz NextRetryAt() {
  // Runs before every sleep, so after nearly every wake-up when commits come
  // one by one: prepared once, as planning a min() over every partition
  // cost more than the rest of such a cycle.
  static SPIPlanPtr plan = nullptr;
  if (plan == nullptr) {
    Oid types[1] = {BYTEAOID};
    plan = Prepare(
        "SELECT min(next_attempt_at) FROM outbox.events"
        " WHERE status = 'pending' AND next_attempt_at IS NOT NULL"
        " AND next_attempt_at < 'infinity' AND" OWNED_KEYS("$1"),
        1, types);
  }
  Datum args[1] = {OwnedBitmap()};
  if (SPI_execute_plan(plan, args, nullptr, true, 1) != SPI_OK_SELECT || SPI_processed != 1) {
    return 0;
  }
  bool isnull = false;
  Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
  return isnull ? 0 : DatumGetTimestampTz(d);
}

}  // namespace outbox
