// How the launcher backs off from a database's publishers: one that exits
// while the extension is there is started again after a backoff that doubles
// from 1 s up to 10 s (back to 1 s once one ran for 10 s), so a publisher
// that cannot start never crash-loops and one that was terminated is back
// within seconds. And what it remembers of databases whose probe failed
// (their publisher 0 exited before it could tell whether the extension is
// there: a lock held on the database, say), beyond the entry it keeps for a
// database in play. That entry goes when the database gives its shared slot
// back (it waits over a limit); without this memory its probe failures
// started from zero at every new probe, it never counted as a database whose
// probes keep failing, and a role holding locks on its own databases kept
// the probe places busy for good.
//
// Runs in the launcher only; the memory lives in TopMemoryContext and holds
// no pointer into a transaction's memory.
#pragma once

#include "pg_bridge.hpp"
#include "publisher/launcher_databases.hpp"

extern "C" {
#include "postmaster/bgworker.h"
#include "utils/timestamp.h"
}

namespace outbox {

// One publisher of a database, as the launcher started it.
struct Publisher {
  BackgroundWorkerHandle *handle;  // nullptr: none started by this launcher, or it exited
  TimestampTz started_at;
  uint64 started_generation;  // the extension's generation when it was started
  TimestampTz next_start;     // not before this time
  int failures;               // exits while the extension was still there
};

// Publisher `w` (started here) of database `datname` is gone: its handle is
// freed, and unless the extension went or came again (`word`, the slot's
// extension word) or the database was paused, it counts a failure and waits
// out its backoff, with a LOG line.
// A failed probe (publisher 0 while the extension's state is unknown) is
// also remembered at once (RememberProbeFailures) for `dboid`, so that
// OwnerProbesFail sees it.
void NoteExit(Publisher *p, int w, Oid dboid, const char *datname, uint64 word, bool paused,
              TimestampTz now);
constexpr long kRestartBackoffMaxMs = 10000;

// Keep `failures` and `next_start` of the database's probe. At most
// kMaxRememberedProbes databases: past that, the oldest record goes.
void RememberProbeFailures(Oid dboid, int failures, TimestampTz next_start);
// The record of `dboid`, if any (it stays until forgotten).
bool RecallProbeFailures(Oid dboid, int *failures, TimestampTz *next_start);
// The database was found with the extension, or marked absent.
void ForgetProbeFailures(Oid dboid);
constexpr int kMaxRememberedProbes = 1024;

// Whether a database of `owner` (in `dbs`) has a remembered failed probe.
// Such an owner's databases take a probe place only when no database of
// another owner waits for one: a role that keeps its databases locked
// (prepared ALTER DATABASE ... RENAME, say), or two such roles together,
// would otherwise hold every probe place, probe after failing probe, while
// a tenant's new database waited its turn in OID order.
bool OwnerProbesFail(const DatabaseList &dbs, Oid owner);

}  // namespace outbox
