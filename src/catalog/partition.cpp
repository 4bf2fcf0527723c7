// Daily partitions of outbox.events (see partition.hpp for the contract).
//
// Why the DDL looks the way it does (measured on PostgreSQL 15):
// - CREATE TABLE ... PARTITION OF takes AccessExclusive on outbox.events, so
//   one open transaction that emitted would make it wait and every new emit()
//   queue behind it. CREATE TABLE (LIKE ...) + ATTACH PARTITION takes only
//   ShareUpdateExclusive on the parent, which emit()'s RowExclusive does not
//   conflict with.
// - DROP TABLE of a partition needs AccessExclusive on the parent whatever we
//   do (DETACH CONCURRENTLY cannot run in a function and is refused while a
//   default partition exists), so every step runs under a short lock_timeout
//   and is retried at the next run instead of waiting.
// - events_default catches rows for days that have no partition yet, so
//   emit() never fails when maintenance has not run; the next run moves them
//   into their day's partition.
//
// Memory: everything is palloc'd in the caller's context. No C++ object with
// a destructor is alive across any call below (see pg_bridge.hpp).
#include "catalog/partition.hpp"
#include "subtransaction.hpp"
#include "catalog/events_owner.hpp"

#include "guc.hpp"
#include "core/partition_calendar.hpp"
#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "storage/lmgr.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace {

// Days between 1970-01-01 and 2000-01-01.
constexpr int64_t kUnixToPgDays = kPgEpochUnixSeconds / 86400;

struct Partition {
  char name[NAMEDATALEN];
  int64_t day;  // -1 with is_ours false for partitions we did not name
  bool is_ours;
};

struct PartitionSet {
  Partition *items;
  int count;
};

// What a step does inside its guarded subtransaction. Returns false to roll
// the subtransaction back (undo and release its locks) without an error.
using StepFn = bool (*)(void *arg);

// Every statement here runs with a snapshot taken when it starts, whatever
// the caller's isolation level: under REPEATABLE READ a
// plain SPI statement would reuse the transaction's snapshot, taken before
// the locks below, and the re-count after LOCK TABLE would miss events that
// turned pending meanwhile (replay(), retry_dead()), and drop them with
// their partition. Rows counted or moved after a lock are then exactly those
// committed before it, as under READ COMMITTED.
int ExecFresh(const char *sql, long tcount) {
  SPIPlanPtr plan = SPI_prepare(sql, 0, nullptr);
  if (plan == nullptr) {
    elog(ERROR, "outbox: could not prepare a maintenance statement (%s): %s",
         SPI_result_code_string(SPI_result), sql);
  }
  const int rc = SPI_execute_snapshot(plan, nullptr, nullptr, GetLatestSnapshot(), InvalidSnapshot,
                                      false, true, tcount);
  SPI_freeplan(plan);
  return rc;
}

int64_t ScalarInt8(const char *sql) {
  if (ExecFresh(sql, 1) != SPI_OK_SELECT || SPI_processed != 1) {
    elog(ERROR, "outbox: maintenance query failed: %s", sql);
  }
  bool isnull = false;
  Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
  return isnull ? 0 : DatumGetInt64(d);
}

void Exec(const char *sql) {
  const int rc = ExecFresh(sql, 0);
  if (rc < 0)
    elog(ERROR, "outbox: maintenance statement failed (%s): %s", SPI_result_code_string(rc), sql);
}

// Each statement's fresh snapshot (ExecFresh) also sees the DDL of the
// steps before it.

// The sessions (and prepared transactions, which have no pid) that hold a
// granted lock on outbox.events or one of its partitions, for the message
// of a step that timed out: "pid 123 (idle in transaction), ...", at most
// ten. Called with SPI connected, in the transaction the step's
// subtransaction belonged to; the result is palloc'd there.
const char *LockHolders() {
  const int rc = ExecFresh(
      "SELECT pg_catalog.string_agg(h.who, ', ') FROM ("
      " SELECT DISTINCT CASE WHEN l.pid IS NULL THEN 'a prepared transaction'"
      "  WHEN a.state IS NULL THEN pg_catalog.concat('pid ', l.pid)"
      "  ELSE pg_catalog.concat('pid ', l.pid, ' (', a.state, ')') END AS who"
      " FROM pg_catalog.pg_locks l"
      " LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid"
      " WHERE l.granted AND l.locktype OPERATOR(pg_catalog.=) 'relation'"
      "  AND l.database OPERATOR(pg_catalog.=) ("
      "   SELECT d.oid FROM pg_catalog.pg_database d"
      "    WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())"
      "  AND (l.pid IS NULL OR l.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid())"
      "  AND (l.relation OPERATOR(pg_catalog.=) 'outbox.events'::pg_catalog.regclass"
      "   OR l.relation OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT i.inhrelid"
      "    FROM pg_catalog.pg_inherits i"
      "    WHERE i.inhparent OPERATOR(pg_catalog.=) 'outbox.events'::pg_catalog.regclass)))"
      " ORDER BY 1 LIMIT 10) h",
      1);
  if (rc != SPI_OK_SELECT || SPI_processed != 1) return "unknown";
  char *who = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
  return who != nullptr ? who : "none any more";
}

// The step under outbox.maintenance_lock_timeout (RunGuarded).
struct TimedStep {
  StepFn step;
  void *arg;
  bool kept;
};

bool StepUnderLockTimeout(void *timed_step) {
  TimedStep *timed = static_cast<TimedStep *>(timed_step);
  const int nest = NewGUCNestLevel();
  char timeout[32];
  snprintf(timeout, sizeof timeout, "%d", guc::maintenance_lock_timeout_ms);
  // PGC_S_OVERRIDE: the workers pin lock_timeout to 0 at that priority;
  // a lower one would be ignored there.
  (void)set_config_option("lock_timeout", timeout, PGC_SUSET, PGC_S_OVERRIDE, GUC_ACTION_SAVE, true,
                          0, false);
  timed->kept = timed->step(timed->arg);
  AtEOXact_GUC(true, nest);
  return timed->kept;
}

// Run step(arg) in a subtransaction with lock_timeout set to
// outbox.maintenance_lock_timeout. A lock timeout rolls the step back and
// returns false (logged, retried next run); so does, when `made_elsewhere`,
// a relation of that name another session created first (a restore's CREATE
// TABLE before its ATTACH PARTITION, a concurrent maintain()); and, when
// `kept_by_dependents`, others' objects that depend on the relation (a view,
// which any role may create): a WARNING names them. Other errors propagate.
bool RunGuarded(const char *what, StepFn step, void *arg, bool made_elsewhere = false,
                bool kept_by_dependents = false) {
  TimedStep timed{step, arg, false};
  ErrorData *edata = RunInSubtransaction(StepUnderLockTimeout, &timed);
  if (edata == nullptr) return timed.kept;
  // Two sessions creating one name: the second fails on the name (42P07)
  // or, when both got past that check, on the catalogs' unique index.
  const bool elsewhere = made_elsewhere && (edata->sqlerrcode == ERRCODE_DUPLICATE_TABLE ||
                                            edata->sqlerrcode == ERRCODE_UNIQUE_VIOLATION);
  const bool dependents =
      kept_by_dependents && edata->sqlerrcode == ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST;
  if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE && !elsewhere && !dependents) {
    ReThrowError(edata);
  }
  if (dependents) {
    ereport(WARNING, (errmsg("outbox: could not %s: other objects depend on it; kept, and tried "
                             "again at the next maintenance",
                             what),
                      errdetail("%s", edata->detail != nullptr ? edata->detail : edata->message),
                      errhint("Drop the objects that depend on it (a temporary view goes with the "
                              "session that made it).")));
  } else if (elsewhere) {
    ereport(LOG, (errmsg("outbox: did not %s: another session is creating it (a restore?); "
                         "will look again at the next maintenance",
                         what)));
  } else {
    // LOG in the publisher (a NOTICE there reaches no client and, at the
    // default log_min_messages, no log either); NOTICE to a maintain()
    // caller. Either way it names who holds the tables, so that a DBA
    // can end a session that keeps maintenance from ever getting through.
    ereport(MyBackendType == B_BG_WORKER ? LOG : NOTICE,
            (errmsg("outbox: could not %s within outbox.maintenance_lock_timeout "
                    "(%d ms); will retry at the next maintenance",
                    what, guc::maintenance_lock_timeout_ms),
             errdetail("Sessions holding locks on outbox.events or its partitions: %s.",
                       LockHolders())));
  }
  FreeErrorData(edata);
  return false;
}

PartitionSet ListPartitions(Oid parent) {
  char sql[256];
  snprintf(sql, sizeof sql,
           "SELECT c.relname::pg_catalog.text FROM pg_catalog.pg_inherits i "
           "JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid "
           "WHERE i.inhparent OPERATOR(pg_catalog.=) '%u'::pg_catalog.oid",
           parent);
  if (ExecFresh(sql, 0) != SPI_OK_SELECT) elog(ERROR, "outbox: cannot list partitions");
  PartitionSet set;
  set.count = static_cast<int>(SPI_processed);
  set.items = static_cast<Partition *>(palloc0(sizeof(Partition) * (set.count + 1)));
  for (int i = 0; i < set.count; ++i) {
    char *name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
    strlcpy(set.items[i].name, name, NAMEDATALEN);
    const std::optional<int64_t> day = ParsePartitionName(name);
    set.items[i].is_ours = day.has_value();
    set.items[i].day = day.value_or(-1);
  }
  return set;
}

bool HasPartitionFor(const PartitionSet &set, int64_t day) {
  for (int i = 0; i < set.count; ++i) {
    if (set.items[i].is_ours && set.items[i].day == day) return true;
  }
  return false;
}

struct CreateArg {
  int64_t day;
  bool move_from_default;
};

bool CreateStep(void *p) {
  const CreateArg *arg = static_cast<const CreateArg *>(p);
  char name[kPartitionNameBufSize], from[kPartitionNameBufSize], to[kPartitionNameBufSize];
  FormatPartitionName(arg->day, name);
  FormatDayStartLiteral(arg->day, from);
  FormatDayStartLiteral(arg->day + 1, to);
  const char *qname = quote_identifier(name);

  Exec(
      psprintf("CREATE TABLE outbox.%s (LIKE outbox.events INCLUDING DEFAULTS "
               "INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)",
               qname));
  // Before any row arrives: rows moved in below are counted back in by the
  // INSERT trigger after events_default's DELETE trigger counted them out.
  // Created by a superuser who is not the owner of outbox.events (running
  // outbox.maintain() by hand): the owner gets it, as the publisher, which
  // runs as that owner, must update and drop it.
  const Oid owner = EventsOwner();
  if (OidIsValid(owner) && owner != GetUserId() && superuser()) {
    Exec(psprintf("ALTER TABLE outbox.%s OWNER TO %s", qname,
                  quote_identifier(GetUserNameFromId(owner, false))));
  }
  Exec(psprintf("SELECT outbox.prepare_partition('outbox.%s'::pg_catalog.regclass)", qname));
  if (arg->move_from_default) {
    // Rows emitted while the day had no partition: move them so ATTACH's check
    // of the default partition passes. AccessExclusive on the default
    // partition only; emit() into today's partition is unaffected.
    Exec("LOCK TABLE outbox.events_default IN ACCESS EXCLUSIVE MODE");
    Exec(
        psprintf("WITH moved AS (DELETE FROM outbox.events_default WHERE created_at "
                 "OPERATOR(pg_catalog.>=) '%s'::pg_catalog.timestamptz AND created_at "
                 "OPERATOR(pg_catalog.<) '%s'::pg_catalog.timestamptz RETURNING *) "
                 "INSERT INTO outbox.%s SELECT * FROM moved",
                 from, to, qname));
    // Never-tried events moved get new index entries with their old ids,
    // which a publisher's claims may have passed already.
    if (SPI_processed > 0) ResetClaimFloorsAtCommit();
  }
  Exec(
      psprintf("ALTER TABLE outbox.events ATTACH PARTITION outbox.%s "
               "FOR VALUES FROM ('%s') TO ('%s')",
               qname, from, to));
  ereport(LOG, (errmsg("outbox: created partition outbox.%s", name)));
  return true;
}

void CreatePartition(int64_t day, bool move_from_default) {
  // Inside CREATE EXTENSION every new relation would become a member of the
  // extension, and members cannot be dropped on their own. Partitions are
  // data, not part of the extension: create them as ordinary tables. (On an
  // error CREATE EXTENSION resets these flags itself.)
  const bool saved_creating = creating_extension;
  const Oid saved_extension = CurrentExtensionObject;
  creating_extension = false;
  CurrentExtensionObject = InvalidOid;
  CreateArg arg{day, move_from_default};
  char what[96];
  char name[kPartitionNameBufSize];
  FormatPartitionName(day, name);
  snprintf(what, sizeof what, "create partition outbox.%s", name);
  RunGuarded(what, CreateStep, &arg, /*made_elsewhere=*/true);
  creating_extension = saved_creating;
  CurrentExtensionObject = saved_extension;
}

// Pending plus dead events, counted through the three partial indexes (a
// plain status <> 'published' would scan every published row).
int64_t UnpublishedIn(const char *qualified_table, const char *range_filter) {
  return ScalarInt8(psprintf(
      "SELECT (SELECT pg_catalog.count(*) FROM %s WHERE status OPERATOR(pg_catalog.=) "
      "'pending'::pg_catalog.text AND next_attempt_at IS NULL%s)"
      " OPERATOR(pg_catalog.+) (SELECT pg_catalog.count(*) FROM %s WHERE status "
      "OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text AND next_attempt_at IS NOT NULL%s)"
      " OPERATOR(pg_catalog.+) (SELECT pg_catalog.count(*) FROM %s WHERE status "
      "OPERATOR(pg_catalog.=) 'dead'::pg_catalog.text%s)",
      qualified_table, range_filter, qualified_table, range_filter, qualified_table, range_filter));
}

void WarnKept(const char *what, int64_t unpublished) {
  ereport(WARNING,
          (errmsg("outbox: %s is past outbox.retention but holds %lld pending or dead events; "
                  "kept",
                  what, static_cast<long long>(unpublished)),
           errhint("It is dropped at the first maintenance after its events are published; "
                   "see outbox.stats, and outbox.retry_dead() for dead events.")));
}

struct DropArg {
  const char *name;
  int64_t day;
  int64_t unpublished;  // set when the step finds events after all
};

bool DropStep(void *p) {
  DropArg *arg = static_cast<DropArg *>(p);
  const char *qname = quote_identifier(arg->name);
  // The lock DROP would take anyway, taken first so that the re-check below
  // cannot race with retry_dead() or a replay turning rows back to pending.
  Exec("LOCK TABLE outbox.events IN ACCESS EXCLUSIVE MODE");
  arg->unpublished = UnpublishedIn(psprintf("outbox.%s", qname), "");
  if (arg->unpublished > 0) return false;
  Exec(psprintf("DROP TABLE outbox.%s", qname));
  // DROP fires no trigger: the day's published events leave the counts here,
  // in the same transaction.
  char day[kPartitionNameBufSize];
  FormatDayStartLiteral(arg->day, day);
  Exec(psprintf(
      "DELETE FROM ONLY outbox.counts WHERE day OPERATOR(pg_catalog.=) '%.10s'::pg_catalog.date",
      day));
  ereport(LOG, (errmsg("outbox: dropped partition outbox.%s past outbox.retention", arg->name)));
  return true;
}

void DropIfPublished(const char *name, int64_t day) {
  char what[96];
  snprintf(what, sizeof what, "partition outbox.%s", name);
  const int64_t unpublished = UnpublishedIn(psprintf("outbox.%s", quote_identifier(name)), "");
  if (unpublished > 0) {
    WarnKept(what, unpublished);
    return;
  }
  DropArg arg{name, day, 0};
  snprintf(what, sizeof what, "drop partition outbox.%s", name);
  if (!RunGuarded(what, DropStep, &arg, /*made_elsewhere=*/false, /*kept_by_dependents=*/true) &&
      arg.unpublished > 0) {
    snprintf(what, sizeof what, "partition outbox.%s", name);
    WarnKept(what, arg.unpublished);
  }
}

struct PurgeArg {
  const char *range_filter;
};

bool PurgeDefaultStep(void *p) {
  const PurgeArg *arg = static_cast<const PurgeArg *>(p);
  Exec(
      psprintf("DELETE FROM outbox.events_default WHERE status OPERATOR(pg_catalog.=) "
               "'published'::pg_catalog.text%s",
               arg->range_filter));
  return true;
}

// Rows in the default partition: move those of days still within retention
// into their own partition; delete the published ones of older days. Rows
// dated -infinity or infinity (written by hand: emit() dates every event
// now) belong to no day and stay where they are.
void DrainDefault(const PartitionSet &set, TimestampTz cutoff) {
  if (ExecFresh("SELECT DISTINCT pg_catalog.floor(EXTRACT(epoch FROM created_at) "
                "OPERATOR(pg_catalog./) '86400'::pg_catalog.numeric)::pg_catalog.int8 "
                "FROM outbox.events_default WHERE pg_catalog.isfinite(created_at)",
                0) != SPI_OK_SELECT) {
    elog(ERROR, "outbox: cannot read the default partition");
  }
  const int ndays = static_cast<int>(SPI_processed);
  int64_t *days = static_cast<int64_t *>(palloc(sizeof(int64_t) * (ndays + 1)));
  for (int i = 0; i < ndays; ++i) {
    bool isnull = false;
    days[i] =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull)) -
        kUnixToPgDays;
  }
  for (int i = 0; i < ndays; ++i) {
    const int64_t day = days[i];
    if (DayEnd(day) > cutoff) {
      if (!HasPartitionFor(set, day)) CreatePartition(day, true);
      continue;
    }
    char from[kPartitionNameBufSize], to[kPartitionNameBufSize];
    FormatDayStartLiteral(day, from);
    FormatDayStartLiteral(day + 1, to);
    PurgeArg arg{
        psprintf(" AND created_at OPERATOR(pg_catalog.>=) '%s'::pg_catalog.timestamptz"
                 " AND created_at OPERATOR(pg_catalog.<) '%s'::pg_catalog.timestamptz",
                 from, to)};
    char what[96];
    snprintf(what, sizeof what, "delete published events of %.10s from outbox.events_default",
             from);
    RunGuarded(what, PurgeDefaultStep, &arg);
    const int64_t unpublished = UnpublishedIn("outbox.events_default", arg.range_filter);
    if (unpublished > 0) {
      snprintf(what, sizeof what, "outbox.events_default (events of %.10s)", from);
      WarnKept(what, unpublished);
    }
  }
}

}  // namespace

namespace {

struct OwnerArg {
  const char *partition;  // quoted
  const char *owner;      // quoted
};

// Every partition below `parent` as a subquery of (relid, level), read from
// pg_inherits: pg_partition_tree() locks each one, which deadlocks with a
// restore's ATTACH PARTITION (it holds outbox.events, waits for the one).
const char *PartitionTree(Oid parent) {
  return psprintf(
      "(WITH RECURSIVE tree(relid, level) AS ("
      " SELECT i.inhrelid, 1 FROM pg_catalog.pg_inherits i"
      " WHERE i.inhparent OPERATOR(pg_catalog.=) '%u'::pg_catalog.oid"
      " UNION ALL SELECT i.inhrelid, tree.level OPERATOR(pg_catalog.+) 1"
      " FROM pg_catalog.pg_inherits i JOIN tree"
      " ON i.inhparent OPERATOR(pg_catalog.=) tree.relid)"
      " SELECT relid, level FROM tree)",
      parent);
}

// `sql`'s rows (a partition, a role's quoted name), in the current context.
OwnerArg *ListOwnerArgs(const char *sql, int *n) {
  if (ExecFresh(sql, 0) != SPI_OK_SELECT) elog(ERROR, "outbox: cannot list partitions");
  *n = static_cast<int>(SPI_processed);
  OwnerArg *args = static_cast<OwnerArg *>(palloc(sizeof(OwnerArg) * (*n + 1)));
  for (int i = 0; i < *n; ++i) {
    args[i].partition =
        quote_identifier(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
    args[i].owner = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
  }
  return args;
}

bool AlignStep(void *p) {
  const OwnerArg *arg = static_cast<const OwnerArg *>(p);
  Exec(psprintf("ALTER TABLE outbox.%s OWNER TO %s", arg->partition, arg->owner));
  return true;
}

bool RegrantStep(void *p) {
  const OwnerArg *arg = static_cast<const OwnerArg *>(p);
  Exec(psprintf("GRANT ALL ON TABLE outbox.%s TO %s", arg->partition, arg->owner));
  return true;
}

// Privileges a superuser revoked from the owner on a partition: given back.
void RegrantOwners(Oid parent, Oid nsp) {
  const char *sql = psprintf(
      "SELECT c.relname::pg_catalog.text, pg_catalog.quote_ident(r.rolname::pg_catalog.text)"
      " FROM %s t"
      " JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.relid"
      " JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) c.relowner"
      " WHERE c.relnamespace OPERATOR(pg_catalog.=) '%u'::pg_catalog.oid"
      " AND NOT (pg_catalog.has_table_privilege(c.relowner, c.oid, 'SELECT')"
      " AND pg_catalog.has_table_privilege(c.relowner, c.oid, 'UPDATE')"
      " AND pg_catalog.has_table_privilege(c.relowner, c.oid, 'INSERT')"
      " AND pg_catalog.has_table_privilege(c.relowner, c.oid, 'DELETE'))"
      " ORDER BY t.level, c.relname",
      PartitionTree(parent), nsp);
  int n = 0;
  OwnerArg *args = ListOwnerArgs(sql, &n);
  for (int i = 0; i < n; ++i) {
    char what[160];
    snprintf(what, sizeof what, "give %s back its privileges on outbox.%s", args[i].owner,
             args[i].partition);
    if (RunGuarded(what, RegrantStep, &args[i])) {
      ereport(LOG, (errmsg("outbox: %s, the owner of partition outbox.%s, has its privileges on "
                           "it again",
                           args[i].owner, args[i].partition)));
    }
  }
}

}  // namespace

void AlignPartitionOwners() {
  const Oid nsp = get_namespace_oid("outbox", true);
  const Oid parent = OidIsValid(nsp) ? get_relname_relid("events", nsp) : InvalidOid;
  if (!OidIsValid(parent)) return;
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  // Every level: a day partitioned further has partitions of its own, which
  // the outcome updates reach through it.
  const char *sql = psprintf(
      "SELECT c.relname::pg_catalog.text, pg_catalog.quote_ident(r.rolname::pg_catalog.text)"
      " FROM %s t"
      " JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.relid"
      " JOIN pg_catalog.pg_class p ON p.oid OPERATOR(pg_catalog.=) '%u'::pg_catalog.oid"
      " JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) p.relowner"
      " WHERE c.relowner OPERATOR(pg_catalog.<>) p.relowner"
      // Only outbox's own partitions: one attached from another schema is
      // not ours to give away (and the publisher never updates it by name).
      " AND c.relnamespace OPERATOR(pg_catalog.=) '%u'::pg_catalog.oid"
      " ORDER BY t.level, c.relname",
      PartitionTree(parent), parent, nsp);
  int n = 0;
  OwnerArg *args = ListOwnerArgs(sql, &n);
  for (int i = 0; i < n; ++i) {
    char what[160];
    snprintf(what, sizeof what, "give partition outbox.%s to %s", args[i].partition, args[i].owner);
    if (RunGuarded(what, AlignStep, &args[i])) {
      ereport(LOG, (errmsg("outbox: partition outbox.%s now belongs to %s, the owner of "
                           "outbox.events",
                           args[i].partition, args[i].owner)));
    }
  }
  RegrantOwners(parent, nsp);
  SPI_finish();
}

void MaintainPartitions(TimestampTz at) {
  const Oid nsp = get_namespace_oid("outbox", true);
  const Oid parent = OidIsValid(nsp) ? get_relname_relid("events", nsp) : InvalidOid;
  if (!OidIsValid(parent)) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                    errmsg("outbox.events does not exist in this database"),
                    errhint("Run CREATE EXTENSION outbox.")));
  }
  const Interval &retention = guc::Retention();
  const TimestampTz cutoff = DatumGetTimestampTz(DirectFunctionCall2(
      timestamptz_mi_interval, TimestampTzGetDatum(at), PointerGetDatum(&retention)));

  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  // One run at a time per database (two would race to create the same
  // partition): SHARE UPDATE EXCLUSIVE on outbox.events conflicts with
  // itself, not with emit()'s or the publisher's ROW EXCLUSIVE, and only its
  // owner and superusers may take it (an advisory lock, as before, any role
  // that can connect could hold, and stop maintenance with).
  if (!ConditionalLockRelationOid(parent, ShareUpdateExclusiveLock)) {
    ereport(NOTICE, (errmsg("outbox: another maintenance is running in this database; "
                            "skipped")));
    SPI_finish();
    return;
  }
  PartitionSet set = ListPartitions(parent);

  DrainDefault(set, cutoff);
  set = ListPartitions(parent);

  const int64_t today = DayOf(at);
  for (int64_t day = today; day <= today + guc::premake_days; ++day) {
    if (!HasPartitionFor(set, day)) CreatePartition(day, false);
  }

  for (int i = 0; i < set.count; ++i) {
    const Partition &p = set.items[i];
    if (p.is_ours && DayEnd(p.day) <= cutoff) DropIfPublished(p.name, p.day);
  }
  SPI_finish();
}

}  // namespace outbox

// outbox.maintain(at timestamptz DEFAULT now()).
OUTBOX_SQL_FUNCTION(outbox_maintain) {
  if (PG_ARGISNULL(0)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("at must not be NULL")));
  }
  const TimestampTz at = PG_GETARG_TIMESTAMPTZ(0);
  // 'infinity' would name partitions after a day no later run recognises.
  if (TIMESTAMP_NOT_FINITE(at)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("at must be a finite time")));
  }
  outbox::MaintainPartitions(at);
  PG_RETURN_VOID();
}
