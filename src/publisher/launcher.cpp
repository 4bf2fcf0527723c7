// The launcher: one background worker per server, connected to no database,
// that keeps outbox.workers publishers running in every database where the
// extension is installed.
//
// It cannot look into a database's catalogs (it connects to none), so it
// learns where the extension is from the publishers: it probes a database
// by starting its publisher 0, which reports present (and stays) or absent
// (and exits). A database found without the extension gives its shared slot
// back and is remembered here as such, so it is probed once per launcher
// lifetime and holds no shared slot (else every connectable database would
// take one). CREATE EXTENSION takes a slot and bumps its
// generation at commit and wakes the launcher (shmem.hpp), so publishing
// starts within a second; a database created from a template that has the
// extension is a new OID, probed like any new database. Publishers 1 ..
// outbox.workers-1 start once the extension is known to be present. At most
// kMaxProbes probes run at once, so probing many databases never takes
// every worker process, and one per owner that is not a superuser (its
// databases' failed probes are remembered, and such an owner yields probe
// places to other owners' databases: launcher_backoff.hpp).
//
// Starts only once recovery has finished (BgWorkerStart_RecoveryFinished):
// a hot standby runs no launcher and publishes nothing; after promotion the
// launcher starts and the new primary publishes what is pending.
//
// Failures and restarts:
// - What runs where lives in shared memory: a publisher holds its place
//   (database, index) there from start to exit, so a launcher that restarts
//   knows the publishers its predecessor started, and two publishers with
//   the same database and index cannot exist (the second finds the place
//   taken and exits).
// - An ERROR in the launcher (a cancel included) is logged and the loop
//   carries on after a short pause; any exit, SIGTERM included, has exit
//   code 1, so the postmaster starts it again after bgw_restart_time (1 s).
//   A SIGKILL makes the postmaster reinitialise every process, as for any
//   backend.
// - A publisher that exits while its database still has the extension is
//   started again after a backoff (launcher_backoff.hpp).
//
// Invariants: `running`, `absent` and `warned` are local to the launcher
// process, in TopMemoryContext; they hold no pointers into memory a
// transaction owns.
#include "publisher/publisher.hpp"

#include <csignal>

#include "fault_injection.hpp"
#include "guc.hpp"
#include "shmem/shmem.hpp"
#include "publisher/launcher_databases.hpp"
#include "publisher/launcher_backoff.hpp"
#include "publisher/worker_session.hpp"

extern "C" {
#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace {

constexpr long kScanIntervalMs = 5000;  // how often pg_database is re-read
constexpr long kErrorPauseMs = 1000;    // after an ERROR in the launcher itself
constexpr int kMaxProbes = 2;           // databases probed at once
// A database whose probe failed this often in a row (its publisher exited
// before finding out whether the extension is there: it cannot connect, say)
// is treated as one without the extension until CREATE EXTENSION announces
// itself there or the absent set is forgotten (kReprobeIntervalMs): it must
// not hold a shared slot and restart a process every 10 s forever.
constexpr int kMaxProbeFailures = 3;

struct Running {
  Oid dboid;
  Publisher publishers[kMaxWorkersPerDatabase];  // by index; the first outbox.workers used
  // It had a publisher with the extension present: it keeps its place among
  // outbox.max_databases and its owner's outbox.max_databases_per_owner
  // while its publishers restart (after an exit, a terminate) or step aside
  // (a pause for CREATE DATABASE ... TEMPLATE of it), so a database waiting
  // for a place never takes it meanwhile. Cleared with the entry: when the
  // database is dropped or found without the extension (or as a copy).
  bool placed;
  // Its publishers were told to stop (its owner over its share, or the
  // database no longer in the list): until they are gone it holds no place,
  // and none is started.
  bool evicted;
};

Running *running = nullptr;  // one per shared slot, in TopMemoryContext
int nrunning = 0;

// Databases found without the extension (their slot given back).
struct OidSet {
  Oid *oids = nullptr;  // TopMemoryContext
  int count = 0;
  int capacity = 0;
};
OidSet absent;
uint32 seen_unslotted = 0;
// The absent set is forgotten this often, so that a database taken for one
// without the extension by mistake (a probe that failed for a while, a
// CREATE EXTENSION whose announcement found no free slot) is looked at again.
constexpr long kReprobeIntervalMs = 10 * 60 * 1000;
TimestampTz absent_since = 0;

bool Contains(const OidSet &set, Oid oid) {
  for (int i = 0; i < set.count; ++i) {
    if (set.oids[i] == oid) return true;
  }
  return false;
}

void Add(OidSet *set, Oid oid) {
  if (Contains(*set, oid)) return;
  if (set->count == set->capacity) {
    set->capacity = set->capacity == 0 ? 16 : set->capacity * 2;
    set->oids = static_cast<Oid *>(
        set->oids == nullptr ? MemoryContextAlloc(TopMemoryContext, sizeof(Oid) * set->capacity)
                             : repalloc(set->oids, sizeof(Oid) * set->capacity));
  }
  set->oids[set->count++] = oid;
}

void Remove(OidSet *set, Oid oid) {
  for (int i = 0; i < set->count; ++i) {
    if (set->oids[i] == oid) set->oids[i--] = set->oids[--set->count];
  }
}

void ClearLauncher(int code, Datum arg) {
  if (Shared() != nullptr) pg_atomic_write_u32(&Shared()->launcher_procno, kNoProc);
}

Running *FindRunning(Oid dboid) {
  for (int i = 0; i < nrunning; ++i) {
    if (running[i].dboid == dboid) return &running[i];
  }
  return nullptr;
}

Running *RunningFor(Oid dboid) {
  if (Running *r = FindRunning(dboid)) return r;
  for (int i = 0; i < nrunning; ++i) {
    if (!OidIsValid(running[i].dboid)) {
      memset(&running[i], 0, sizeof running[i]);
      running[i].dboid = dboid;
      Publisher &probe = running[i].publishers[0];
      (void)RecallProbeFailures(dboid, &probe.failures, &probe.next_start);
      return &running[i];
    }
  }
  return nullptr;
}

// The entry goes with the database's slot; a failing probe's count stays.
void LetGo(Running *r) {
  const Publisher &probe = r->publishers[0];
  if (probe.failures > 0 && !r->placed) {
    RememberProbeFailures(r->dboid, probe.failures, probe.next_start);
  }
  r->dboid = InvalidOid;
}

bool IsAlive(const Publisher &p) {
  if (p.handle == nullptr) return false;
  pid_t pid;
  const BgwHandleStatus status = GetBackgroundWorkerPid(p.handle, &pid);
  return status == BGWH_STARTED || status == BGWH_NOT_YET_STARTED;
}

bool AnyAlive(const Running &r) {
  for (int w = 0; w < kMaxWorkersPerDatabase; ++w) {
    if (IsAlive(r.publishers[w])) return true;
  }
  return false;
}

bool Holds(DatabaseSlot *slot, int w) {
  return pg_atomic_read_u32(&slot->worker_procno[w]) != kNoProc;
}

// Tell every publisher of the database to stop: those this launcher started
// through their handles, those a previous launcher started through the
// process that holds their place (its pid read from its PGPROC while it
// holds the place).
void StopPublishers(Running *r, DatabaseSlot *slot) {
  for (int w = 0; w < kMaxWorkersPerDatabase; ++w) {
    if (r != nullptr && r->publishers[w].handle != nullptr) {
      TerminateBackgroundWorker(r->publishers[w].handle);
      continue;
    }
    const uint32 procno = pg_atomic_read_u32(&slot->worker_procno[w]);
    if (procno == kNoProc) continue;
    const int pid = GetPGProcByNumber(procno)->pid;
    if (pid != 0) (void)kill(pid, SIGTERM);
  }
}

bool StartPublisher(Oid dboid, int index, Publisher *p, const char *datname) {
  BackgroundWorker worker;
  memset(&worker, 0, sizeof worker);
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = BGW_NEVER_RESTART;  // the launcher decides
  snprintf(worker.bgw_library_name, BGW_MAXLEN, "outbox");
  snprintf(worker.bgw_function_name, BGW_MAXLEN, "outbox_publisher_main");
  if (guc::workers > 1) {
    snprintf(worker.bgw_name, BGW_MAXLEN, "outbox publisher %d for database %s", index, datname);
  } else {
    snprintf(worker.bgw_name, BGW_MAXLEN, "outbox publisher for database %s", datname);
  }
  snprintf(worker.bgw_type, BGW_MAXLEN, "outbox publisher");
  worker.bgw_main_arg = ObjectIdGetDatum(dboid);
  worker.bgw_extra[0] = static_cast<char>(index);  // publisher index within the database
  worker.bgw_notify_pid = MyProcPid;
  BackgroundWorkerHandle *handle = nullptr;
  OUTBOX_FAULT("launcher.before_start");
  // The handle outlives this scan: TopMemoryContext (freed in NoteExit).
  MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
  const bool registered = RegisterDynamicBackgroundWorker(&worker, &handle);
  MemoryContextSwitchTo(old);
  if (!registered) return false;
  p->handle = handle;
  p->started_at = GetCurrentTimestamp();
  OUTBOX_FAULT("launcher.after_start");
  return true;
}

// Returns how long the launcher may sleep: until the next scan, or until a
// publisher's restart backoff ends, whichever comes first.
long Reconcile(MemoryContext scratch) {
  OUTBOX_FAULT("launcher.scan");
  SharedState *shared = Shared();
  // An announcement that found every slot taken: look at every database
  // again, as at start-up.
  const uint32 unslotted = pg_atomic_read_u32(&shared->unslotted_announcements);
  const TimestampTz started = GetCurrentTimestamp();
  if (unslotted != seen_unslotted || started - absent_since >= kReprobeIntervalMs * 1000L) {
    absent.count = 0;
    seen_unslotted = unslotted;
    absent_since = started;
  }
  // The slots' extension words before the database list is read: a slot is
  // freed only if nothing was announced since (ReleaseSlotIf).
  uint64 *seen =
      static_cast<uint64 *>(MemoryContextAlloc(scratch, sizeof(uint64) * shared->nslots));
  for (int i = 0; i < shared->nslots; ++i) seen[i] = ReadExtension(&shared->slots[i]);

  DatabaseList dbs = ListDatabases(scratch);
  const TimestampTz now = GetCurrentTimestamp();

  // Databases that are gone: forget them once their publishers are.
  for (int i = 0; i < shared->nslots; ++i) {
    const Oid dboid = shared->slots[i].dboid;
    if (!OidIsValid(dboid)) continue;
    bool exists = false;
    for (int j = 0; j < dbs.count && !exists; ++j) exists = dbs.oids[j] == dboid;
    if (exists) continue;
    Running *r = FindRunning(dboid);
    if ((r != nullptr && AnyAlive(*r)) || AnyPublisher(&shared->slots[i])) {
      // Dropped, or made a template or closed to connections by its owner
      // (ALTER DATABASE ... IS_TEMPLATE, ALLOW_CONNECTIONS false): its
      // publishers, connected before, would go on uncounted. They stop.
      StopPublishers(r, &shared->slots[i]);
      continue;
    }
    if (ReleaseSlotIf(dboid, seen[i]) && r != nullptr) r->dboid = InvalidOid;
  }
  for (int i = 0; i < nrunning; ++i) {
    if (OidIsValid(running[i].dboid) && FindSlot(running[i].dboid) == nullptr &&
        !AnyAlive(running[i])) {
      running[i].dboid = InvalidOid;
    }
  }
  for (int i = 0; i < absent.count; ++i) {
    bool exists = false;
    for (int j = 0; j < dbs.count && !exists; ++j) exists = dbs.oids[j] == absent.oids[i];
    if (!exists) Remove(&absent, absent.oids[i--]);
  }

  // Probes under way: publisher 0 of a database whose state is unknown. An
  // owner that is not a superuser has one at a time: databases it keeps
  // locked (whose probes wait, fail and are tried again) leave the other
  // probe place to other owners' databases.
  int probes = 0;
  Oid *probing =
      static_cast<Oid *>(MemoryContextAlloc(scratch, sizeof(Oid) * (shared->nslots + kMaxProbes)));
  int nprobing = 0;
  for (int i = 0; i < shared->nslots; ++i) {
    DatabaseSlot *slot = &shared->slots[i];
    if (!OidIsValid(slot->dboid) || StateOf(ReadExtension(slot)) != ExtensionState::kUnknown) {
      continue;
    }
    const Running *r = FindRunning(slot->dboid);
    if (!Holds(slot, 0) && (r == nullptr || !IsAlive(r->publishers[0]))) continue;
    ++probes;
    const int j = IndexOf(dbs, slot->dboid);
    if (j >= 0 && !dbs.trusted[j]) probing[nprobing++] = dbs.owners[j];
  }
  // Databases with a publisher now (or keeping their place while it
  // restarts: Running::placed), for outbox.max_databases, and the owners of
  // those a superuser does not own, for outbox.max_databases_per_owner: a
  // database that has none gets one only below both limits (probes
  // included: a probe that finds the extension stays as its publisher).
  int publishing = 0;
  Oid *owners_publishing =
      static_cast<Oid *>(MemoryContextAlloc(scratch, sizeof(Oid) * shared->nslots));
  int nowners_publishing = 0;
  for (int i = 0; i < shared->nslots; ++i) {
    DatabaseSlot *slot = &shared->slots[i];
    if (!OidIsValid(slot->dboid)) continue;
    const Running *r = FindRunning(slot->dboid);
    if ((r != nullptr && (AnyAlive(*r) || r->placed)) || AnyPublisher(slot)) {
      ++publishing;
      const int j = IndexOf(dbs, slot->dboid);
      if (j >= 0 && !dbs.trusted[j]) owners_publishing[nowners_publishing++] = dbs.owners[j];
    }
  }
  const bool limited = guc::max_databases > 0;
  // Whether database j's owner has its share of places already.
  auto owner_full = [&](int j) {
    if (guc::max_databases_per_owner <= 0 || dbs.trusted[j]) return false;
    return OwnersCount(owners_publishing, nowners_publishing, dbs.owners[j]) >=
           guc::max_databases_per_owner;
  };
  // Databases of owners whose probes failed wait while another owner's
  // database waits for a probe (OwnerProbesFail) it may have.
  bool others_wait = false;
  const bool at_limit = limited && publishing >= guc::max_databases;
  for (int j = 0; j < dbs.count && !others_wait && !at_limit; ++j) {
    if ((!dbs.trusted[j] && OwnerProbesFail(dbs, dbs.owners[j])) || owner_full(j)) continue;
    DatabaseSlot *slot = FindSlot(dbs.oids[j]);
    const Running *r = FindRunning(dbs.oids[j]);
    others_wait = slot == nullptr
                      ? !Contains(absent, dbs.oids[j])
                      : StateOf(ReadExtension(slot)) == ExtensionState::kUnknown &&
                            !Holds(slot, 0) && (r == nullptr || !IsAlive(r->publishers[0]));
  }
  auto owner_probing = [&](int j) {
    if (dbs.trusted[j]) return false;
    return OwnersCount(probing, nprobing, dbs.owners[j]) > 0 ||
           (others_wait && OwnerProbesFail(dbs, dbs.owners[j]));
  };
  int unchecked_at_limit = 0, unchecked_at_owner_limit = 0;

  bool workers_left = true;
  int unprobed = 0;
  // Per owner that is not a superuser, its databases with places met so far
  // in this scan (oldest first): those past its share give them up, however
  // they came by them (an owner change, a launcher restart).
  Oid *ranked_owner = static_cast<Oid *>(MemoryContextAlloc(scratch, sizeof(Oid) * shared->nslots));
  int nranked = 0;
  // Every database is looked at, also once no background worker is free:
  // the places past an owner's share are given up all the same.
  for (int j = 0; j < dbs.count; ++j) {
    const Oid dboid = dbs.oids[j];
    const char *datname = dbs.names[j];
    DatabaseSlot *slot = FindSlot(dboid);
    if (slot == nullptr) {
      if (!workers_left || Contains(absent, dboid) || probes >= kMaxProbes || owner_probing(j)) {
        continue;
      }
      // Not even probed: a probe that finds the extension stays.
      if (limited && publishing >= guc::max_databases) {
        ++unchecked_at_limit;
        continue;
      }
      if (owner_full(j)) {
        ++unchecked_at_owner_limit;
        continue;
      }
      slot = SlotFor(dboid);  // a fresh slot: state unknown, to be probed
      if (slot == nullptr) {
        ++unprobed;  // we do not know whether it has the extension
        continue;
      }
    }
    Running *r = RunningFor(dboid);
    if (r == nullptr) continue;  // as many databases in play as shared slots
    const uint64 word = ReadExtension(slot);
    const ExtensionState state = StateOf(word);
    const bool paused = static_cast<TimestampTz>(pg_atomic_read_u64(&slot->paused_until)) > now;
    for (int w = 0; w < kMaxWorkersPerDatabase; ++w) {
      Publisher *p = &r->publishers[w];
      if (p->handle != nullptr && !IsAlive(*p) && !Holds(slot, w)) {
        NoteExit(p, w, dboid, datname, word, paused || r->evicted, now);
      }
    }
    const bool probe_failed =
        state == ExtensionState::kUnknown && r->publishers[0].failures >= kMaxProbeFailures;
    if (state == ExtensionState::kAbsent || probe_failed) {
      // Found without the extension (or never found out): give the slot
      // back, remember why.
      if (!AnyAlive(*r) && !AnyPublisher(slot) && ReleaseSlotIf(dboid, word)) {
        if (probe_failed) {
          ereport(LOG, (errmsg("outbox: could not find out whether database \"%s\" has the "
                               "extension (its publisher exited %d times before it could "
                               "tell); trying again when CREATE EXTENSION runs there, or in "
                               "10 minutes",
                               datname, kMaxProbeFailures)));
        }
        Add(&absent, dboid);
        ForgetProbeFailures(dboid);
        r->dboid = InvalidOid;
      }
      continue;
    }
    Remove(&absent, dboid);
    if (state == ExtensionState::kPresent) ForgetProbeFailures(dboid);
    if (r->evicted && !AnyAlive(*r) && !AnyPublisher(slot)) r->evicted = false;
    const bool has_place = (!r->evicted && (AnyAlive(*r) || AnyPublisher(slot))) || r->placed;
    if (state == ExtensionState::kPresent && has_place) r->placed = true;
    if (has_place && !dbs.trusted[j] && guc::max_databases_per_owner > 0) {
      // Its owner's databases with places, oldest first: past the share
      // (the database was given to this owner, or the share was lowered, or
      // a restarted launcher found them all running), it gives its place
      // up and its publishers stop; the owner's older ones keep theirs.
      if (OwnersCount(ranked_owner, nranked, dbs.owners[j]) >= guc::max_databases_per_owner) {
        StopPublishers(r, slot);
        r->placed = false;
        r->evicted = true;
        ereport(WARNING,
                (errmsg("outbox: database \"%s\" gives up its publishers: its owner %s has "
                        "outbox.max_databases_per_owner (%d) older databases with publishers",
                        datname, dbs.owner_names[j], guc::max_databases_per_owner),
                 errdetail("Its events wait as pending until that owner has a place free.")));
        continue;
      }
      if (nranked < shared->nslots) ranked_owner[nranked++] = dbs.owners[j];
    }
    const bool over_limit = limited && publishing >= guc::max_databases;
    if (!has_place && (over_limit || owner_full(j))) {
      if (over_limit) {
        WarnOverLimit(dboid, datname, now);
      } else {
        WarnOverOwnerLimit(dboid, datname, dbs.owner_names[j], now);
      }
      // Its slot (an announcement's, CREATE EXTENSION or publish_here(), or
      // one kept from before) goes back once no publisher holds it, so that
      // databases waiting over the limits cannot hold every shared slot and
      // leave none for a database under them. This loop finds it again,
      // and probes it, once a place is free.
      if (!AnyAlive(*r) && !AnyPublisher(slot) && ReleaseSlotIf(dboid, word)) LetGo(r);
      continue;
    }
    if (r->evicted || !workers_left) continue;
    for (int w = 0; w < guc::workers; ++w) {
      Publisher *p = &r->publishers[w];
      // Alive if we started it and it runs, or if any publisher holds its
      // place (one our predecessor started, say).
      if (IsAlive(*p) || Holds(slot, w)) continue;
      if (paused || now < p->next_start) continue;
      // Only publisher 0 finds out whether the extension is there.
      if (w > 0 && state != ExtensionState::kPresent) continue;
      if (w == 0 && state == ExtensionState::kUnknown) {
        if (probes >= kMaxProbes || owner_probing(j)) continue;
        ++probes;
        if (!dbs.trusted[j]) probing[nprobing++] = dbs.owners[j];
      }
      p->started_generation = GenerationOf(word);
      const bool first = !AnyAlive(*r) && !AnyPublisher(slot) && !r->placed;
      if (!StartPublisher(dboid, w, p, datname)) {
        WarnCannotStart(dboid, datname, now, "no background worker slot is free");
        workers_left = false;  // none for the databases after it either
        break;
      }
      if (first) {
        ++publishing;
        if (!dbs.trusted[j] && nowners_publishing < shared->nslots) {
          owners_publishing[nowners_publishing++] = dbs.owners[j];
        }
      }
    }
  }
  WarnUnchecked(unchecked_at_limit, unchecked_at_owner_limit, now);

  if (unprobed > 0 && ShouldWarn(InvalidOid, now)) {
    // One line for them all: most of them probably lack the extension.
    ereport(WARNING,
            (errmsg("outbox: %d database%s not checked for the extension yet: every shared "
                    "slot (one per max_worker_processes) is taken by databases that have it",
                    unprobed, unprobed == 1 ? " is" : "s are"),
             errhint("Raise max_worker_processes (now %d).", max_worker_processes)));
  }

  long wait = kScanIntervalMs;
  for (int i = 0; i < nrunning; ++i) {
    if (!OidIsValid(running[i].dboid)) continue;
    for (int w = 0; w < guc::workers; ++w) {
      const Publisher &p = running[i].publishers[w];
      if (p.handle != nullptr || p.next_start <= now) continue;
      const long until = static_cast<long>((p.next_start - now) / 1000) + 1;
      if (until < wait) wait = until;
    }
  }
  if (!workers_left && wait > 1000) wait = 1000;  // a worker may be free soon
  return wait;
}

void LauncherMain() {
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
  BackgroundWorkerUnblockSignals();
  BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);
  if (Shared() == nullptr) proc_exit(1);
  PinWorkerSettings();
  pg_atomic_write_u32(&Shared()->launcher_procno, static_cast<uint32>(MyProcIndex()));
  on_shmem_exit(ClearLauncher, 0);

  nrunning = Shared()->nslots;
  running =
      static_cast<Running *>(MemoryContextAllocZero(TopMemoryContext, sizeof(Running) * nrunning));
  MemoryContext scratch =
      AllocSetContextCreate(TopMemoryContext, "outbox launcher", ALLOCSET_DEFAULT_SIZES);
  seen_unslotted = pg_atomic_read_u32(&Shared()->unslotted_announcements);
  ereport(LOG, (errmsg("outbox: launcher started (%d publisher%s per database)", guc::workers,
                       guc::workers == 1 ? "" : "s")));

  // Error recovery, as in PostgreSQL's own background processes: log, abort
  // whatever transaction was open, pause, carry on. Everything the loop
  // keeps between iterations lives in TopMemoryContext.
  sigjmp_buf local_sigjmp_buf;
  if (sigsetjmp(local_sigjmp_buf, 1) != 0) {
    HOLD_INTERRUPTS();
    error_context_stack = nullptr;
    EmitErrorReport();
    AbortCurrentTransaction();
    FlushErrorState();
    MemoryContextSwitchTo(TopMemoryContext);
    MemoryContextReset(scratch);
    RESUME_INTERRUPTS();
    (void)WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, kErrorPauseMs, PG_WAIT_EXTENSION);
  }
  PG_exception_stack = &local_sigjmp_buf;

  while (!ShutdownRequestPending) {
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
    }
    const long wait = Reconcile(scratch);
    MemoryContextReset(scratch);
    // Woken by CREATE EXTENSION, by publishers starting and exiting
    // (bgw_notify_pid, and their own wake-up at exit for those a previous
    // launcher started), by DROP DATABASE ending a pause, or by the timeout
    // for new databases and for restarts waiting for their backoff.
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, wait,
                    PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
  }
  // Exit code 1 whatever the reason: the postmaster restarts the launcher
  // (unless it is shutting down itself). Code 0 would unregister it for good.
  ereport(LOG, (errmsg("outbox: launcher stopping; the postmaster restarts it unless the "
                       "server is shutting down")));
  proc_exit(1);
}

}  // namespace

void RegisterLauncher() {
  BackgroundWorker worker;
  memset(&worker, 0, sizeof worker);
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = 1;  // seconds, after any exit of the launcher
  snprintf(worker.bgw_library_name, BGW_MAXLEN, "outbox");
  snprintf(worker.bgw_function_name, BGW_MAXLEN, "outbox_launcher_main");
  snprintf(worker.bgw_name, BGW_MAXLEN, "outbox launcher");
  snprintf(worker.bgw_type, BGW_MAXLEN, "outbox launcher");
  RegisterBackgroundWorker(&worker);
}

}  // namespace outbox

// The launcher's entry: one exception boundary around everything (nothing
// in it is expected to throw; if something does, the launcher exits with an
// error and the postmaster restarts it).
void outbox_launcher_main(Datum main_arg) {
  outbox::bridge::CaughtError error;
  auto body = [] { outbox::LauncherMain(); };
  (void)outbox::bridge::Guard(body, &error);
  ereport(FATAL,
          (errcode(error.sqlstate != 0 ? error.sqlstate : ERRCODE_INTERNAL_ERROR),
           errmsg("outbox: launcher stopped by an unexpected exception: %s", error.message)));
}
