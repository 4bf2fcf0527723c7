// Claiming events and recording what became of them: the SQL half of a
// publish cycle (the Dispatcher decides; this reads and writes rows).
#pragma once

#include "pg_bridge.hpp"

#include "dispatch.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace outbox {

// What one cycle did, for the outbox.workers view.
struct CycleStats {
  int claimed = 0;
  int published = 0;
  int failed = 0;              // attempts that failed (retry or dead)
  char last_error[256] = {0};  // of the last failed attempt, if any
  bool more_waiting = false;   // a claim stopped at outbox.max_batch_bytes
};

// One publish cycle. Requires: a transaction is open with an active snapshot
// and SPI connected; CurrentMemoryContext is short-lived (reset by the
// caller after the cycle).
//
// Claims up to outbox.batch_size due events with FOR UPDATE SKIP LOCKED
// (due retries first, then never-tried events), hands them to the
// dispatcher in id order, and writes each outcome before the caller commits.
// The row locks are held while the brokers answer: a crash or an abort at
// any point leaves every unacknowledged event pending. Returns how many
// events were claimed.
//
// `config_current(may_reload)` is called after each claim, before the batch
// is decided: it says whether the dispatcher's sinks and routes are still
// those of the database; if not, it reloads them when may_reload (no batch
// in flight yet) and says true, or says false, and the batch is left as it
// is (its events stay pending, for the next cycle). A transaction that
// changed routes and emitted in one go must be routed by its own routes.
using ConfigCheck = bool (*)(bool may_reload);
int ClaimAndPublish(Dispatcher *dispatcher, Sink::InterruptCheck interrupted,
                    ConfigCheck config_current, CycleStats *stats);

// Load outbox.sinks and outbox.routes into the dispatcher, let events that
// waited for a route flow again, and rebuild the per-key order state from
// the events waiting for a retry. Same requirements as ClaimAndPublish.
void LoadConfiguration(Dispatcher *dispatcher);

// When the earliest waiting event is due (0 if none waits for a time).
TimestampTz NextRetryAt();

// After the cycle's transaction committed: the ready claims' starting point
// moves to where that cycle's claims left it. After an abort, call
// ForgetClaimFloor instead: the point stays where the last committed cycle
// put it (the aborted cycle's rows are pending again, perhaps above it).
void CommitClaimFloor();
void ForgetClaimFloor();

// How many times this database's claim floors were reset (shmem.hpp's
// DatabaseSlot::floor_resets); provided by the publisher.
uint64 ClaimFloorResets();

// The SQL text of a statement the publisher runs ("claim_retry",
// "claim_ready"), for outbox.publisher_statements(); nullptr if unknown.
const char *PublisherStatement(const char *name);

}  // namespace outbox
