// DROP DATABASE (without FORCE), CREATE DATABASE ... TEMPLATE x, ALTER
// DATABASE x RENAME and ALTER DATABASE x SET TABLESPACE fail while any other
// session is connected to the database, and a publisher always is. Before
// such a statement runs, this hook pauses the database's publishers (they
// exit at once, abandoning any delivery in flight: those events stay
// pending) and waits for them to be gone; the launcher does not restart them
// until the pause lapses, by which time the statement has finished (and for
// DROP DATABASE, the database is gone).
//
// The same hook does, for a COMMIT PREPARED, what the prepared transaction's
// own commit would have done (commit_prepared.hpp): wake the publishers,
// make them reload sinks and routes, announce the extension.
#include "database_guard.hpp"

#include "pg_bridge.hpp"

#include "commit_prepared.hpp"
#include "shmem.hpp"

extern "C" {
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace {

constexpr long kPauseMs = 15000;     // longer than DROP DATABASE's own 5 s wait
constexpr long kWaitExitMs = 10000;  // publishers stop within a few seconds

ProcessUtility_hook_type prev_process_utility = nullptr;

void PauseDatabase(const char *datname) {
  if (datname == nullptr) return;
  const Oid dboid = get_database_oid(datname, true);
  if (!OidIsValid(dboid)) return;
  DatabaseSlot *slot = FindSlot(dboid);
  if (slot == nullptr) return;
  const TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), kPauseMs);
  pg_atomic_write_u64(&slot->paused_until, static_cast<uint64>(until));
  WakePublishers(dboid);
  for (long waited = 0; waited < kWaitExitMs && AnyPublisher(slot); waited += 10) {
    CHECK_FOR_INTERRUPTS();
    pg_usleep(10 * 1000L);
  }
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

void GuardedProcessUtility(PlannedStmt *pstmt, const char *query_string, bool read_only_tree,
                           ProcessUtilityContext context, ParamListInfo params,
                           QueryEnvironment *query_env, DestReceiver *dest, QueryCompletion *qc) {
  Node *stmt = pstmt->utilityStmt;
  switch (nodeTag(stmt)) {
    case T_DropdbStmt:
      PauseDatabase(castNode(DropdbStmt, stmt)->dbname);
      break;
    case T_CreatedbStmt:
      PauseDatabase(DefElemString(castNode(CreatedbStmt, stmt)->options, "template"));
      break;
    case T_RenameStmt:
      if (castNode(RenameStmt, stmt)->renameType == OBJECT_DATABASE) {
        PauseDatabase(castNode(RenameStmt, stmt)->subname);
      }
      break;
    case T_TransactionStmt:
      if (castNode(TransactionStmt, stmt)->kind == TRANS_STMT_COMMIT_PREPARED) {
        TransactionStmt *commit = castNode(TransactionStmt, stmt);
        BeforeCommitPrepared(commit->gid);
        RunUtility(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc);
        AfterCommitPrepared();  // it ran: a refused one raised above
        return;
      }
      break;
    case T_AlterDatabaseStmt: {
      AlterDatabaseStmt *alter = castNode(AlterDatabaseStmt, stmt);
      if (DefElemString(alter->options, "tablespace") != nullptr) PauseDatabase(alter->dbname);
      break;
    }
    default:
      break;
  }
  RunUtility(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc);
}

}  // namespace

void InstallDatabaseGuard() {
  prev_process_utility = ProcessUtility_hook;
  ProcessUtility_hook = GuardedProcessUtility;
}

}  // namespace outbox
