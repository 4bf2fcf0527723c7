// Claiming events and recording what became of them: the SQL half of a
// publish cycle (the Dispatcher decides; this reads and writes rows).
#pragma once

#include "pg_bridge.hpp"

#include "core/dispatch.hpp"
#include "publisher/outcomes.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace outbox {

// One publish cycle. Requires: a transaction is open with an active snapshot
// and SPI connected; CurrentMemoryContext is short-lived (reset by the
// caller after the cycle).
//
// Claims up to outbox.batch_size due events with FOR UPDATE SKIP LOCKED
// (due retries first, when one may be due, then never-tried events of topics
// an unpaused route takes), hands them to the dispatcher in id order, and
// writes each outcome before the caller commits.
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

// After the cycle's transaction committed: the ready claims' starting point
// moves to where that cycle's claims left it. After an abort, call
// ForgetClaimFloor instead: the point stays where the last committed cycle
// put it (the aborted cycle's rows are pending again, perhaps above it), and
// what the cycle read of the retry index is forgotten.
void CommitClaimFloor();
void ForgetClaimFloor();

// The dispatcher's routes were (re)loaded (LoadConfiguration): the ready
// claims take the topics of its unpaused routes from now on, and start from
// the beginning when that set changed. Needs a transaction (ERROR when out
// of memory).
void NoteRoutesLoaded(const Dispatcher *dispatcher);
// Whether any route delivers (is not paused): if none does, commits need not
// wake the publisher.
bool HasDeliverableRoutes();

// When the last cycle's claims were made (0 before the first): what they
// left alone and why was decided as of then.
TimestampTz LastClaimsAt();

// How many times this database's claim floors were reset (shmem.hpp's
// DatabaseSlot::floor_resets); provided by the publisher.
uint64 ClaimFloorResets();
// The earliest first emit of the passed transactions that committed since
// the last call (shmem.hpp: TakeHolderCommits for this publisher); false:
// none. Provided by the publisher.
bool TakeHolderCommitsForClaims(TimestampTz *since);

// The SQL text of a statement the publisher runs ("claim_retry",
// "claim_ready"), for outbox.publisher_statements(); nullptr if unknown.
const char *PublisherStatement(const char *name);

}  // namespace outbox
