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
// must not stop publishing (issue 14). The checks repeated here are those
// that do not depend on the publishers being gone: not in a transaction
// block (where PostgreSQL refuses the statement), the database exists, the
// caller owns it (or the template may be copied by the caller) and has
// CREATEDB where the statement needs it, and it is not the caller's own
// database. A statement that passes them may still fail later (another
// session is connected): then the pause ends with it.
//
// The same hook does, for a COMMIT PREPARED, what the prepared transaction's
// own commit would have done (commit_prepared.hpp), and wakes the launcher
// after a CREATE DATABASE, so that a copy of a database that has the
// extension publishes at once instead of at the launcher's next scan.
#include "database_guard.hpp"

#include "pg_bridge.hpp"

#include "commit_prepared.hpp"
#include "shmem.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace {

constexpr long kPauseMs = 60000;     // upper bound; normally it ends with the statement
constexpr long kWaitExitMs = 10000;  // publishers stop within a few seconds

ProcessUtility_hook_type prev_process_utility = nullptr;

enum class Act { kDrop, kRename, kMove, kCopy };

bool IsOwner(Oid dboid) {
#if PG_VERSION_NUM >= 160000
  return object_ownercheck(DatabaseRelationId, dboid, GetUserId());
#else
  return pg_database_ownercheck(dboid, GetUserId());
#endif
}

bool HasCreatedb() {
  if (superuser()) return true;
  HeapTuple tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
  if (!HeapTupleIsValid(tuple)) return false;
  const bool createdb = reinterpret_cast<Form_pg_authid>(GETSTRUCT(tuple))->rolcreatedb;
  ReleaseSysCache(tuple);
  return createdb;
}

bool IsTemplate(Oid dboid) {
  HeapTuple tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dboid));
  if (!HeapTupleIsValid(tuple)) return false;
  const bool is_template = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple))->datistemplate;
  ReleaseSysCache(tuple);
  return is_template;
}

// The database named, if the statement's checks will let the caller act on
// it as `act` says; InvalidOid otherwise (nothing to pause).
Oid WillAct(const char *datname, Act act) {
  if (datname == nullptr) return InvalidOid;
  const Oid dboid = get_database_oid(datname, true);
  if (!OidIsValid(dboid) || dboid == MyDatabaseId) return InvalidOid;
  switch (act) {
    case Act::kDrop:
    case Act::kMove:
      if (IsTransactionBlock() || !IsOwner(dboid)) return InvalidOid;
      break;
    case Act::kRename:
      if (!IsOwner(dboid) || !HasCreatedb()) return InvalidOid;
      break;
    case Act::kCopy:
      if (IsTransactionBlock() || !HasCreatedb()) return InvalidOid;
      if (!IsTemplate(dboid) && !IsOwner(dboid)) return InvalidOid;
      break;
  }
  return dboid;
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
void Resume(DatabaseSlot *slot, Oid dboid) {
  if (slot == nullptr || slot->dboid != dboid) return;
  pg_atomic_write_u64(&slot->paused_until, 0);
  WakeLauncher();
}

const char *DefElemString(List *options, const char *name) {
  ListCell *lc;
  foreach (lc, options) {
    DefElem *d = static_cast<DefElem *>(lfirst(lc));
    if (strcmp(d->defname, name) == 0 && d->arg != nullptr) return defGetString(d);
  }
  return nullptr;
}

void RunUtility(PlannedStmt *pstmt, const char *query_string, bool read_only_tree,
                ProcessUtilityContext context, ParamListInfo params, QueryEnvironment *query_env,
                DestReceiver *dest, QueryCompletion *qc) {
  if (prev_process_utility != nullptr) {
    prev_process_utility(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc);
  } else {
    standard_ProcessUtility(pstmt, query_string, read_only_tree, context, params, query_env, dest,
                            qc);
  }
}

// Run the statement with the database's publishers paused, and end the pause
// however the statement ends.
void RunPaused(DatabaseSlot *slot, Oid dboid, PlannedStmt *pstmt, const char *query_string,
               bool read_only_tree, ProcessUtilityContext context, ParamListInfo params,
               QueryEnvironment *query_env, DestReceiver *dest, QueryCompletion *qc) {
  // PG_CATCH and a re-throw rather than PG_FINALLY, whose flag GCC takes for
  // a variable a longjmp may clobber.
  PG_TRY();
  { RunUtility(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc); }
  PG_CATCH();
  {
    Resume(slot, dboid);
    PG_RE_THROW();
  }
  PG_END_TRY();
  Resume(slot, dboid);
}

void GuardedProcessUtility(PlannedStmt *pstmt, const char *query_string, bool read_only_tree,
                           ProcessUtilityContext context, ParamListInfo params,
                           QueryEnvironment *query_env, DestReceiver *dest, QueryCompletion *qc) {
  Node *stmt = pstmt->utilityStmt;
  Oid paused = InvalidOid;
  bool created_database = false;
  if (Shared() != nullptr) {
    switch (nodeTag(stmt)) {
      case T_DropdbStmt:
        paused = WillAct(castNode(DropdbStmt, stmt)->dbname, Act::kDrop);
        break;
      case T_CreatedbStmt:
        paused =
            WillAct(DefElemString(castNode(CreatedbStmt, stmt)->options, "template"), Act::kCopy);
        created_database = true;
        break;
      case T_RenameStmt:
        if (castNode(RenameStmt, stmt)->renameType == OBJECT_DATABASE) {
          paused = WillAct(castNode(RenameStmt, stmt)->subname, Act::kRename);
        }
        break;
      case T_AlterDatabaseStmt: {
        AlterDatabaseStmt *alter = castNode(AlterDatabaseStmt, stmt);
        if (DefElemString(alter->options, "tablespace") != nullptr) {
          paused = WillAct(alter->dbname, Act::kMove);
        }
        break;
      }
      case T_TransactionStmt:
        if (castNode(TransactionStmt, stmt)->kind == TRANS_STMT_COMMIT_PREPARED) {
          BeforeCommitPrepared(castNode(TransactionStmt, stmt)->gid);
          RunUtility(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc);
          AfterCommitPrepared();  // it ran: a refused one raised above
          return;
        }
        break;
      default:
        break;
    }
  }
  DatabaseSlot *slot = PauseDatabase(paused);
  if (slot == nullptr) {
    RunUtility(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc);
  } else {
    RunPaused(slot, paused, pstmt, query_string, read_only_tree, context, params, query_env, dest,
              qc);
  }
  if (created_database) WakeLauncherAtCommit();  // a new database to look at
}

}  // namespace

void InstallDatabaseGuard() {
  prev_process_utility = ProcessUtility_hook;
  ProcessUtility_hook = GuardedProcessUtility;
}

}  // namespace outbox
