// The launcher: one background worker per server, connected to no database,
// that keeps outbox.workers publishers running in every database where the
// extension is installed.
//
// It cannot look into a database's catalogs (it connects to none), so it
// learns where the extension is from the publishers: it starts publisher 0 in
// every database whose state is unknown; the publisher reports present (and
// stays) or absent (and exits). Publishers 1 .. outbox.workers-1 start once
// the extension is known to be present. CREATE EXTENSION marks its database unknown at
// commit and wakes the launcher, so publishing starts within a second.
//
// Starts only once recovery has finished (BgWorkerStart_RecoveryFinished):
// a hot standby runs no launcher and publishes nothing; after promotion the
// launcher starts and the new primary publishes what is pending.
//
// Invariants: `running` below is local to the launcher process. A publisher
// that exits while its database still has the extension (an error the
// publisher could not survive, or a crash) is restarted after a backoff that
// doubles up to a minute, so nothing crash-loops.
#include "worker.hpp"

#include "guc.hpp"
#include "shmem.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace {

constexpr long kScanIntervalMs = 5000;  // how often pg_database is re-read
constexpr long kRestartBackoffMaxMs = 60000;

struct Publisher {
  BackgroundWorkerHandle *handle;
  TimestampTz started_at;
  TimestampTz next_start;  // not before this time
  int failures;            // exits while the extension was still there
};

struct Running {
  Oid dboid;
  Publisher publishers[kMaxWorkersPerDatabase];  // by index; the first outbox.workers used
};

Running *running = nullptr;  // one per shared slot, in TopMemoryContext
int nrunning = 0;

void ClearLauncher(int code, Datum arg) {
  if (Shared() != nullptr) pg_atomic_write_u32(&Shared()->launcher_procno, kNoProc);
}

struct DatabaseList {
  Oid *oids;
  char **names;
  int count;
};

// Databases that accept connections and are not templates.
DatabaseList ListDatabases(MemoryContext into) {
  DatabaseList list{nullptr, nullptr, 0};
  StartTransactionCommand();
  (void)GetTransactionSnapshot();
  Relation rel = table_open(DatabaseRelationId, AccessShareLock);
  TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
  int capacity = 16;
  MemoryContext old = MemoryContextSwitchTo(into);
  list.oids = static_cast<Oid *>(palloc(sizeof(Oid) * capacity));
  list.names = static_cast<char **>(palloc(sizeof(char *) * capacity));
  MemoryContextSwitchTo(old);
  HeapTuple tup;
  while ((tup = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
    Form_pg_database db = reinterpret_cast<Form_pg_database>(GETSTRUCT(tup));
    if (!db->datallowconn || db->datistemplate) continue;
    old = MemoryContextSwitchTo(into);
    if (list.count == capacity) {
      capacity *= 2;
      list.oids = static_cast<Oid *>(repalloc(list.oids, sizeof(Oid) * capacity));
      list.names = static_cast<char **>(repalloc(list.names, sizeof(char *) * capacity));
    }
    list.oids[list.count] = db->oid;
    list.names[list.count] = pstrdup(NameStr(db->datname));
    list.count++;
    MemoryContextSwitchTo(old);
  }
  table_endscan(scan);
  table_close(rel, AccessShareLock);
  CommitTransactionCommand();
  return list;
}

Running *RunningFor(Oid dboid) {
  for (int i = 0; i < nrunning; ++i) {
    if (running[i].dboid == dboid) return &running[i];
  }
  for (int i = 0; i < nrunning; ++i) {
    if (!OidIsValid(running[i].dboid)) {
      memset(&running[i], 0, sizeof running[i]);
      running[i].dboid = dboid;
      return &running[i];
    }
  }
  return nullptr;
}

bool IsAlive(const Publisher &p) {
  if (p.handle == nullptr) return false;
  pid_t pid;
  const BgwHandleStatus status = GetBackgroundWorkerPid(p.handle, &pid);
  return status == BGWH_STARTED || status == BGWH_NOT_YET_STARTED;
}

bool AnyAlive(const Running &r) {
  for (int w = 0; w < guc::workers; ++w) {
    if (IsAlive(r.publishers[w])) return true;
  }
  return false;
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
  if (!RegisterDynamicBackgroundWorker(&worker, &handle)) {
    ereport(WARNING, (errmsg("outbox: could not start a publisher for database \"%s\"", datname),
                      errhint("Raise max_worker_processes.")));
    return false;
  }
  p->handle = handle;
  p->started_at = GetCurrentTimestamp();
  return true;
}

// Returns how long the launcher may sleep: until the next scan, or until a
// publisher's restart backoff ends, whichever comes first.
long Reconcile(MemoryContext scratch) {
  DatabaseList dbs = ListDatabases(scratch);
  const TimestampTz now = GetCurrentTimestamp();

  // Forget databases that are gone.
  for (int i = 0; i < nrunning; ++i) {
    if (!OidIsValid(running[i].dboid)) continue;
    bool exists = false;
    for (int j = 0; j < dbs.count && !exists; ++j) exists = dbs.oids[j] == running[i].dboid;
    if (!exists && !AnyAlive(running[i])) {
      ReleaseSlot(running[i].dboid);
      running[i].dboid = InvalidOid;
    }
  }

  for (int j = 0; j < dbs.count; ++j) {
    DatabaseSlot *slot = SlotFor(dbs.oids[j]);
    Running *r = RunningFor(dbs.oids[j]);
    if (slot == nullptr || r == nullptr) continue;  // more databases than worker slots
    for (int w = 0; w < guc::workers; ++w) {
      Publisher *p = &r->publishers[w];
      if (IsAlive(*p)) continue;
      const auto state = static_cast<ExtensionState>(pg_atomic_read_u32(&slot->extension_state));
      const bool paused = static_cast<TimestampTz>(pg_atomic_read_u64(&slot->paused_until)) > now;
      if (p->handle != nullptr) {
        // It exited. Fine if the extension is gone or the database is
        // paused; otherwise it failed: back off before the next start.
        p->handle = nullptr;
        if (state != ExtensionState::kAbsent && !paused) {
          p->failures = now - p->started_at > kRestartBackoffMaxMs * 1000L ? 1 : p->failures + 1;
          long wait = 1000L << (p->failures < 6 ? p->failures : 6);
          if (wait > kRestartBackoffMaxMs) wait = kRestartBackoffMaxMs;
          p->next_start = TimestampTzPlusMilliseconds(now, wait);
          if (guc::workers > 1) {
            ereport(LOG, (errmsg("outbox: publisher %d for database \"%s\" exited; restarting "
                                 "in %ld s",
                                 w, dbs.names[j], wait / 1000)));
          } else {
            ereport(LOG,
                    (errmsg("outbox: publisher for database \"%s\" exited; restarting in %ld s",
                            dbs.names[j], wait / 1000)));
          }
        }
      }
      if (state == ExtensionState::kAbsent || paused || now < p->next_start) continue;
      // Only publisher 0 finds out whether the extension is there.
      if (w > 0 && state != ExtensionState::kPresent) continue;
      if (!StartPublisher(dbs.oids[j], w, p, dbs.names[j])) break;
    }
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
  return wait;
}

}  // namespace

void RegisterLauncher() {
  BackgroundWorker worker;
  memset(&worker, 0, sizeof worker);
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = 10;  // seconds, after a crash of the launcher itself
  snprintf(worker.bgw_library_name, BGW_MAXLEN, "outbox");
  snprintf(worker.bgw_function_name, BGW_MAXLEN, "outbox_launcher_main");
  snprintf(worker.bgw_name, BGW_MAXLEN, "outbox launcher");
  snprintf(worker.bgw_type, BGW_MAXLEN, "outbox launcher");
  RegisterBackgroundWorker(&worker);
}

}  // namespace outbox

void outbox_launcher_main(Datum main_arg) {
  using namespace outbox;
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
  BackgroundWorkerUnblockSignals();
  BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);
  if (Shared() == nullptr) proc_exit(0);
  pg_atomic_write_u32(&Shared()->launcher_procno, MyProc->pgprocno);
  on_shmem_exit(ClearLauncher, 0);

  nrunning = Shared()->nslots;
  running =
      static_cast<Running *>(MemoryContextAllocZero(TopMemoryContext, sizeof(Running) * nrunning));
  MemoryContext scratch =
      AllocSetContextCreate(TopMemoryContext, "outbox launcher", ALLOCSET_DEFAULT_SIZES);
  ereport(LOG, (errmsg("outbox: launcher started (%d publisher%s per database)", guc::workers,
                       guc::workers == 1 ? "" : "s")));

  while (!ShutdownRequestPending) {
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
    }
    const long wait = Reconcile(scratch);
    MemoryContextReset(scratch);
    // Woken by CREATE EXTENSION, by publishers exiting (bgw_notify_pid), by
    // DROP DATABASE ending a pause, or by the timeout for new databases and
    // for restarts that were waiting for their backoff.
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, wait,
                    PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
  }
  proc_exit(0);
}
