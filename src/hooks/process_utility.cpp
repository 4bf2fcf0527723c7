// outbox's one ProcessUtility hook. Every utility statement passes through
// it, in the order below; each step is a function of the file that keeps
// that concern, and each looks only at the statements it is about:
//
//   before the statement runs
//     1. who may take locks on outbox's relations (events_ddl_check.hpp),
//        who may choose a new database's OID (database_guard.hpp), an
//        index whose build would run code that is not built in (CREATE
//        INDEX CONCURRENTLY would commit it before it is checked), and
//        statistics ANALYZE would compute as the owner of outbox.events
//        (events_ddl_check.hpp);
//     2. a restore's partitions: room made, rows moved, the index a
//        restored ATTACH made skipped (restored_partition.hpp);
//     3. CREATE EXTENSION outbox's schema (extension_create.hpp);
//     4. whether it changes outbox.sinks or outbox.routes
//        (config_changes.hpp);
//     5. the database it will drop, copy, rename or move, whose publishers
//        step aside while it runs (database_guard.hpp);
//     6. COMMIT PREPARED of a transaction that emitted: what its own commit
//        would have done (commit_prepared.hpp) - the whole statement;
//     7. the events DROP EXTENSION outbox drops (extension_drop.hpp);
//   the statement runs (paused: however it ends, the pause ends);
//   after it ran
//     8. the WARNING for the events dropped, the refusal of DDL emit() would
//        refuse and of owners changed under triggers on outbox.events
//        (extension_drop.hpp, events_ddl_check.hpp), when nothing was
//        paused;
//     9. the launcher woken after CREATE DATABASE (a copy of a database
//        with the extension publishes at once), the publishers' reload of
//        sinks and routes at commit.
#include "hooks/process_utility.hpp"

#include "hooks/config_changes.hpp"
#include "hooks/database_guard.hpp"
#include "hooks/events_ddl_check.hpp"
#include "hooks/extension_create.hpp"
#include "hooks/extension_drop.hpp"
#include "hooks/restored_partition.hpp"

#include "pg_bridge.hpp"

#include "shmem/commit_prepared.hpp"
#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"

extern "C" {
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
}

namespace outbox {
namespace {

ProcessUtility_hook_type prev_process_utility = nullptr;

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
    ResumeDatabase(slot, dboid);
    PG_RE_THROW();
  }
  PG_END_TRY();
  ResumeDatabase(slot, dboid);
}

bool IsCommitPrepared(Node *stmt) {
  return IsA(stmt, TransactionStmt) &&
         castNode(TransactionStmt, stmt)->kind == TRANS_STMT_COMMIT_PREPARED;
}

void OutboxProcessUtility(PlannedStmt *pstmt, const char *query_string, bool read_only_tree,
                          ProcessUtilityContext context, ParamListInfo params,
                          QueryEnvironment *query_env, DestReceiver *dest, QueryCompletion *qc) {
  Node *stmt = pstmt->utilityStmt;
  const bool top_level = context == PROCESS_UTILITY_TOPLEVEL;
  // 1. Who may, before anything takes a lock.
  RefuseLockingDdlOfNonOwners(stmt);
  RefuseChosenDatabaseOid(stmt);
  RefuseConcurrentIndexWithCode(stmt);
  RefuseIndexCodeBeforeBuild(stmt, query_string);
  RefuseAlterTableOfOutboxTables(stmt);
  RefuseStatisticsOnExpressions(stmt);
  // 2. Not a database statement: restoring a dump.
  if (IsA(stmt, CreateStmt)) MakeRoomForRestoredPartition(castNode(CreateStmt, stmt));
  // A dump's statement is a top-level one (maintenance's own ATTACH, run
  // through SPI, has moved its rows already).
  if (top_level && IsA(stmt, AlterTableStmt)) {
    MoveDefaultRowsBeforeRestoredAttach(castNode(AlterTableStmt, stmt));
  }
  if (IsA(stmt, IndexStmt) && MadeByAttachingRestoredPartition(castNode(IndexStmt, stmt))) {
    if (qc != nullptr) SetQueryCompletion(qc, CMDTAG_CREATE_INDEX, 0);
    return;
  }
  // 3.
  if (IsA(stmt, CreateExtensionStmt)) CheckCreateExtension(castNode(CreateExtensionStmt, stmt));
  // 4. Sinks and routes changed by COPY, TRUNCATE or an update script:
  // named now, noted once the statement ran.
  const bool changes_configuration = ChangesConfiguration(stmt);
  // 5.
  const Oid paused = DatabaseToPause(stmt, top_level);
  const bool created_database = Shared() != nullptr && IsA(stmt, CreatedbStmt);
  // 6.
  // Only a top-level COMMIT PREPARED runs: PostgreSQL refuses it inside a
  // function (DO, EXECUTE), after this hook, and noted as committing, the
  // prepared transaction would no longer be passed.
  if (Shared() != nullptr && top_level && IsCommitPrepared(stmt)) {
    BeforeCommitPrepared(castNode(TransactionStmt, stmt)->gid);
    PG_TRY();
    { RunUtility(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc); }
    PG_CATCH();
    {
      CommitPreparedFailed();
      PG_RE_THROW();
    }
    PG_END_TRY();
    AfterCommitPrepared();  // it ran: a refused one raised above
    return;
  }
  // 7. DROP EXTENSION outbox: counted before, said after it ran.
  const DroppedEvents dropped =
      IsA(stmt, DropStmt) ? CountEventsDroppedWith(castNode(DropStmt, stmt)) : DroppedEvents{};
  DatabaseSlot *slot = PauseDatabase(paused);
  if (slot == nullptr) {
    RunUtility(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc);
    // 8.
    WarnOfDroppedEvents(dropped);
    RefuseDdlEmitWouldRefuse(stmt);
    RefuseTriggerFunctionsGivenAway(stmt);
  } else {
    RunPaused(slot, paused, pstmt, query_string, read_only_tree, context, params, query_env, dest,
              qc);
  }
  // 9.
  if (created_database) WakeLauncherAtCommit();  // a new database to look at
  if (changes_configuration) ReloadConfigAtCommit();
}

}  // namespace

void InstallProcessUtilityHook() {
  prev_process_utility = ProcessUtility_hook;
  ProcessUtility_hook = OutboxProcessUtility;
}

}  // namespace outbox
