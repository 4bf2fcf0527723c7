// DROP DATABASE (without FORCE), CREATE DATABASE ... TEMPLATE x, ALTER
// DATABASE x RENAME and ALTER DATABASE x SET TABLESPACE fail while any other
// session is connected to the database, and a publisher always is. Before
// such a statement runs, this hook pauses the database's publishers (they
// exit at once, abandoning any delivery in flight: those events stay
// pending) and waits for them to be gone; the launcher does not start them
// again while the pause lasts: until the statement has ended, however it
// ended (for DROP DATABASE, the database is gone then). The pause has an
// upper bound too (kPauseMs), for a session that dies in the middle.
//
// Only a statement that will pass PostgreSQL's own checks pauses anything:
// the hook runs before them, and a refused DROP DATABASE by any login role
// must not stop publishing. The checks repeated here are those
// that do not depend on the publishers being gone (WillAct): where it runs
// from (not a transaction block or a function), the database exists and is
// not the caller's own, the caller owns it (or may copy the template) and
// has CREATEDB where the statement needs it, the new name is free, the
// tablespace exists, differs and may be used, no other session and no
// prepared transaction is in the database. A statement that passes them may
// still fail later (a session connects meanwhile): the pause ends with it.
// The ProcessUtility hook (process_utility.cpp) asks DatabaseToPause before
// each statement and runs it inside PauseDatabase and ResumeDatabase.
#include "hooks/database_guard.hpp"

#include "pg_bridge.hpp"

#include "shmem/shmem.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "catalog/pg_tablespace.h"
#include "commands/dbcommands.h"
#include "commands/tablespace.h"
#include "executor/spi.h"
#include "storage/procarray.h"
#include "utils/backend_status.h"
#include "pgstat.h"
#include "access/twophase.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace {

constexpr long kPauseMs = 60000;     // upper bound; normally it ends with the statement
constexpr long kWaitExitMs = 10000;  // publishers stop within a few seconds

enum class Act { kDrop, kRename, kMove, kCopy };

bool IsOwner(Oid dboid) { return CurrentUserOwnsDatabase(dboid); }

bool HasCreatedb() {
  if (superuser()) return true;
  HeapTuple tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
  if (!HeapTupleIsValid(tuple)) return false;
  const bool createdb = reinterpret_cast<Form_pg_authid>(GETSTRUCT(tuple))->rolcreatedb;
  ReleaseSysCache(tuple);
  return createdb;
}

// The database's pg_database row, copied out (zeroed when it is gone).
FormData_pg_database DatabaseRow(Oid dboid) {
  FormData_pg_database row;
  memset(&row, 0, sizeof row);
  HeapTuple tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dboid));
  if (!HeapTupleIsValid(tuple)) return row;
  row = *reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple));
  ReleaseSysCache(tuple);
  return row;
}

bool IsTemplate(Oid dboid) { return DatabaseRow(dboid).datistemplate; }

// Prepared transactions of database `dboid` (they keep it from being
// dropped, renamed or moved). Runs a query: only after the cheap checks.
int64 PreparedTransactionsIn(Oid dboid) {
  if (max_prepared_xacts == 0) return 0;
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  Oid types[1] = {OIDOID};
  Datum args[1] = {ObjectIdGetDatum(dboid)};
  int64 n = 0;
  if (SPI_execute_with_args("SELECT pg_catalog.count(*) FROM pg_catalog.pg_prepared_xacts p"
                            " JOIN pg_catalog.pg_database d"
                            " ON d.datname OPERATOR(pg_catalog.=) p.database"
                            " WHERE d.oid OPERATOR(pg_catalog.=) $1",
                            1, types, args, nullptr, true, 1) == SPI_OK_SELECT &&
      SPI_processed == 1) {
    bool isnull = false;
    n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
  }
  SPI_finish();
  return n;
}

// Client sessions (not background workers, not autovacuum, which
// PostgreSQL stops itself) connected to database `dboid`, other than ours.
int ClientSessionsIn(Oid dboid) {
  pgstat_clear_snapshot();  // a fresh look each time
  int n = 0;
  const int backends = pgstat_fetch_stat_numbackends();
  for (int i = 1; i <= backends; ++i) {
    LocalPgBackendStatus *local = LocalBackendStatus(i);
    if (local == nullptr) continue;
    const PgBackendStatus &b = local->backendStatus;
    if (b.st_procpid > 0 && b.st_procpid != MyProcPid && b.st_databaseid == dboid &&
        b.st_backendType == B_BACKEND) {
      ++n;
    }
  }
  return n;
}

// Whether the database has no client session, waiting up to 5 s for those
// that are leaving (as PostgreSQL waits before it gives up).
bool NoClientSessions(Oid dboid) {
  for (int i = 0; i < 50; ++i) {
    if (ClientSessionsIn(dboid) == 0) return true;
    CHECK_FOR_INTERRUPTS();
    pg_usleep(100 * 1000L);
  }
  return false;
}

// The database named, if the statement will pass PostgreSQL's checks that
// do not depend on the publishers being gone, so that it will act on the
// database as `act` says; InvalidOid otherwise (nothing to pause). Those are
// the checks PostgreSQL makes before or after waiting for other sessions to
// leave: the place it runs from (not a transaction block or a function), the
// caller's rights, the object names involved, other sessions and prepared
// transactions in the database. `other` is the new name (kRename, kCopy) or
// the tablespace (kMove). A statement that passes them may still fail (a
// session connects meanwhile): then the pause ends with it.
Oid WillAct(const char *datname, Act act, const char *other, bool top_level, bool force = false) {
  if (datname == nullptr) return InvalidOid;
  const Oid dboid = get_database_oid(datname, true);
  if (!OidIsValid(dboid)) return InvalidOid;
  // PostgreSQL refuses to drop, rename or move the session's own database;
  // copying it is allowed (our publishers must step aside for that).
  if (dboid == MyDatabaseId && act != Act::kCopy) return InvalidOid;
  if (act != Act::kRename && (!top_level || IsTransactionBlock())) return InvalidOid;
  switch (act) {
    case Act::kDrop:
      if (!IsOwner(dboid) || IsTemplate(dboid)) return InvalidOid;
      break;
    case Act::kMove: {
      if (!IsOwner(dboid) || other == nullptr) return InvalidOid;
      const Oid tablespace = get_tablespace_oid(other, true);
      if (!OidIsValid(tablespace) || tablespace == DatabaseRow(dboid).dattablespace)
        return InvalidOid;
      if (!CurrentUserMayCreateIn(tablespace)) return InvalidOid;
      break;
    }
    case Act::kRename:
      if (!IsOwner(dboid) || !HasCreatedb()) return InvalidOid;
      if (other == nullptr || OidIsValid(get_database_oid(other, true))) return InvalidOid;
      break;
    case Act::kCopy:
      if (!HasCreatedb()) return InvalidOid;
      if (!IsTemplate(dboid) && !IsOwner(dboid)) return InvalidOid;
      if (other == nullptr || OidIsValid(get_database_oid(other, true))) return InvalidOid;
      break;
  }
  if (PreparedTransactionsIn(dboid) > 0) return InvalidOid;
  // Other client sessions: PostgreSQL refuses while they are connected.
  // DROP DATABASE ... WITH (FORCE) terminates them instead, if the caller
  // may: a superuser always may; anyone else only as their role, which is
  // not checked here, so then only an empty database is worth a pause.
  if (force && superuser()) return dboid;
  if (!NoClientSessions(dboid)) return InvalidOid;
  return dboid;
}

bool HasOption(List *options, const char *name) {
  ListCell *cell;
  foreach (cell, options) {
    if (strcmp(lfirst_node(DefElem, cell)->defname, name) == 0) return true;
  }
  return false;
}

const char *DefElemString(List *options, const char *name) {
  ListCell *lc;
  foreach (lc, options) {
    DefElem *d = static_cast<DefElem *>(lfirst(lc));
    if (strcmp(d->defname, name) == 0 && d->arg != nullptr) return defGetString(d);
  }
  return nullptr;
}

}  // namespace

void RefuseChosenDatabaseOid(Node *stmt) {
  if (!IsA(stmt, CreatedbStmt) || superuser()) return;
  ListCell *lc;
  foreach (lc, castNode(CreatedbStmt, stmt)->options) {
    if (strcmp(static_cast<DefElem *>(lfirst(lc))->defname, "oid") != 0) continue;
    ereport(ERROR,
            (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
             errmsg("outbox: only a superuser may choose a new database's OID"),
             errdetail("outbox tells a copy of a database from the database itself by its OID "
                       "(outbox.home): a copy given the OID of the database it was copied from, "
                       "once that was dropped, would publish its events again, and chosen OIDs "
                       "would come first among the databases that get publishers."),
             errhint("Leave out the OID option; binary upgrades run as a superuser.")));
  }
}

Oid DatabaseToPause(Node *stmt, bool top_level) {
  if (Shared() == nullptr) return InvalidOid;
  switch (nodeTag(stmt)) {
    case T_DropdbStmt:
      return WillAct(castNode(DropdbStmt, stmt)->dbname, Act::kDrop, nullptr, top_level,
                     HasOption(castNode(DropdbStmt, stmt)->options, "force"));
    case T_CreatedbStmt: {
      CreatedbStmt *create = castNode(CreatedbStmt, stmt);
      return WillAct(DefElemString(create->options, "template"), Act::kCopy, create->dbname,
                     top_level);
    }
    case T_RenameStmt: {
      RenameStmt *rename = castNode(RenameStmt, stmt);
      if (rename->renameType != OBJECT_DATABASE) return InvalidOid;
      return WillAct(rename->subname, Act::kRename, rename->newname, top_level);
    }
    case T_AlterDatabaseStmt: {
      AlterDatabaseStmt *alter = castNode(AlterDatabaseStmt, stmt);
      const char *tablespace = DefElemString(alter->options, "tablespace");
      if (tablespace == nullptr) return InvalidOid;
      return WillAct(alter->dbname, Act::kMove, tablespace, top_level);
    }
    default:
      return InvalidOid;
  }
}

DatabaseSlot *PauseDatabase(Oid dboid) {
  if (!OidIsValid(dboid)) return nullptr;
  DatabaseSlot *slot = FindSlot(dboid);
  if (slot == nullptr) return nullptr;
  const TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), kPauseMs);
  pg_atomic_write_u64(&slot->paused_until, static_cast<uint64>(until));
  WakePublishers(dboid);
  for (long waited = 0; waited < kWaitExitMs && AnyPublisher(slot); waited += 10) {
    CHECK_FOR_INTERRUPTS();
    pg_usleep(10 * 1000L);
  }
  return slot;
}

// The statement is over: the database's publishers may start again (after
// DROP DATABASE there is none to start, and the launcher frees its slot).
void ResumeDatabase(DatabaseSlot *slot, Oid dboid) {
  if (slot == nullptr || slot->dboid != dboid) return;
  pg_atomic_write_u64(&slot->paused_until, 0);
  WakeLauncher();
}

}  // namespace outbox
