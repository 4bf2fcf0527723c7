// Recording outcomes (see outcomes.hpp).
//
// Outcomes are written by ctid, partition by partition: the cycle holds the
// rows' locks, so their ctids cannot change under it, and no index on id is
// needed. published_at is clock_timestamp() when the outcome is written, just
// after the broker acknowledged: published_at - created_at is the latency
// from emit to acknowledgement, not from emit to claim. A late answer is
// written a cycle or more after it came: its published_at is the time the
// sink had it (Delivery::answered_at_us).
//
// Memory: everything is palloc'd in the caller's per-cycle context; the plans
// are kept for the process (spi_rows.hpp).
#include "publisher/outcomes.hpp"

#include "core/partition_calendar.hpp"
#include "fault_injection.hpp"
#include "publisher/spi_rows.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

namespace outbox {
namespace {

const char *OutcomeStatus(Outcome o) { return o == Outcome::kDead ? "dead" : "pending"; }

// The two statements that write outcomes into one partition, prepared once
// per partition (a cycle that sends a single event would otherwise spend
// most of its time parsing and planning them). A few partitions are live at
// a time (today's, and the days retries or a backlog reach back to); the
// oldest entry gives way when all are taken. Keyed by OID, schema and
// name: the SQL names the partition, so one renamed or moved to another
// schema (ALTER TABLE ... SET SCHEMA by a superuser) is prepared again, under
// the name it has now.
struct OutcomePlans {
  Oid partition = InvalidOid;
  Oid schema = InvalidOid;
  NameData name;
  SPIPlanPtr published = nullptr;
  SPIPlanPtr failed = nullptr;
};
constexpr int kOutcomePlanSlots = 8;
OutcomePlans outcome_plans[kOutcomePlanSlots];
int next_outcome_slot = 0;

const OutcomePlans &PlansFor(Oid partition) {
  const char *name = get_rel_name(partition);
  const Oid schema = get_rel_namespace(partition);
  const char *schema_name = OidIsValid(schema) ? get_namespace_name(schema) : nullptr;
  if (name == nullptr || schema_name == nullptr) {
    elog(ERROR, "outbox: partition %u vanished under a claim", partition);
  }
  for (const OutcomePlans &p : outcome_plans) {
    if (p.partition == partition && p.schema == schema && strcmp(NameStr(p.name), name) == 0) {
      return p;
    }
  }
  OutcomePlans &slot = outcome_plans[next_outcome_slot];
  next_outcome_slot = (next_outcome_slot + 1) % kOutcomePlanSlots;
  if (slot.published != nullptr) SPI_freeplan(slot.published);
  if (slot.failed != nullptr) SPI_freeplan(slot.failed);
  slot = OutcomePlans();
  const char *qname = quote_qualified_identifier(schema_name, name);
  Oid published_types[1] = {TIDARRAYOID};
  slot.published = KeepPlan(
      psprintf("UPDATE %s SET status = 'published', published_at = pg_catalog.clock_timestamp(),"
               " last_error = NULL WHERE ctid OPERATOR(pg_catalog.=) ANY ($1)",
               qname),
      1, published_types);
  Oid failed_types[5] = {TIDARRAYOID, TEXTARRAYOID, INT4ARRAYOID, TIMESTAMPTZARRAYOID,
                         TEXTARRAYOID};
  // Planned for each call's arrays (a custom plan): a generic plan cannot
  // know how many rows unnest() yields and hash-joins a scan of the whole
  // partition, where a handful of failures wants a nested loop.
  slot.failed = KeepPlan(
      psprintf("UPDATE %s e SET status = u.status, attempts = u.attempts,"
               " next_attempt_at = u.next, last_error = u.error"
               " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
               " pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5))"
               " AS u(t, status, attempts, next, error) WHERE e.ctid OPERATOR(pg_catalog.=) u.t",
               qname),
      5, failed_types, CURSOR_OPT_CUSTOM_PLAN);
  slot.partition = partition;
  slot.schema = schema;
  namestrcpy(&slot.name, name);
  return slot;
}

}  // namespace

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

namespace {

// Late outcomes (dispatch.hpp, "Slow sinks") are written only into rows
// still exactly as the dispatcher parked them: anything else (replayed,
// paused, claimed again after the park ran out) means the row has moved on,
// and the answer is dropped (at least once: the row is or was sent again).
// Through the parent, so that its statement trigger counts the change once.
constexpr const char *kLateOutcomeSql =
    "UPDATE outbox.events e SET status = u.status, attempts = u.attempts,"
    " next_attempt_at = CASE WHEN u.status OPERATOR(pg_catalog.=) 'published'::pg_catalog.text"
    " THEN e.next_attempt_at ELSE u.next END,"
    // The broker's answer came when the sink had it, a cycle or more ago.
    " published_at = CASE WHEN u.status OPERATOR(pg_catalog.=) 'published'::pg_catalog.text"
    " THEN COALESCE(u.answered, pg_catalog.clock_timestamp()) END,"
    " last_error = u.error"
    " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),"
    " pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($6),"
    " pg_catalog.unnest($7), pg_catalog.unnest($8), pg_catalog.unnest($9))"
    " AS u(id, created, expected, parked, status, attempts, next, error, answered)"
    " WHERE e.id OPERATOR(pg_catalog.=) u.id"
    " AND e.created_at OPERATOR(pg_catalog.=) u.created"
    " AND e.status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text"
    " AND e.attempts OPERATOR(pg_catalog.=) u.expected"
    " AND e.next_attempt_at OPERATOR(pg_catalog.=) u.parked";
const Oid kLateOutcomeTypes[9] = {UUIDARRAYOID,        TIMESTAMPTZARRAYOID, INT4ARRAYOID,
                                  TIMESTAMPTZARRAYOID, TEXTARRAYOID,        INT4ARRAYOID,
                                  TIMESTAMPTZARRAYOID, TEXTARRAYOID,        TIMESTAMPTZARRAYOID};
SPIPlanPtr late_outcome_plan = nullptr;

}  // namespace

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
  Datum *answered = static_cast<Datum *>(palloc(sizeof(Datum) * capacity));
  bool *answered_null = static_cast<bool *>(palloc(sizeof(bool) * capacity));
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
      answered = grow(answered);
      next_null = static_cast<bool *>(repalloc(next_null, sizeof(bool) * capacity));
      error_null = static_cast<bool *>(repalloc(error_null, sizeof(bool) * capacity));
      answered_null = static_cast<bool *>(repalloc(answered_null, sizeof(bool) * capacity));
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
    // Unix microseconds to PostgreSQL's (since 2000-01-01).
    answered_null[n] = late.answered_at_us == 0;
    answered[n] = TimestampTzGetDatum(late.answered_at_us -
                                      kPgEpochUnixSeconds * static_cast<int64_t>(USECS_PER_SEC));
    if (published) stats->published++;
    if (o.outcome == Outcome::kRetry || o.outcome == Outcome::kDead) {
      stats->failed++;
      strlcpy(stats->last_error, o.error, sizeof stats->last_error);
    }
    if (o.outcome == Outcome::kRetry || o.outcome == Outcome::kPark) {
      stats->NoteRetryAt(o.next_attempt_us);
    }
    ++n;
  }
  if (n == 0) return;
  if (late_outcome_plan == nullptr)
    late_outcome_plan = KeepPlan(kLateOutcomeSql, 9, kLateOutcomeTypes);
  int dims[1] = {n};
  int lbs[1] = {1};
  Datum args[9] = {
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
          construct_md_array(errors, error_null, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT)),
      PointerGetDatum(construct_md_array(answered, answered_null, 1, dims, lbs, TIMESTAMPTZOID, 8,
                                         FLOAT8PASSBYVAL, TYPALIGN_DOUBLE))};
  OUTBOX_FAULT("publisher.before_late_outcomes");
  const int rc = SPI_execute_plan(late_outcome_plan, args, nullptr, false, 0);
  if (rc != SPI_OK_UPDATE) elog(ERROR, "outbox: recording late answers failed");
  ereport(DEBUG1, (errmsg("outbox: recorded %d late answer(s) from the sinks; %d found their "
                          "event changed meanwhile and were dropped",
                          static_cast<int>(SPI_processed), n - static_cast<int>(SPI_processed))));
}

}  // namespace outbox
