// What a DDL statement left on outbox.events: see events_ddl_check.hpp.
//
// Invariants: runs after the statement, in its transaction, which holds the
// statement's locks on the relation; no C++ object with a destructor.
#include "hooks/events_ddl_check.hpp"

#include "pg_compat.hpp"
#include "emit/writer_code_rule.hpp"
#include "shmem/shmem.hpp"
#include "subtransaction.hpp"

#include <cstring>

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/dependency.h"
#include "catalog/partition.h"
#include "catalog/pg_event_trigger.h"
#include "catalog/pg_inherits.h"
#include "commands/defrem.h"
#include "commands/tablecmds.h"
#include "parser/parse_utilcmd.h"
#include "catalog/pg_proc.h"
#include "commands/extension.h"
#include "nodes/parsenodes.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
}

namespace outbox {
namespace {

void WatchNothing(Oid) {}

// The relation a statement changes (nullptr: none this check looks at).
RangeVar *TargetOf(Node *stmt) {
  switch (nodeTag(stmt)) {
    case T_CreateTrigStmt:
      return castNode(CreateTrigStmt, stmt)->relation;
    case T_IndexStmt:
      return castNode(IndexStmt, stmt)->relation;
    case T_AlterTableStmt:
      return castNode(AlterTableStmt, stmt)->relation;
    case T_RuleStmt:
      return castNode(RuleStmt, stmt)->relation;
    case T_CreatePolicyStmt:
      return castNode(CreatePolicyStmt, stmt)->table;
    case T_AlterPolicyStmt:
      return castNode(AlterPolicyStmt, stmt)->table;
    case T_CreateStmt:
      return castNode(CreateStmt, stmt)->relation;
    default:
      return nullptr;
  }
}

// Whether `relid` is outbox.events or below it.
bool UnderEvents(Oid relid, Oid events) {
  if (relid == events) return true;
  if (!get_rel_relispartition(relid)) return false;
  List *ancestors = get_partition_ancestors(relid);
  return list_member_oid(ancestors, events);
}

// outbox's tables besides outbox.events, which its own code writes.
constexpr const char *kOtherTables[] = {"counts", "sinks", "routes", "home"};

// Whether `relid` is one whose code outbox's own statements would run as
// outbox_writer: outbox.events or below it, or another table of the
// extension's (outbox.counts, which the counting triggers write,
// outbox.sinks, outbox.routes, outbox.home, which outbox's functions write).
// A day partition detached from outbox.events stays outbox_writer's: what
// is built on it runs as that role too.
bool Guarded(Oid relid, Oid schema, Oid events) {
  if (UnderEvents(relid, events)) return true;
  HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
  if (!HeapTupleIsValid(tuple)) return false;
  const Form_pg_class form = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple));
  const bool table =
      form->relkind == RELKIND_RELATION || form->relkind == RELKIND_PARTITIONED_TABLE;
  const Oid owner = form->relowner;
  ReleaseSysCache(tuple);
  if (!table) return false;  // an index, a view, a sequence: what they run is their table's
  if (owner == get_role_oid("outbox_writer", true)) return true;
  return get_rel_namespace(relid) == schema && get_rel_relkind(relid) == RELKIND_RELATION &&
         getExtensionOfObject(RelationRelationId, relid) == get_extension_oid("outbox", true);
}

// RefuseCodeNotBuiltIn over the relation *`oid` and everything below it (a
// partition attached or made partitioned brings its own partitions). For
// RunInSubtransaction.
bool CheckAll(void *oid) {
  List *all = find_all_inheritors(*static_cast<Oid *>(oid), AccessShareLock, nullptr);
  ListCell *cell;
  foreach (cell, all) {
    Relation rel = table_open(lfirst_oid(cell), AccessShareLock);
    RefuseCodeNotBuiltIn(rel, WatchNothing);
    table_close(rel, AccessShareLock);
  }
  return true;
}

// RefuseIndexCodeNotBuiltIn over the relation *`oid` (one of outbox's other
// tables). For RunInSubtransaction.
bool CheckIndexesOf(void *oid) {
  Relation rel = table_open(*static_cast<Oid *>(oid), AccessShareLock);
  RefuseIndexCodeNotBuiltIn(rel);
  table_close(rel, AccessShareLock);
  return true;
}

// The relation of schema outbox that `target` names, or may come to name
// before PostgreSQL locks it (InvalidOid: none). A name with its schema is
// resolved now. A name without one is looked up again by PostgreSQL after
// the statement waited for its own locks, and a relation of that name
// earlier on the search_path can be renamed away meanwhile: so it stands for
// outbox's relation of that name whenever schema outbox is on the path.
// Takes no lock.
Oid OutboxRelationNamed(RangeVar *target, Oid schema) {
  if (target->schemaname != nullptr) {
    const Oid relid = RangeVarGetRelid(target, NoLock, true);
    return OidIsValid(relid) && get_rel_namespace(relid) == schema ? relid : InvalidOid;
  }
  List *path = fetch_search_path(false);
  const bool on_path = list_member_oid(path, schema);
  list_free(path);
  return on_path ? get_relname_relid(target->relname, schema) : InvalidOid;
}

[[noreturn]] void RefuseOn(RangeVar *target, const char *message, Oid relid) {
  ereport(ERROR,
          (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE), errmsg(message, get_rel_name(relid)),
           target->schemaname == nullptr
               ? errhint("The name is looked up on the search_path, which has schema outbox: "
                         "qualify it with its schema.")
               : 0));
  pg_unreachable();
}

// 42501 unless the current user owns `target` (when it names a relation in
// schema outbox: OutboxRelationNamed).
void RequireOwnerOf(RangeVar *target, Oid schema) {
  const Oid relid = OutboxRelationNamed(target, schema);
  if (!OidIsValid(relid) || CurrentUserOwnsRelation(relid)) return;
  RefuseOn(target, "must be owner of table %s", relid);
}

// 42501 unless the current user may reference `target` in a foreign key
// (when it names a relation in schema outbox): PostgreSQL locks the
// referenced table, SHARE ROW EXCLUSIVE, before it checks that privilege.
void RequireReferencesOn(RangeVar *target, Oid schema) {
  const Oid relid = OutboxRelationNamed(target, schema);
  if (!OidIsValid(relid) || pg_class_aclcheck(relid, GetUserId(), ACL_REFERENCES) == ACLCHECK_OK) {
    return;
  }
  RefuseOn(target, "permission denied for table %s", relid);
}

// A constraint, a column's constraints: the table a foreign key references.
void CheckConstraintNode(Node *node, Oid schema) {
  if (node == nullptr) return;
  if (IsA(node, Constraint)) {
    Constraint *constraint = castNode(Constraint, node);
    if (constraint->contype == CONSTR_FOREIGN && constraint->pktable != nullptr) {
      RequireReferencesOn(constraint->pktable, schema);
    }
  } else if (IsA(node, ColumnDef)) {
    ListCell *cell;
    foreach (cell, castNode(ColumnDef, node)->constraints)
      CheckConstraintNode(lfirst_node(Node, cell), schema);
  }
}

// A trigger emit() never fires (on UPDATE, DELETE or TRUNCATE) still runs
// in the publisher, as the owner of outbox.events, when it updates events:
// its function must be one only a superuser can replace (CREATE OR REPLACE
// needs its owner). A dump restored with its owners gives a function back
// to the role that made it, who may not be one; a table that had such a
// trigger when it was attached brings it along.
// The statement holds its lock on `relid`; its partitions are locked here.
void RefuseTriggersOthersMayReplace(Oid relid) {
  const Oid outbox_extension = get_extension_oid("outbox", true);
  const Oid writer = get_role_oid("outbox_writer", true);
  List *all = find_all_inheritors(relid, AccessShareLock, nullptr);
  ListCell *cell;
  foreach (cell, all) {
    const Oid rel_oid = lfirst_oid(cell);
    Relation rel = table_open(rel_oid, NoLock);
    const TriggerDesc *triggers = rel->trigdesc;
    for (int i = 0; triggers != nullptr && i < triggers->numtriggers; ++i) {
      const Oid function = triggers->triggers[i].tgfoid;
      HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
      if (!HeapTupleIsValid(tuple)) continue;
      const Oid function_owner = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple))->proowner;
      ReleaseSysCache(tuple);
      // Outbox's own (its counting function, in a restored partition's
      // dump), as long as outbox_writer owns it: given to another role, that
      // role may replace it.
      if (superuser_arg(function_owner) ||
          (function_owner == writer &&
           getExtensionOfObject(ProcedureRelationId, function) == outbox_extension)) {
        continue;
      }
      const char *trigname = pstrdup(triggers->triggers[i].tgname);
      table_close(rel, NoLock);
      ereport(
          ERROR,
          (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
           errmsg("outbox: trigger \"%s\" on %s.%s calls %s, which role \"%s\" may replace",
                  trigname, get_namespace_name(get_rel_namespace(rel_oid)), get_rel_name(rel_oid),
                  format_procedure_qualified(function), GetUserNameFromId(function_owner, false)),
           errdetail("outbox's own statements run the triggers on its tables as their owner."),
           errhint("Call a function a superuser owns.")));
    }
    table_close(rel, NoLock);
  }
}

// Event triggers run in outbox's own statements too (the publisher's
// partition maintenance is DDL), as outbox_writer: their functions must be
// ones only a superuser can replace. Scans pg_event_trigger (a handful of
// rows).
void RefuseEventTriggersOthersMayReplace() {
  Relation catalog = table_open(EventTriggerRelationId, AccessShareLock);
  SysScanDesc scan = systable_beginscan(catalog, InvalidOid, false, nullptr, 0, nullptr);
  HeapTuple tuple;
  while (HeapTupleIsValid(tuple = systable_getnext(scan))) {
    const Form_pg_event_trigger trigger = reinterpret_cast<Form_pg_event_trigger>(GETSTRUCT(tuple));
    HeapTuple proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(trigger->evtfoid));
    if (!HeapTupleIsValid(proc)) continue;
    const Oid owner = reinterpret_cast<Form_pg_proc>(GETSTRUCT(proc))->proowner;
    ReleaseSysCache(proc);
    if (superuser_arg(owner)) continue;
    const char *name = pstrdup(NameStr(trigger->evtname));
    const Oid function = trigger->evtfoid;
    systable_endscan(scan);
    table_close(catalog, AccessShareLock);
    ereport(ERROR,
            (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
             errmsg("outbox: event trigger \"%s\" calls %s, which role \"%s\" may replace", name,
                    format_procedure_qualified(function), GetUserNameFromId(owner, false)),
             errdetail("Event triggers fire in outbox's partition maintenance, which runs as "
                       "outbox_writer."),
             errhint("Call a function a superuser owns.")));
  }
  systable_endscan(scan);
  table_close(catalog, AccessShareLock);
}

// Whether an index may carry code: an expression, a predicate, an
// operator class named (a default one is built in: only a superuser makes
// one default).
bool MayCarryCode(const IndexStmt *index) {
  bool code = index->whereClause != nullptr;
  List *params[2] = {index->indexParams, index->indexIncludingParams};
  for (List *list : params) {
    ListCell *cell;
    foreach (cell, list) {
      const IndexElem *elem = lfirst_node(IndexElem, cell);
      code = code || elem->expr != nullptr || elem->opclass != NIL;
    }
  }
  return code;
}

// Why the index `stmt` makes on `relid` (locked) breaks the rule for stored
// expressions, judged as the parser makes it (nullptr: it does not).
const char *IndexWhyNot(Oid relid, IndexStmt *stmt, const char *query_string) {
  IndexStmt *parsed =
      transformIndexStmt(relid, static_cast<IndexStmt *>(copyObjectImpl(stmt)), query_string);
  const char *why =
      parsed->whereClause != nullptr ? ExpressionWhyNot(parsed->whereClause) : nullptr;
  const Oid am = get_index_am_oid(parsed->accessMethod, false);
  ListCell *cell;
  foreach (cell, parsed->indexParams) {
    const IndexElem *elem = lfirst_node(IndexElem, cell);
    if (why == nullptr && elem->expr != nullptr) why = ExpressionWhyNot(elem->expr);
    if (why == nullptr && elem->opclass != NIL) {
      const Oid opclass = get_opclass_oid(am, elem->opclass, true);
      if (OidIsValid(opclass) && !OpclassBuiltIn(opclass)) {
        why = psprintf("its operator class %s is not built in", NameListToString(elem->opclass));
      }
    }
  }
  return why;
}

// Refuses (42501) a table that is not outbox's with one of outbox's tables
// below it (ALTER TABLE ... ATTACH PARTITION outbox.events, say): what is put
// on it (a trigger) is cloned onto them, unchecked. Only a superuser may
// attach them; outbox's tables sit under nothing but outbox.events.
void RefuseOutboxTablesBelow(Oid relid, Oid schema, Oid events) {
  if (InPublisher() || !has_subclass(relid)) return;
  List *below = find_all_inheritors(relid, NoLock, nullptr);
  ListCell *cell;
  foreach (cell, below) {
    const Oid child = lfirst_oid(cell);
    if (child == relid || !Guarded(child, schema, events)) continue;
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("outbox: %s.%s has outbox's table %s.%s below it",
                           get_namespace_name(get_rel_namespace(relid)), get_rel_name(relid),
                           get_namespace_name(get_rel_namespace(child)), get_rel_name(child)),
                    errdetail("What is put on it would be cloned onto outbox's tables unchecked."),
                    errhint("Detach it: outbox's tables sit under nothing but outbox.events.")));
  }
}

// The relation `target` names, or may come to name before PostgreSQL locks
// it (OutboxRelationNamed), when it is one of outbox's tables (Guarded);
// InvalidOid otherwise, or without the extension. Takes no lock.
Oid GuardedTarget(RangeVar *target) {
  const Oid schema = get_namespace_oid("outbox", true);
  if (!OidIsValid(schema)) return InvalidOid;
  const Oid events = get_relname_relid("events", schema);
  if (!OidIsValid(events)) return InvalidOid;
  Oid relid = OutboxRelationNamed(target, schema);
  if (!OidIsValid(relid)) relid = RangeVarGetRelid(target, NoLock, true);
  return OidIsValid(relid) && Guarded(relid, schema, events) ? relid : InvalidOid;
}

// Refuses (42501) a table made a child of `parent` by inheritance when
// `parent` is one of outbox's tables.
void RefuseChildOf(RangeVar *parent) {
  const Oid relid = GuardedTarget(parent);
  if (!OidIsValid(relid)) return;
  ereport(ERROR,
          (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
           errmsg("outbox: a table inheriting from %s is refused", get_rel_name(relid)),
           errdetail("outbox's statements on its tables would reach the child's rows and fire "
                     "its triggers as their owner."),
           errhint("outbox's tables have no children but outbox.events' partitions.")));
}

}  // namespace

void RefuseLockingDdlOfNonOwners(Node *stmt) {
  const Oid schema = get_namespace_oid("outbox", true);
  if (!OidIsValid(schema)) return;
  ListCell *cell;
  switch (nodeTag(stmt)) {
    case T_CreateTrigStmt:
      RequireOwnerOf(castNode(CreateTrigStmt, stmt)->relation, schema);
      break;
    case T_RuleStmt:
      RequireOwnerOf(castNode(RuleStmt, stmt)->relation, schema);
      break;
    case T_AlterObjectDependsStmt: {
      // ALTER INDEX / MATERIALIZED VIEW / TRIGGER ... DEPENDS ON EXTENSION
      // finds its object (an ACCESS EXCLUSIVE lock on the relation, whatever
      // kind the relation turns out to be) before it checks ownership.
      AlterObjectDependsStmt *depends = castNode(AlterObjectDependsStmt, stmt);
      if (depends->relation != nullptr) RequireOwnerOf(depends->relation, schema);
      break;
    }
    case T_CreateStmt:
    case T_CreateForeignTableStmt: {
      // A foreign table's statement begins with a CreateStmt, and goes
      // through the same locking of its parents (PARTITION OF, INHERITS).
      CreateStmt *create = IsA(stmt, CreateStmt) ? castNode(CreateStmt, stmt)
                                                 : &castNode(CreateForeignTableStmt, stmt)->base;
      foreach (cell, create->inhRelations) RequireOwnerOf(lfirst_node(RangeVar, cell), schema);
      foreach (cell, create->tableElts) CheckConstraintNode(lfirst_node(Node, cell), schema);
      foreach (cell, create->constraints) CheckConstraintNode(lfirst_node(Node, cell), schema);
      break;
    }
    case T_AlterTableStmt:
      // On a table of the caller's own, subcommands that name one of
      // outbox's: a foreign key referencing it, ATTACH or DETACH PARTITION
      // of it, INHERIT from it. PostgreSQL locks that relation before it
      // checks the caller's rights on it; the lock would queue every emit()
      // and claim behind it.
      foreach (cell, castNode(AlterTableStmt, stmt)->cmds) {
        Node *def = lfirst_node(AlterTableCmd, cell)->def;
        if (def == nullptr) continue;
        if (IsA(def, PartitionCmd)) {
          RequireOwnerOf(castNode(PartitionCmd, def)->name, schema);
        } else if (IsA(def, RangeVar)) {
          RequireOwnerOf(castNode(RangeVar, def), schema);
        } else {
          CheckConstraintNode(def, schema);
        }
      }
      break;
    default:
      break;
  }
}

void RefuseIndexCodeBeforeBuild(Node *stmt, const char *query_string) {
  if (!IsA(stmt, IndexStmt)) return;
  IndexStmt *index = castNode(IndexStmt, stmt);
  if (index->concurrent || index->transformed || index->relation == nullptr) return;
  if (!MayCarryCode(index) || !OidIsValid(GuardedTarget(index->relation))) return;
  // The lock, and the owner check before it, that PostgreSQL takes next
  // (it looks the name up again once it holds the lock: so does this).
  const Oid locked = RangeVarGetRelidExtended(index->relation, ShareLock, 0,
                                              RangeVarCallbackOwnsRelation, nullptr);
  const Oid schema = get_namespace_oid("outbox", true);
  if (!Guarded(locked, schema, get_relname_relid("events", schema))) return;
  const Oid relid = locked;
  const char *why = IndexWhyNot(relid, index, query_string);
  if (why == nullptr) return;
  ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                  errmsg("outbox: an index on %s that is not built-in code is refused: %s",
                         get_rel_name(relid), why),
                  errdetail("Its build would run that code as the owner of outbox's tables."),
                  errhint("Index outbox's tables with built-in code only.")));
}

void RefuseAlterTableOfOutboxTables(Node *stmt) {
  ListCell *cell;
  if (IsA(stmt, CreateStmt) && castNode(CreateStmt, stmt)->partbound == nullptr) {
    // CREATE TABLE ... INHERITS (one of outbox's): its statements without
    // ONLY (outbox.recount(), publish_here()) would reach the child's rows
    // and fire its triggers. PARTITION OF outbox.events is maintenance's.
    foreach (cell, castNode(CreateStmt, stmt)->inhRelations) {
      RefuseChildOf(lfirst_node(RangeVar, cell));
    }
  }
  if (!IsA(stmt, AlterTableStmt)) return;
  AlterTableStmt *alter = castNode(AlterTableStmt, stmt);
  const char *what = nullptr;
  foreach (cell, alter->cmds) {
    const AlterTableCmd *cmd = lfirst_node(AlterTableCmd, cell);
    if (cmd->subtype == AT_AddInherit) {
      what = "INHERIT";
      if (cmd->def != nullptr && IsA(cmd->def, RangeVar))
        RefuseChildOf(castNode(RangeVar, cmd->def));
    }
    if (cmd->subtype == AT_AddConstraint && cmd->def != nullptr && IsA(cmd->def, Constraint) &&
        castNode(Constraint, cmd->def)->contype == CONSTR_EXCLUSION) {
      what = "an EXCLUDE constraint";
    }
  }
  if (what == nullptr || alter->relation == nullptr) return;
  const Oid relid = GuardedTarget(alter->relation);
  if (!OidIsValid(relid)) return;
  ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                  errmsg("outbox: %s on %s is refused", what, get_rel_name(relid)),
                  errdetail(strcmp(what, "INHERIT") == 0
                                ? "A parent's privileges would reach outbox's rows."
                                : "Its index build runs its code as the owner of outbox's tables."),
                  errhint("outbox's tables inherit from nothing and take no EXCLUDE constraint.")));
}

void RefuseConcurrentIndexWithCode(Node *stmt) {
  if (!IsA(stmt, IndexStmt)) return;
  IndexStmt *index = castNode(IndexStmt, stmt);
  if (!index->concurrent || index->relation == nullptr) return;
  if (!MayCarryCode(index)) return;
  const Oid relid = GuardedTarget(index->relation);
  if (!OidIsValid(relid)) return;
  ereport(ERROR,
          (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
           errmsg("outbox: CREATE INDEX CONCURRENTLY with an expression, a predicate or an "
                  "operator class on %s is refused",
                  get_rel_name(relid)),
           errdetail("What such an index runs is checked once it is built, and CONCURRENTLY "
                     "commits it before that: emit() and the publisher would run it already."),
           errhint("Create it without CONCURRENTLY, or on plain columns.")));
}

void RefuseStatisticsOnExpressions(Node *stmt) {
  if (!IsA(stmt, CreateStatsStmt)) return;
  CreateStatsStmt *stats = castNode(CreateStatsStmt, stmt);
  bool expressions = false;
  ListCell *cell;
  foreach (cell, stats->exprs) {
    Node *elem = lfirst_node(Node, cell);
    expressions =
        expressions || (IsA(elem, StatsElem) && castNode(StatsElem, elem)->expr != nullptr);
  }
  if (!expressions) return;
  foreach (cell, stats->relations) {
    Node *node = lfirst_node(Node, cell);
    if (!IsA(node, RangeVar)) continue;
    const Oid relid = GuardedTarget(castNode(RangeVar, node));
    if (!OidIsValid(relid)) continue;
    ereport(ERROR,
            (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
             errmsg("outbox: statistics on expressions of %s are refused", get_rel_name(relid)),
             errdetail("ANALYZE computes them as the owner of outbox.events."),
             errhint("Build statistics on its columns.")));
  }
}

void RefuseTriggerFunctionsGivenAway(Node *stmt) {
  bool owners_changed = IsA(stmt, ReassignOwnedStmt) || IsA(stmt, CreateEventTrigStmt);
  if (IsA(stmt, AlterRoleStmt)) {
    // Only NOSUPERUSER matters: a password change is not refused over a
    // trigger made before this check.
    ListCell *cell;
    foreach (cell, castNode(AlterRoleStmt, stmt)->options) {
      owners_changed =
          owners_changed || strcmp(lfirst_node(DefElem, cell)->defname, "superuser") == 0;
    }
  }
  if (IsA(stmt, AlterOwnerStmt)) {
    const ObjectType type = castNode(AlterOwnerStmt, stmt)->objectType;
    owners_changed = type == OBJECT_FUNCTION || type == OBJECT_PROCEDURE || type == OBJECT_ROUTINE;
  }
  if (!owners_changed || InPublisher()) return;
  const Oid schema = get_namespace_oid("outbox", true);
  if (!OidIsValid(schema)) return;
  const Oid events = get_relname_relid("events", schema);
  if (!OidIsValid(events)) return;
  RefuseTriggersOthersMayReplace(events);
  for (const char *table : kOtherTables) {
    const Oid relid = get_relname_relid(table, schema);
    if (OidIsValid(relid)) RefuseTriggersOthersMayReplace(relid);
  }
  RefuseEventTriggersOthersMayReplace();
}

void RefuseDdlEmitWouldRefuse(Node *stmt) {
  RangeVar *target = TargetOf(stmt);
  if (target == nullptr) return;
  const Oid schema = get_namespace_oid("outbox", true);
  if (!OidIsValid(schema)) return;
  const Oid events = get_relname_relid("events", schema);
  if (!OidIsValid(events)) return;
  // CREATE INDEX CONCURRENTLY committed its index already: refusing it now
  // would leave it behind, and one that may carry code was refused before
  // it ran (RefuseConcurrentIndexWithCode).
  if (IsA(stmt, IndexStmt) && castNode(IndexStmt, stmt)->concurrent) return;
  const Oid relid = RangeVarGetRelid(target, NoLock, true);
  if (!OidIsValid(relid)) return;
  if (!Guarded(relid, schema, events)) {
    RefuseOutboxTablesBelow(relid, schema, events);
    return;
  }
  const bool events_tree = UnderEvents(relid, events);
  // outbox's own scripts shape its other tables (a foreign key, in 0.1.0).
  if (!events_tree && creating_extension) return;
  // Every trigger of the tree, not only a new one: ATTACH PARTITION brings
  // the table's own. Outbox's maintenance (CREATE TABLE ... PARTITION OF
  // clones the parent's) is not stopped by one made before this check.
  if (!InPublisher()) RefuseTriggersOthersMayReplace(relid);
  // In a subtransaction: the rule raises its refusal as an ERROR. A user's
  // statement (a superuser's, a restore's) is refused with it: what emit()
  // will not run, the publisher would run as the owner of outbox.events when
  // it updates the events (index expressions, CHECKs, partition keys), and
  // a relation that already had it is named too (emit() refuses to write
  // there anyway; DROP statements are not checked, so it can be taken
  // away). Outbox's own statements (maintenance's CREATE TABLE ... PARTITION
  // OF, which clones what the parent has) only say so as a WARNING, and go
  // on: refusing them would stop retention and premade days as well.
  Oid checked = relid;
  ErrorData *error = RunInSubtransaction(events_tree ? CheckAll : CheckIndexesOf, &checked);
  if (error == nullptr) return;
  if (error->sqlerrcode != ERRCODE_INSUFFICIENT_PRIVILEGE) ReThrowError(error);
  const char *what = RefusedCodeOf(error->message);
  if (!InPublisher()) {
    // "emit() does not write while X has Y": the statement may not leave Y.
    if (what != nullptr) {
      error->message = events_tree ? psprintf("outbox: emit() would refuse to write while %s", what)
                                   : psprintf(
                                         "outbox: refused: %s, and outbox writes that table as "
                                         "outbox_writer, which would run it",
                                         what);
    }
    ReThrowError(error);
  }
  // "emit() does not write while X has Y" becomes what it will do.
  if (what != nullptr) {
    error->message = psprintf("outbox: emit() will refuse to write while %s", what);
  }
  error->elevel = WARNING;
  ThrowErrorData(error);
}

}  // namespace outbox
