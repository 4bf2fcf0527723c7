// See config_changes.hpp.
//
// Cost: the executor hook looks at a statement only when it writes
// (resultRelations), and then at each written table's schema (a syscache
// lookup); emit()'s direct insert does not go through the executor.
#include "hooks/config_changes.hpp"

#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "nodes/parsenodes.h"
#include "parser/parsetree.h"
#include "utils/lsyscache.h"
}

namespace outbox {
namespace {

ExecutorStart_hook_type prev_executor_start = nullptr;

// Whether relid is outbox.sinks or outbox.routes. Never raises: a relation
// dropped meanwhile has no namespace.
bool IsConfigTable(Oid relid) {
  if (!OidIsValid(relid)) return false;
  const Oid schema = get_rel_namespace(relid);
  if (!OidIsValid(schema) || schema != get_namespace_oid("outbox", true)) return false;
  const char *name = get_rel_name(relid);
  return name != nullptr && (strcmp(name, "sinks") == 0 || strcmp(name, "routes") == 0);
}

bool NamesConfigTable(const RangeVar *relation) {
  // Only a name outbox's own: unqualified names resolve through the
  // search_path, which may lead into schema outbox.
  if (relation == nullptr) return false;
  if (relation->schemaname != nullptr && strcmp(relation->schemaname, "outbox") != 0) {
    return false;
  }
  if (strcmp(relation->relname, "sinks") != 0 && strcmp(relation->relname, "routes") != 0) {
    return false;
  }
  return IsConfigTable(RangeVarGetRelid(relation, NoLock, true));
}

void ConfigChangeExecutorStart(QueryDesc *query, int eflags) {
  // First the executor's start, which checks the statement's permissions: a
  // write PostgreSQL refuses raises there and reloads nothing.
  if (prev_executor_start != nullptr) {
    prev_executor_start(query, eflags);
  } else {
    standard_ExecutorStart(query, eflags);
  }
  // EXPLAIN without ANALYZE runs nothing.
  if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) == 0 && query->plannedstmt != nullptr) {
    ListCell *cell;
    foreach (cell, query->plannedstmt->resultRelations) {
      const RangeTblEntry *rte = rt_fetch(lfirst_int(cell), query->plannedstmt->rtable);
      if (rte->rtekind == RTE_RELATION && IsConfigTable(rte->relid)) {
        ReloadConfigAtCommit();
        break;
      }
    }
  }
}

}  // namespace

void InstallConfigChangeHook() {
  prev_executor_start = ExecutorStart_hook;
  ExecutorStart_hook = ConfigChangeExecutorStart;
}

bool ChangesConfiguration(Node *stmt) {
  switch (nodeTag(stmt)) {
    case T_CopyStmt: {
      const CopyStmt *copy = castNode(CopyStmt, stmt);
      return copy->is_from && NamesConfigTable(copy->relation);
    }
    case T_TruncateStmt: {
      ListCell *cell;
      foreach (cell, castNode(TruncateStmt, stmt)->relations) {
        if (NamesConfigTable(lfirst_node(RangeVar, cell))) return true;
      }
      return false;
    }
    case T_AlterExtensionStmt:
      return strcmp(castNode(AlterExtensionStmt, stmt)->extname, "outbox") == 0;
    default:
      return false;
  }
}

}  // namespace outbox
