// The publisher: one background worker per database (started by the
// launcher) that claims committed events and hands them to the brokers.
//
// Loop: wait on the process latch (set at commit by every transaction that
// emitted, by sink and route changes, and by signals), then run publish
// cycles until a claim comes back short; every minute, partition maintenance
// (one publisher per database does it). With outbox.workers > 1, before each
// cycle, it takes up or gives up key slots (key_ownership.hpp): it claims
// only events whose key it owns, and keyless ones.
// Each cycle is one transaction: claim with row locks, deliver, record the
// outcomes, commit. An ERROR aborts that transaction (events stay pending),
// is logged once, and the loop backs off and carries on: it never exits for
// a broker or SQL error, so it never crash-loops the server.
//
// Errors: the transaction's memory holds the
// claimed rows and the outcome arrays the dispatcher's batches in flight
// point into. The error path abandons every batch in flight (their events
// stay pending; what a broker already got may arrive again, at least once)
// before that memory goes, rebuilds the routing and order state from the
// database, and leaves the claims' starting point where the last committed
// cycle put it. Every call into C++ is noexcept or goes through CallCpp
// (pg_bridge.hpp), so a C++ exception becomes an ERROR handled the same
// way; the entry point has one more boundary around everything.
//
// The session's settings are pinned (worker_session.hpp): READ COMMITTED
// whatever the server's default isolation, no timeouts, a safe search_path.
//
// The waits between transactions (the idle sleep, the backoff after an
// error, the wake interval) are idle_wait.hpp's; what this process shows in
// the outbox.workers view, publisher_stats.hpp's.
//
// Signals: SIGHUP reloads settings; SIGTERM makes a delivery in flight stop
// waiting (what was acknowledged is recorded, the rest stays pending) and the
// process exit within a few seconds.
//
// Invariants: the Dispatcher (and the librdkafka producers it owns) lives in
// this process only and is used from this thread only. It is a global, so a
// longjmp never skips its destructor; it is destroyed at process exit.
#include "publisher/publisher.hpp"
#include "sinks/sink_factory.hpp"
#include "catalog/events_owner.hpp"

#include "publisher/claim.hpp"
#include "publisher/retry_due.hpp"
#include "publisher/configuration.hpp"
#include "publisher/idle_wait.hpp"
#include "catalog/database_home.hpp"
#include "fault_injection.hpp"
#include "guc.hpp"
#include "publisher/key_ownership.hpp"
#include "catalog/partition.hpp"
#include "shmem/shmem.hpp"
#include "publisher/publisher_stats.hpp"
#include "publisher/worker_session.hpp"
#include "core/wait_time.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/ps_status.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace {

constexpr long kMaintenanceIntervalMs = 60 * 1000;
// How long past its retry time an event may hold its key back here before the
// order state is read again from the database, and how often that is checked
// (Dispatcher::HasOverdueWaiting). A reload reads only the waiting events of
// our keys; during a sink outage (whose topics the claims leave alone) it
// runs at most this often.
constexpr long kOverdueWaitingMs = 10 * 1000;
constexpr const char *kConnectLockTimeout = "5s";  // see outbox_publisher_main
constexpr long kErrorBackoffMinMs = 100;
constexpr long kErrorBackoffMaxMs = 30 * 1000;

Dispatcher *dispatcher = nullptr;
DatabaseSlot *slot = nullptr;
int worker_index = 0;
uint64 loaded_config_version = 0;
bool config_loaded = false;
bool announced = false;     // the "publishing from" line is logged once per process
bool home_checked = false;  // outbox.home named this database (database_home.hpp)
// The last cycle failed for want of a privilege: a partition the writer does
// not own, most likely (AlignPartitionOwnersNow before the next).
bool align_owners = false;
TimestampTz last_maintenance = 0;
TimestampTz last_overdue_check = 0;
TimestampTz last_cycle_start = 0;  // of the last publish cycle a commit asked for
int consecutive_errors = 0;
bool more_waiting = false;  // the last cycle stopped at outbox.max_batch_bytes
MemoryContext cycle_context = nullptr;
char database_name[NAMEDATALEN] = "";  // for log lines; read once at start

bool PausedNow();

// Partition maintenance is one publisher's job, the live one with the lowest
// index, so that several publishers do not queue for the same locks.
bool MaintainsPartitions() {
  for (int i = 0; i < worker_index; ++i) {
    if (pg_atomic_read_u32(&slot->worker_procno[i]) != kNoProc) return false;
  }
  return true;
}

// Checked while a delivery waits for the brokers: stop waiting on SIGTERM, a
// cancel (pg_cancel_backend: the ERROR follows at the next interrupt check),
// postmaster death, or a pause (DROP DATABASE waits for us).
bool Interrupted() {
  return ShutdownRequestPending || QueryCancelPending || !PostmasterIsAlive() || PausedNow();
}

// Give up our key slots, unregister, then tell the others (key_ownership.hpp:
// they take over our slots only once we no longer count as live).
void Unregister(int code, Datum arg) {
  if (slot == nullptr) return;
  LeaveKeySlots(slot, worker_index);
  ReportStopped();
  GivePublisherPlaceBack(slot, worker_index, static_cast<uint32>(MyProcIndex()));
  AnnounceMembership(slot);
  // The launcher that started us may not be the one running now (it would
  // have been told through bgw_notify_pid): tell whoever runs.
  WakeLauncher();
}

// Log what the dispatcher and its sinks had to say, once each. The text is
// copied into a plain buffer, so no C++ object is alive across ereport.
void FlushDispatcherLogs() {
  if (dispatcher == nullptr) return;
  LogLevel level;
  char text[1024];
  while (dispatcher->NextLog(&level, text, sizeof text)) {
    const int elevel = level == LogLevel::kError     ? LOG
                       : level == LogLevel::kWarning ? WARNING
                       : level == LogLevel::kInfo    ? LOG
                                                     : DEBUG1;
    ereport(elevel, (errmsg("outbox: %s", text)));
  }
}

bool PausedNow() {
  const uint64 until = pg_atomic_read_u64(&slot->paused_until);
  return until != 0 && static_cast<TimestampTz>(until) > GetCurrentTimestamp();
}

// True when the extension is installed in this database. Needs a transaction.
bool ExtensionInstalled() { return OidIsValid(get_extension_oid("outbox", true)); }

// Whether the dispatcher has the database's sinks and routes as of now; if
// not, reload them when may_reload. Needs the cycle's transaction, SPI
// connected. The barrier: the claim before this read took its snapshot after
// any transaction it saw had bumped the version (shmem.cpp, PRE_COMMIT).
//
// A change bumps the version before it is visible (DatabaseSlot::
// config_committing): loaded while such a change is still committing, the
// configuration may be the one before it, so it is not taken as current,
// and the next check loads it again. The version is read before the count,
// and both before the load's snapshot: a count of zero after a version that
// includes a change means that change is visible to the load.
bool ConfigCurrent(bool may_reload) {
  pg_memory_barrier();
  const uint64 version = pg_atomic_read_u64(&slot->config_version);
  pg_memory_barrier();
  const bool committing = pg_atomic_read_u32(&slot->config_committing) != 0;
  if (config_loaded && version == loaded_config_version) return true;
  if (!may_reload) return false;
  pgstat_report_activity(STATE_RUNNING, "outbox: loading sinks and routes");
  ereport(DEBUG1, (errmsg("outbox: loading sinks and routes (configuration version %llu)",
                          static_cast<unsigned long long>(version))));
  LoadConfiguration(dispatcher);
  loaded_config_version = version;
  config_loaded = !committing;
  pgstat_report_activity(STATE_RUNNING, "outbox: publishing");
  return true;
}

// One transaction: check the extension, reload configuration if it changed,
// run one publish cycle. Returns events claimed, or -1 when the extension is
// gone (and the launcher has been told so).
int RunCycle() {
  // Read before the snapshot: an announcement after it must not be lost to
  // our "absent" (MarkExtensionAbsent compares with this word).
  const uint64 seen_extension = ReadExtension(slot);
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  // Every statement of a cycle reaches its rows through an index or by
  // ctid, and their plans are kept for the process. A plan made while a
  // partition was nearly empty (a new day's, a new database's) is a
  // sequential scan, and it stays one as the partition grows until
  // something invalidates it: the UPDATE that marks a batch published
  // (WHERE ctid = ANY($1)) then read the whole partition for every batch,
  // and the publisher fell behind at 5,000 events/s (TAP 036). A disabled
  // scan still chosen (the routes' small tables) costs 1e10 to the planner,
  // which would JIT-compile the statement on every execution: no JIT
  // either; these are short statements. Local to this transaction:
  // maintenance plans as usual.
  (void)set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL,
                          true, 0, false);
  (void)set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0,
                          false);
  // Until this process found out whether the extension is here (a probe),
  // its lock waits are bounded as its connection's was: a database owner
  // can hold its own catalogs' locks for as long as it likes, and a probe
  // waiting on them would keep one of the launcher's few probes. A lock
  // timeout then ends the process (below, at the error), which the launcher
  // counts as a failed probe. For this transaction only.
  if (!home_checked) {
    (void)set_config_option("lock_timeout", kConnectLockTimeout, PGC_SUSET, PGC_S_OVERRIDE,
                            GUC_ACTION_LOCAL, true, 0, false);
  }
  PushActiveSnapshot(GetTransactionSnapshot());
  OUTBOX_FAULT("publisher.cycle_start");
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  if (!ExtensionInstalled()) {
    SPI_finish();
    PopActiveSnapshot();
    CommitTransactionCommand();
    OUTBOX_FAULT("publisher.extension_missing");
    // Not marked when something was announced since we looked: look again.
    return MarkExtensionAbsent(slot, seen_extension) ? -1 : 0;
  }
  // A copy of another database (CREATE DATABASE ... TEMPLATE) publishes
  // nothing until outbox.publish_here(): to the launcher it is a database
  // without the extension, looked at again when that is called (or every
  // 10 minutes, which repeats the WARNING).
  // Checked until found home: a process's database stays what it is.
  Oid copied_from = InvalidOid;
  if (!home_checked && HomeOfOutbox(&copied_from) == Home::kCopy) {
    SPI_finish();
    PopActiveSnapshot();
    CommitTransactionCommand();
    ereport(WARNING,
            (errmsg("outbox: database \"%s\" is a copy of another database: publishing is "
                    "paused here",
                    database_name),
             errdetail("Its outbox tables were made for database OID %u; CREATE DATABASE ... "
                       "TEMPLATE copied them with their pending events, which that database "
                       "publishes.",
                       copied_from),
             errhint("To publish this database's events from here, run SELECT "
                     "outbox.publish_here(); in it.")));
    return MarkExtensionAbsent(slot, seen_extension) ? -1 : 0;
  }
  home_checked = true;
  (void)set_config_option("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE, GUC_ACTION_LOCAL, true, 0,
                          false);
  // The launcher starts the other publishers once it knows: tell it now.
  if (MarkExtensionPresent(slot)) WakeLauncher();

  if (!announced) {
    ereport(LOG, (errmsg("outbox: publishing from database \"%s\"", database_name)));
    announced = true;
  }
  // Everything from here runs as the extension's owner (worker_session.hpp).
  OwnerScope owner;
  EnterExtensionOwner(&owner);
  (void)ConfigCurrent(true);
  OUTBOX_FAULT("publisher.after_configure");
  pgstat_report_activity(STATE_RUNNING, "outbox: publishing");
  ReportState("publishing");
  CycleStats cycle;
  const TimestampTz started = GetCurrentTimestamp();
  const int claimed = ClaimAndPublish(dispatcher, Interrupted, ConfigCurrent, &cycle);
  more_waiting = cycle.more_waiting;
  LeaveExtensionOwner(owner);
  SPI_finish();
  PopActiveSnapshot();
  OUTBOX_FAULT("publisher.before_commit");
  CommitTransactionCommand();
  CommitClaimFloor();
  OUTBOX_FAULT("publisher.after_commit");
  // Hand our table statistics (one UPDATE per published event) to the
  // cumulative statistics system, as backends do when they go idle: without
  // it autovacuum would not see the dead rows we leave until we exit. It
  // flushes at most once a second by itself.
  (void)pgstat_report_stat(false);
  pgstat_report_activity(STATE_IDLE, nullptr);
  ReportCycle(dispatcher, cycle, static_cast<double>(GetCurrentTimestamp() - started) / 1000.0);
  FlushDispatcherLogs();
  return claimed;
}

// Partitions of outbox.events that its owner does not own (restored with
// --no-owner, made by a superuser by hand) refuse the outcome updates, which
// name them, after their events were sent: given to the owner at once, as
// the superuser this process connects as, rather than at the next
// maintenance, each cycle meanwhile sending the same events again. Outside
// any transaction.
void AlignPartitionOwnersNow() {
  StartTransactionCommand();
  PushActiveSnapshot(GetTransactionSnapshot());
  if (ExtensionInstalled()) AlignPartitionOwners();
  PopActiveSnapshot();
  CommitTransactionCommand();
}

void RunMaintenance() {
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  PushActiveSnapshot(GetTransactionSnapshot());
  pgstat_report_activity(STATE_RUNNING, "outbox: partition maintenance");
  ReportState("maintaining partitions");
  OUTBOX_FAULT("publisher.maintenance");
  if (ExtensionInstalled()) {
    // Partitions someone else made (a superuser running outbox.maintain(),
    // or this publisher before it ran as the owner) go to outbox.events'
    // owner first, as the superuser we are; then the owner maintains them.
    AlignPartitionOwners();
    OwnerScope owner;
    EnterExtensionOwner(&owner);
    MaintainPartitions(GetCurrentTimestamp());
    LeaveExtensionOwner(owner);
  }
  PopActiveSnapshot();
  CommitTransactionCommand();
  (void)pgstat_report_stat(false);
  pgstat_report_activity(STATE_IDLE, nullptr);
}

// How long to sleep when there is nothing to do right now. No transaction:
// the last cycle left what it knows of the retry index (KnownRetryDue).
long IdleWaitMs(long stats_flush_ms) {
  long wait = guc::poll_interval_ms;
  const TimestampTz now = GetCurrentTimestamp();
  bool retry_known = false;
  TimestampTz next = KnownRetryDue(&retry_known);
  if (!retry_known) next = 0;  // the next cycle reads it, at the poll at the latest
  const int64_t sink_retry = dispatcher->NextSinkRetryUs(LastClaimsAt());
  if (sink_retry != 0 && (next == 0 || sink_retry < next)) next = sink_retry;
  if (next != 0) {
    // Rounded up: never 0 before it is due (wait_time.hpp).
    const int64_t until_next = WaitMsUntil(next, now);
    if (until_next < wait) wait = static_cast<long>(until_next);
  }
  const long until_maintenance =
      kMaintenanceIntervalMs - static_cast<long>((now - last_maintenance) / 1000);
  if (until_maintenance < wait) wait = until_maintenance < 0 ? 0 : until_maintenance;
  if (stats_flush_ms > 0 && stats_flush_ms < wait) wait = stats_flush_ms;
  return wait;
}

// Before a cycle's claims: take the cycles commits asked for (a commit after
// this asks again, and its cycle's claims see it), or, while no route
// delivers, keep them asked for, so that commits do not wake us for events
// no claim would take (a route change wakes us anyway). Returns whether a
// commit had asked for this cycle. A full barrier: before the claims'
// snapshots.
bool TakeCycleRequest(bool suppress) {
  return pg_atomic_exchange_u32(&slot->cycle_requested[worker_index], suppress ? 1 : 0) != 0;
}

// Whether commits are kept from waking us: no route delivers (with the
// routes loaded), so no claim would take their events.
bool KeepingCommitsAway() { return config_loaded && !HasDeliverableRoutes(); }

// Whether a commit has asked for a cycle that no cycle has taken yet. A
// full barrier first: a commit that sets the word after this read sets our
// latch after it too (RequestCycle), so the sleep that follows ends at once.
bool CycleRequested() {
  pg_memory_barrier();
  return pg_atomic_read_u32(&slot->cycle_requested[worker_index]) != 0;
}

void HandleSignals() {
  CHECK_FOR_INTERRUPTS();
  if (ConfigReloadPending) {
    ConfigReloadPending = false;
    ProcessConfigFile(PGC_SIGHUP);
  }
}

void PublisherMain(Datum main_arg) {
  const Oid dboid = DatumGetObjectId(main_arg);
  worker_index = static_cast<int>(MyBgworkerEntry->bgw_extra[0]);

  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
  BackgroundWorkerUnblockSignals();

  // Our place first: if another publisher holds it (two launchers started
  // one each), this one leaves before doing anything.
  slot = TakePublisherPlace(dboid, worker_index, static_cast<uint32>(MyProcIndex()));
  if (slot == nullptr) {
    ereport(DEBUG1, (errmsg("outbox: publisher %d for database %u is running already, or the "
                            "database is no longer tracked; exiting",
                            worker_index, dboid)));
    proc_exit(0);
  }
  ReportStarting(slot, worker_index);
  on_shmem_exit(Unregister, 0);
  MarkPublisherProcess();
  pg_atomic_write_u32(&slot->cycle_requested[worker_index], 0);
  // Connecting waits for the database's lock, which an open ALTER DATABASE
  // ... RENAME (any owner with CREATEDB may leave one open) holds for as
  // long as it likes: bounded, so that such a database costs the launcher
  // one of its few probes for seconds, not for good (the connection fails,
  // the launcher counts it and backs off, and probes the other databases).
  // PinWorkerSettings sets it back to 0 once connected.
  SetConfigOption("lock_timeout", kConnectLockTimeout, PGC_SUSET, PGC_S_OVERRIDE);
  BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
  PinWorkerSettings();
  // The publisher's transactions only record what the brokers acknowledged.
  // Losing the last of them in a crash means those events are sent again
  // (at least once, same ids), never lost: so its commits need not wait for
  // the WAL flush, which otherwise took a third of its time under load.
  SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
  JoinKeySlots(slot, worker_index);
  pgstat_report_appname("outbox publisher");

  dispatcher = Dispatcher::Create(MakeSink);
  if (dispatcher == nullptr) {
    ereport(FATAL, (errcode(ERRCODE_OUT_OF_MEMORY),
                    errmsg("outbox: could not set up the publisher's dispatcher")));
  }
  cycle_context =
      AllocSetContextCreate(TopMemoryContext, "outbox publish cycle", ALLOCSET_DEFAULT_SIZES);
  // Catalog lookups need a transaction.
  StartTransactionCommand();
  const char *name = get_database_name(MyDatabaseId);
  strlcpy(database_name, name != nullptr ? name : "?", sizeof database_name);
  CommitTransactionCommand();

  // Error recovery, as in PostgreSQL's own background processes: log, give
  // up the batches in flight, abort the transaction (its events stay
  // pending), back off, carry on.
  sigjmp_buf local_sigjmp_buf;
  if (sigsetjmp(local_sigjmp_buf, 1) != 0) {
    HOLD_INTERRUPTS();
    error_context_stack = nullptr;
    EmitErrorReport();
    int sqlerrcode = 0;
    {
      MemoryContext error_cxt = MemoryContextSwitchTo(TopMemoryContext);
      ErrorData *edata = CopyErrorData();
      ReportError(edata->message != nullptr ? edata->message : "error");
      sqlerrcode = edata->sqlerrcode;
      FreeErrorData(edata);
      MemoryContextSwitchTo(error_cxt);
    }
    // Before the transaction's memory goes: nothing may point into it.
    dispatcher->AbandonAll();
    ForgetClaimFloor();
    AbortCurrentTransaction();
    FlushErrorState();
    MemoryContextSwitchTo(TopMemoryContext);
    MemoryContextReset(cycle_context);
    RESUME_INTERRUPTS();
    FlushDispatcherLogs();  // what the abandoned batches had to say
    if (!home_checked && sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE) {
      // A probe that could not look at the catalogs (RunCycle): leave, so
      // that the launcher counts it and probes other databases meanwhile.
      ereport(LOG, (errmsg("outbox: could not find out within %s whether database \"%s\" has "
                           "the extension: a lock on its catalogs is held; leaving it to the "
                           "launcher",
                           kConnectLockTimeout, database_name)));
      proc_exit(1);
    }
    consecutive_errors++;
    config_loaded = false;  // reload routes and order state from the database
    if (sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE) align_owners = true;
    long wait = kErrorBackoffMinMs << (consecutive_errors < 10 ? consecutive_errors - 1 : 9);
    if (wait > kErrorBackoffMaxMs) wait = kErrorBackoffMaxMs;
    ReportState("backing off after an error");
    Backoff(wait, PausedNow);
  }
  PG_exception_stack = &local_sigjmp_buf;

  bool backlog = false;  // the last cycle left events to claim at once
  for (;;) {
    if (!backlog) WaitForWakeInterval(last_cycle_start, PausedNow);
    HandleSignals();
    if (ShutdownRequestPending || PausedNow()) break;

    // Between transactions: nothing claimed, nothing in flight.
    if (RebalanceKeySlots(slot, worker_index, guc::workers)) {
      config_loaded = false;  // rebuild the order state for the slots gained
    }
    if (config_loaded && GetCurrentTimestamp() - last_overdue_check >= kOverdueWaitingMs * 1000L) {
      last_overdue_check = GetCurrentTimestamp();
      if (dispatcher->HasOverdueWaiting(last_overdue_check - kOverdueWaitingMs * 1000L)) {
        config_loaded = false;  // an event we wait for may be settled elsewhere
      }
    }

    // Maintenance only once a cycle found the extension here: before that
    // this process is a probe, whose lock waits RunCycle bounds.
    if (home_checked &&
        GetCurrentTimestamp() - last_maintenance >= kMaintenanceIntervalMs * 1000L) {
      last_maintenance = GetCurrentTimestamp();
      if (MaintainsPartitions()) RunMaintenance();
    }

    if (align_owners && home_checked) {
      align_owners = false;
      AlignPartitionOwnersNow();
    }

    const bool suppress = KeepingCommitsAway();
    // The wake interval spaces the cycles commits start: only those count
    // (a safety poll's cycle just before a lone commit must not delay it).
    if (TakeCycleRequest(suppress)) last_cycle_start = GetCurrentTimestamp();
    MemoryContext old = MemoryContextSwitchTo(cycle_context);
    const int claimed = RunCycle();
    MemoryContextSwitchTo(old);
    MemoryContextReset(cycle_context);
    if (claimed < 0) {
      // A probe of a database without the extension is routine: say it
      // quietly. A publisher that was publishing says it loudly.
      ereport(config_loaded ? LOG : DEBUG1,
              (errmsg("outbox: extension not installed in database \"%s\"; publisher exits",
                      database_name)));
      break;
    }
    consecutive_errors = 0;
    // More may be waiting; or routes that deliver appeared while commits
    // were kept from waking us.
    backlog = claimed >= guc::batch_size || more_waiting || (suppress && HasDeliverableRoutes());
    if (backlog) continue;

    CallCpp([] {
      OUTBOX_FAULT_CPP("publisher.poll");
      dispatcher->Poll();
    });
    FlushDispatcherLogs();
    if (dispatcher->LateArrived()) {
      backlog = true;  // record them now
      continue;
    }
    // A commit that asked for a cycle while this one ran set our latch, and
    // a wait inside the cycle may have consumed it: PostgreSQL's own waits
    // (a lock, a condition variable such as a buffer's I/O) sleep on the
    // same latch and reset it. Later commits see the request standing and
    // set no latch, so sleeping now would leave their events to the next
    // statistics flush or poll (p99 950 ms at 5,000 events/s; TAP 095).
    // Run the cycle asked for instead. While no route delivers, the request
    // is kept standing on purpose (TakeCycleRequest): then sleep, unless
    // sinks or routes changed since they were loaded (a resumed route's
    // wake-up may have been consumed the same way).
    if (!KeepingCommitsAway() && CycleRequested()) continue;
    if (config_loaded && !ConfigCurrent(false)) continue;
    ReportState("idle");
    ReturnFreedMemory();
    // What the last cycles left of table statistics goes out at most once a
    // second (PostgreSQL's own pace), and before a long sleep.
    const long stats_flush_ms = pgstat_report_stat(false);
    Sleep(dispatcher, IdleWaitMs(stats_flush_ms));
  }
  // Leaving (shut down, terminated, or paused): the late answers that came
  // in are looked at once more, so that a key's event they show overtaken
  // is named (the WARNING), and the dispatcher's last lines are logged.
  // Between cycles only late groups are left, and they own their rows.
  dispatcher->AbandonAll();
  FlushDispatcherLogs();
  proc_exit(0);
}

}  // namespace

uint64 ClaimFloorResets() { return slot != nullptr ? pg_atomic_read_u64(&slot->floor_resets) : 0; }

bool TakeHolderCommitsForClaims(TimestampTz *since) {
  return TakeHolderCommits(slot, worker_index, since);
}

}  // namespace outbox

// The publisher's entry: one exception boundary around everything (every
// C++ call inside has its own; this one catches what would otherwise reach
// std::terminate and take every session of the server down with it).
void outbox_publisher_main(Datum main_arg) {
  outbox::bridge::CaughtError error;
  auto body = [main_arg] { outbox::PublisherMain(main_arg); };
  (void)outbox::bridge::Guard(body, &error);
  ereport(FATAL,
          (errcode(error.sqlstate != 0 ? error.sqlstate : ERRCODE_INTERNAL_ERROR),
           errmsg("outbox: publisher stopped by an unexpected exception: %s", error.message)));
}
