// The SQL half of a publish cycle (see claim.hpp): the claims, and the window
// of batches in flight. Where the ready claims start is ClaimFloor's
// (core/claim_floor.hpp), and whether a cycle claims due retries is
// retry_due.cpp's; the rows a claim takes are read into batches by
// claim_rows.cpp, and outcomes are written by outcomes.cpp.
//
// Index use (see the install script): due retries come from events_retry_idx
// in next_attempt_at order, never-tried events from events_ready_idx in id
// order; neither walks published, dead, parked or unrouted rows.
//
// Memory: everything is palloc'd in the caller's per-cycle context. The only
// C++ objects are the trivially destructible views handed to the Dispatcher,
// whose Begin and Finish run no PostgreSQL code, and the floor's plain
// values.
#include "publisher/claim.hpp"

#include <algorithm>

#include "shmem/emit_horizon.hpp"
#include "fault_injection.hpp"
#include "guc.hpp"
#include "core/claim_floor.hpp"
#include "publisher/claim_lists.hpp"
#include "publisher/claim_rows.hpp"
#include "publisher/key_ownership.hpp"
#include "publisher/retry_due.hpp"
#include "publisher/outcomes.hpp"
#include "publisher/spi_rows.hpp"

extern "C" {
#include "access/twophase.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "executor/spi.h"
#include "utils/wait_event.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

namespace outbox {
namespace {

SPIPlanPtr claim_retry_plan = nullptr;
SPIPlanPtr claim_ready_plan = nullptr;

// $1 limit, $2 owned key slots (NULL: all), $3 topics waiting for a sink
// that is down (Dispatcher::TopicsBehindDownSinks), left alone until it is
// due.
constexpr const char kClaimRetrySql[] =
    "SELECT " CLAIM_COLUMNS
    " FROM outbox.events WHERE status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text"
    " AND next_attempt_at IS NOT NULL"
    " AND next_attempt_at OPERATOR(pg_catalog.<=) pg_catalog.now()"
    " AND topic OPERATOR(pg_catalog.<>) ALL ($3) AND" OWNED_KEYS(
        "$2") " ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED";
// $1 limit, $2 floor (inclusive), $3 owned key slots (NULL: all), $4
// ceiling (exclusive), $5 topics left alone, $6 and $7 the created_at range
// the ids in [$2, $4) can have (ClaimFloor::CreatedAtRange: only the
// partitions that can hold them are scanned), $8 the LIKE patterns of the
// routes that deliver (Dispatcher::DeliverableLikePatterns: events of other
// topics stay where they are, at no cost, until a route takes them).
constexpr const char kClaimReadySql[] =
    "SELECT " CLAIM_COLUMNS
    " FROM outbox.events WHERE status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text"
    " AND next_attempt_at IS NULL"
    " AND created_at OPERATOR(pg_catalog.>=) $6 AND created_at OPERATOR(pg_catalog.<=) $7"
    " AND id OPERATOR(pg_catalog.>=) $2 AND id OPERATOR(pg_catalog.<) $4"
    " AND topic OPERATOR(pg_catalog.~~) ANY ($8) AND topic OPERATOR(pg_catalog.<>) ALL ($5) "
    "AND" OWNED_KEYS("$3") " ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED";
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

// The ready claims' floor (core/claim_floor.hpp: what holds it back, what
// moves it and what resets it). Plain values: nothing in it points into a
// transaction's memory.
ClaimFloor claim_floor;

TimestampTz last_claims_at = 0;  // LastClaimsAt

// The highest floor that is safe now (ClaimFloor::SafeBound). `now` was
// read before.
IdPosition SafeBound(TimestampTz now) {
  const EmitHorizon horizon = ReadEmitHorizon(MyDatabaseId, ClaimFloor::PassHoldersBefore(now));
  return ClaimFloor::SafeBound(now, horizon.oldest);
}

// Passed transactions that committed since the floor last looked
// (ClaimFloor::HolderCommitted, which says what it does with the earliest
// first emit). Returns whether the next ready claim must start lower.
bool LookBackForHolders() {
  TimestampTz since = 0;
  return TakeHolderCommitsForClaims(&since) && claim_floor.HolderCommitted(since);
}

// Run a claim as a cursor and take its rows (FetchClaimedRows: at most
// `limit`, weighing at most about *bytes_left). Ready claims take ids in
// [*from, *ceiling) (from the beginning: a full scan); retry claims pass
// neither.
ClaimedRows RunClaim(SPIPlanPtr plan, int limit, int64 *bytes_left, TimestampTz now,
                     const IdPosition *from = nullptr, const IdPosition *ceiling = nullptr) {
  // Owning every key slot (one publisher), the claims need no key filter.
  const Datum owned = OwnedSlots().all ? (Datum)0 : OwnedBitmap();
  const char owned_null = OwnedSlots().all ? 'n' : ' ';
  Datum retry_args[3] = {Int32GetDatum(limit), owned, SkippedTopics()};
  const char retry_nulls[3] = {' ', owned_null, ' '};
  // The created_at range of the ids claimed; none for a full scan. Retry
  // claims (no floor) have no such range.
  int64_t low = DT_NOBEGIN;
  int64_t high = DT_NOEND;
  pg_uuid_t floor_id;
  pg_uuid_t ceiling_id;
  memset(&floor_id, 0, sizeof floor_id);
  memset(&ceiling_id, 0, sizeof ceiling_id);
  if (from != nullptr) {
    (void)ClaimFloor::CreatedAtRange(*from, now, &low, &high);
    IdPositionToBytes(*from, floor_id.data);
    IdPositionToBytes(*ceiling, ceiling_id.data);
  }
  Datum ready_args[8] = {
      Int32GetDatum(limit),       UUIDPGetDatum(&floor_id), owned,
      UUIDPGetDatum(&ceiling_id), SkippedTopics(),          TimestampTzGetDatum(low),
      TimestampTzGetDatum(high),  DeliverablePatterns()};
  const char ready_nulls[8] = {' ', ' ', owned_null, ' ', ' ', ' ', ' ', ' '};
  Portal portal = from == nullptr ? SPI_cursor_open(nullptr, plan, retry_args, retry_nulls, false)
                                  : SPI_cursor_open(nullptr, plan, ready_args, ready_nulls, false);
  ClaimedRows claimed = FetchClaimedRows(portal, limit, bytes_left);
  SPI_cursor_close(portal);
  return claimed;
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
    if (o.outcome == Outcome::kUntouched) claim_floor.EventLeftInPlace();
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
  const IdPosition bound = SafeBound(now);
  // Reasons to start the ready claims from the beginning (ClaimFloor says
  // why each holds until a ready claim runs).
  if (SetSkippedTopics(dispatcher, now)) claim_floor.TopicsTakenAgain();
  // Slots gained: their events, and their retry times.
  if (claim_floor.KeySlotsAre(OwnedSlots().generation)) ForgetRetryDue();
  // Events were put where the floor may have passed them, or given a retry
  // time this process does not know.
  if (claim_floor.ResetCountIs(ClaimFloorResets())) ForgetRetryDue();
  claim_floor.BeginCycle(now, bound);
  // Passed transactions that committed since the last cycle looked: its
  // claims start no higher than their first emit.
  (void)LookBackForHolders();
  // Retries are claimed only when one may be due (retry_due.hpp).
  const bool claim_retries = RetriesMayBeDue(now);
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
  IdPosition ceiling = IdPosition::End();  // exclusive; none for the first claim
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
    // No route delivers: nothing to take from the ready index. Otherwise
    // never-tried events get at least a quarter of a batch whatever the
    // retries take: a key's followers parked behind its failing first event
    // are due again at its every retry, and a role that emits a poison
    // event and a few hundred thousand followers on one key would otherwise
    // fill every claim with them, every other application's events waiting
    // until they are all parked again. Per-key order does not rest on this:
    // a never-tried event behind a due retry left unclaimed is parked by the
    // order guard, which holds it until that retry is settled.
    const int ready_limit =
        DeliverableCount() > 0 ? std::max(batch - nretry, std::max(batch / 4, 1)) : 0;
    if (w == 1) ceiling = bound;
    ClaimedRows ready;
    bool holder_committed = false;  // this batch's ready claim may miss a passed one's events
    for (int again = 0; ready_limit > 0; ++again) {
      const bool full_scan = claim_floor.FullScanNext();
      const TimestampTz started = full_scan ? GetCurrentTimestamp() : 0;
      int64 bytes = ready_bytes;
      const IdPosition from = claim_floor.ClaimFrom();
      ready = RunClaim(claim_ready_plan, ready_limit, &bytes, now, &from, &ceiling);
      // A full scan walks every event left in place (no route takes it): it
      // may take at most 1 / ClaimFloor::kFullScanTimeShare of the time.
      if (full_scan) claim_floor.FullScanTook(GetCurrentTimestamp() - started);
      // A passed transaction committed: if this claim's snapshot saw its
      // events, those below where it started were not claimed, while later
      // ones of their keys may have been. The floor goes back to its first
      // emit (ClaimFloor::HolderCommitted): the first batch is claimed again
      // from there (our own locks do not hide its rows), a later one is left
      // for the next cycle, and so is the first after two tries (more commits
      // may keep coming: the earlier batches go out).
      if (!LookBackForHolders()) break;
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
    const bool claims_changed = claim_floor.RoutesChangedInCycle();
    // Next floor: everything visible from where the claim started up to the
    // last row claimed (or all of it, when the claim came back short) has
    // been claimed.
    const bool full = ready_limit > 0 && (nready == ready_limit || ready.cut);
    if (full) {
      claim_floor.ReadyClaimCameBackFull(ClaimedId(ready, nready - 1));
    } else if (ready_limit > 0) {
      claim_floor.ReadyClaimCameBackShort();
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
  // if it aborts, the rows claimed here are pending again below where the
  // window left it.
  claim_floor.WindowEnded();

  for (int w = 0; w < nbatches; ++w) FinishBatch(dispatcher, window[w], interrupted, stats);

  // What the retry index holds now (our outcomes are written: this
  // transaction sees them).
  NoteRetriesAfterCycle(now, claim_retries, retries_left, stats->earliest_retry);
  return stats->claimed;
}

void CommitClaimFloor() { claim_floor.Committed(); }

void ForgetClaimFloor() {
  claim_floor.Aborted();
  ForgetRetryDue();  // the aborted cycle's reading went with it
}

void NoteRoutesLoaded(const Dispatcher *dispatcher) {
  // Events of topics a route takes now may lie below the floor, left in
  // place while none did: start from the beginning (at once, and at the
  // commit of a window that is open).
  if (SetDeliverablePatterns(dispatcher)) claim_floor.RoutesChanged();
  ForgetRetryDue();  // the load released events waiting for a route, due now
}

bool HasDeliverableRoutes() { return DeliverableCount() > 0; }

TimestampTz LastClaimsAt() { return last_claims_at; }

const char *PublisherStatement(const char *name) {
  if (strcmp(name, "claim_retry") == 0) return kClaimRetrySql;
  if (strcmp(name, "claim_ready") == 0) return kClaimReadySql;
  return nullptr;
}

}  // namespace outbox
