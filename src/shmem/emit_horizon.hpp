// The emit horizon: how far back an event that is not committed yet may lie.
//
// The publisher's ready claim starts from a remembered position (claim.cpp,
// core/claim_floor.hpp) and may only move it up to a bound below which no
// event can still appear. An event appears when its transaction commits,
// with the id (the time) it got when emit() ran, however long before. So
// every transaction that has emitted and not ended publishes here, in shared
// memory, a time no later than its first event's id; the bound is the oldest
// of them (and of the prepared transactions that emitted) in the database,
// but for those a publisher chose to pass (ReadEmitHorizon), which report
// their commit.
//
// Why not pg_stat_activity: an emit() that waited for a lock took its id
// before its transaction had an xid, so it was invisible there;
// track_activities = off hides every transaction; and any writing
// transaction, emitting or not, would hold the bound back.
//
// Exists only when outbox is preloaded; every function is a no-op (or
// answers "no horizon") otherwise.
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace outbox {

// Shared memory (called from shmem.cpp's hooks).
Size EmitHorizonShmemSize();
void EmitHorizonShmemInit();
// Register the transaction callback (every backend, from _PG_init).
void InstallEmitHorizon();

// emit(): call before reading the clock for the event's id. The first call
// in a transaction publishes "now" for it; later calls cost a flag test.
void NoteEmitting();

struct EmitHorizon {
  TimestampTz oldest;  // oldest first-emit time of an open transaction; 0: none
};

// For the publisher of database `dboid`: the horizon, as seen after reading
// the clock (the caller read `now` before calling). Prepared transactions
// that prepared while outbox was loaded count with their first-emit time if
// they emitted; others (prepared before the server restarted) are not
// waited for: they may have emitted anything, and count from their COMMIT
// PREPARED on (NoteCommittingPrepared), whose report makes the claims look
// back to the beginning.
//
// Passing: an open transaction that first emitted before `pass_before` (0:
// none) is marked passed and left out of `oldest`, unless it is already
// committing. A passed transaction reports its first-emit time when it
// commits (at PRE_COMMIT, or before COMMIT PREPARED runs), before its events
// become visible, to every publisher of the database (shmem.hpp:
// ReportHolderCommit), so a claim whose snapshot saw its events is followed
// by a look at the mailbox that finds it. Publishers of the database leave
// every passed transaction out, whoever passed it, until it reports; from
// then until it has ended (its commit is visible) it counts in `oldest`
// again.
EmitHorizon ReadEmitHorizon(Oid dboid, TimestampTz pass_before);

// COMMIT PREPARED of `xid` is about to run (commit_prepared.cpp, after
// PostgreSQL's checks): no publisher passes it from now on, and if one did,
// its commit is reported. Returns false for a transaction outbox did not see
// prepare (before the server started): it counts as having emitted at the
// beginning until it has ended, and its commit is reported as such.
bool NoteCommittingPrepared(TransactionId xid);
// That COMMIT PREPARED failed (an error, a cancel): the transaction is no
// longer committing, so it is passed again rather than holding the claims at
// its first emit (at the beginning, for one of unknown emits) while it stays
// prepared; its next COMMIT PREPARED reports it. Takes only a spinlock:
// called from the hook's error path.
void NoteCommitPreparedFailed(TransactionId xid);

// What a prepared transaction's commit will need to do for outbox, recorded
// when it prepares (the session that commits it later cannot know): flags
// of the transaction that prepares are added at XACT_EVENT_PRE_PREPARE,
// after its entry exists.
constexpr uint32 kPreparedEmitted = 1;   // it emitted: wake the publishers
constexpr uint32 kPreparedReload = 2;    // it changed sinks or routes
constexpr uint32 kPreparedAnnounce = 4;  // it created the extension
void AddPreparedFlags(TransactionId xid, uint32 flags);
// The flags of prepared transaction `xid`; false when it is not known (it
// prepared before the server started, or the table was full).
bool PreparedFlags(TransactionId xid, uint32 *flags);

}  // namespace outbox
