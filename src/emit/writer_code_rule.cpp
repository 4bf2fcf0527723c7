// The rule for code that runs when emit() writes: see writer_code_rule.hpp.
//
// Invariants: no C++ object with a destructor (every function here may
// ereport); runs inside a transaction, with the relation it reads locked by
// the caller; allocates only in the current memory context.
#include "emit/writer_code_rule.hpp"

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/transam.h"
#include "catalog/namespace.h"
#include "commands/defrem.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_language_d.h"
#include "catalog/pg_opclass.h"
#include "catalog/pg_partitioned_table.h"
#include "catalog/pg_policy.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_rewrite.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "nodes/nodeFuncs.h"
#include "rewrite/prs2lock.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
}

namespace outbox {
namespace {

bool BuiltIn(Oid oid) { return oid < FirstNormalObjectId; }

// What the walk over one expression found (why == nullptr: nothing yet).
struct Walk {
  bool is_default;  // a column default: the clocks and gen_random_uuid() too
  const char *why;
};

// The functions a column default may call besides immutable ones: they read
// a clock or the random source, and nothing else.
bool DefaultClockOrRandom(Oid function) {
  switch (function) {
    case F_NOW:
    case F_TRANSACTION_TIMESTAMP:
    case F_STATEMENT_TIMESTAMP:
    case F_CLOCK_TIMESTAMP:
    case F_GEN_RANDOM_UUID:
      return true;
    default:
      return false;
  }
}

// check_functions_in_node's callback: true (stop) for a function the rule
// refuses, with the reason in the Walk.
bool FunctionRefused(Oid function, void *context) {
  Walk *walk = static_cast<Walk *>(context);
  if (!BuiltIn(function)) {
    walk->why = psprintf("it calls %s, which is not built in", format_procedure(function));
    return true;
  }
  HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
  if (!HeapTupleIsValid(tuple)) {
    walk->why = psprintf("it calls function %u, which does not exist", function);
    return true;
  }
  const Form_pg_proc proc = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple));
  const bool immutable = proc->provolatile == PROVOLATILE_IMMUTABLE;
  bool sql_text = false;
  if (proc->prolang == SQLlanguageId) {
    bool isnull = true;
    (void)SysCacheGetAttr(PROCOID, tuple, Anum_pg_proc_prosqlbody, &isnull);
    sql_text = isnull;  // a body parsed, with names looked up, when it runs
  }
  ReleaseSysCache(tuple);
  if (sql_text) {
    walk->why = psprintf("it calls %s, whose SQL body is looked up when it runs",
                         format_procedure(function));
    return true;
  }
  if (!immutable && !(walk->is_default && DefaultClockOrRandom(function))) {
    walk->why = psprintf("it calls %s, which is not immutable", format_procedure(function));
    return true;
  }
  return false;
}

// expression_tree_walker's callback: true (stop) when `node` is not one of
// the expression nodes below, has a type that is not built in, or calls a
// function FunctionRefused. The nodes listed run no code but the functions
// check_functions_in_node names (no domain coercion, no row comparison, no
// sublink, no sequence, nothing a later major adds).
bool CodeNotBuiltIn(Node *node, void *context) {
  if (node == nullptr) return false;
  Walk *walk = static_cast<Walk *>(context);
  bool typed = true;
  switch (nodeTag(node)) {
    case T_List:
    case T_CaseWhen:
      typed = false;
      break;
    case T_Var:
    case T_Const:
    case T_BoolExpr:
    case T_NullTest:
    case T_BooleanTest:
    case T_CaseExpr:
    case T_CaseTestExpr:
    case T_CoalesceExpr:
    case T_MinMaxExpr:
    case T_RelabelType:
    case T_CollateExpr:
    case T_ArrayExpr:
    case T_SQLValueFunction:
    case T_FuncExpr:
    case T_OpExpr:
    case T_DistinctExpr:
    case T_NullIfExpr:
    case T_ScalarArrayOpExpr:
    case T_CoerceViaIO:
      break;
    default:
      walk->why = psprintf("it uses an expression of a kind outbox does not look through (node %d)",
                           static_cast<int>(nodeTag(node)));
      return true;
  }
  if (typed && !BuiltIn(exprType(node))) {
    walk->why = psprintf("it uses type %s, which is not built in", format_type_be(exprType(node)));
    return true;
  }
  if (check_functions_in_node(node, FunctionRefused, context)) return true;
  return expression_tree_walker(node, TreeWalker(CodeNotBuiltIn), context);
}

// Why the expression stored as text in `stored` breaks the rule (nullptr:
// it does not).
const char *StoredExpressionWhyNot(const char *stored, bool is_default) {
  Walk walk = {is_default, nullptr};
  (void)CodeNotBuiltIn(static_cast<Node *>(stringToNode(stored)), &walk);
  return walk.why;
}

constexpr const char kRefusal[] = "outbox: emit() does not write while ";

[[noreturn]] void Refuse(Relation rel, const char *what, const char *why) {
  ereport(
      ERROR,
      (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
       errmsg("%soutbox.%s has %s", kRefusal, RelationGetRelationName(rel), what),
       errdetail("%s. Only built-in code and outbox's own run when emit() writes an event.", why),
       errhint("Remove it. docs/security.md says what may be on outbox.events, and how to "
               "keep an audit trail without code on it.")));
  pg_unreachable();
}

// Whether `function` is outbox's counting trigger function,
// outbox.count_changes() (in C since 0.2.0, PL/pgSQL before).
bool IsOutboxCounter(Oid function) {
  HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
  if (!HeapTupleIsValid(tuple)) return false;
  const Form_pg_proc proc = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple));
  const bool ours = proc->pronamespace == get_namespace_oid("outbox", true) &&
                    strcmp(NameStr(proc->proname), "count_changes") == 0;
  ReleaseSysCache(tuple);
  return ours;
}

void CheckTriggers(Relation rel) {
  const TriggerDesc *triggers = rel->trigdesc;
  for (int i = 0; triggers != nullptr && i < triggers->numtriggers; ++i) {
    const Trigger &trigger = triggers->triggers[i];
    // Triggers on UPDATE, DELETE or TRUNCATE only never run when emit()
    // writes (they run in statements of the publisher or of whoever
    // changes events, as that statement's user). Their WHEN condition is
    // held to the rule all the same: the publisher evaluates it as the
    // owner of outbox.events whenever it updates an event, and it may call
    // code of anyone's, where the trigger's function is checked by who may
    // replace it (events_ddl_check.hpp).
    if (!TRIGGER_FOR_INSERT(trigger.tgtype)) {
      if (trigger.tgqual == nullptr) continue;
      if (const char *why = StoredExpressionWhyNot(trigger.tgqual, false)) {
        Refuse(rel, psprintf("trigger \"%s\" with a WHEN condition", trigger.tgname), why);
      }
      continue;
    }
    // A partition's statement triggers never fire for a row routed through
    // outbox.events, as emit()'s is; outbox's counting ones are there for
    // rows maintenance moves into the partition.
    if (rel->rd_rel->relispartition && !TRIGGER_FOR_ROW(trigger.tgtype) &&
        trigger.tgqual == nullptr && IsOutboxCounter(trigger.tgfoid)) {
      continue;
    }
    // Disabled or not (enabling one changes the relcache entry, and
    // session_replication_role picks which run), internal or not (a foreign
    // key's check runs a query).
    const char *what =
        OidIsValid(trigger.tgconstraint)
            ? psprintf("constraint \"%s\"", get_constraint_name(trigger.tgconstraint))
            : psprintf("trigger \"%s\"", trigger.tgname);
    Refuse(rel, what, "INSERT triggers other than outbox's counting ones run code of the user's");
  }
}

// The name of rule `rule` (pg_rewrite has no syscache by OID).
const char *RuleName(Oid rule) {
  Relation rewrites = table_open(RewriteRelationId, AccessShareLock);
  ScanKeyData key;
  ScanKeyInit(&key, Anum_pg_rewrite_oid, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(rule));
  SysScanDesc scan = systable_beginscan(rewrites, RewriteOidIndexId, true, nullptr, 1, &key);
  HeapTuple tuple = systable_getnext(scan);
  const char *name =
      HeapTupleIsValid(tuple)
          ? pstrdup(NameStr(reinterpret_cast<Form_pg_rewrite>(GETSTRUCT(tuple))->rulename))
          : "?";
  systable_endscan(scan);
  table_close(rewrites, AccessShareLock);
  return name;
}

// The name of a policy on `rel` (nullptr: none), whether row security is on
// or not: CREATE POLICY and ALTER TABLE ... ENABLE ROW LEVEL SECURITY both
// change the relcache entry.
const char *AnyPolicy(Relation rel) {
  Relation policies = table_open(PolicyRelationId, AccessShareLock);
  ScanKeyData key;
  ScanKeyInit(&key, Anum_pg_policy_polrelid, BTEqualStrategyNumber, F_OIDEQ,
              ObjectIdGetDatum(RelationGetRelid(rel)));
  SysScanDesc scan =
      systable_beginscan(policies, PolicyPolrelidPolnameIndexId, true, nullptr, 1, &key);
  HeapTuple tuple = systable_getnext(scan);
  const char *name =
      HeapTupleIsValid(tuple)
          ? pstrdup(NameStr(reinterpret_cast<Form_pg_policy>(GETSTRUCT(tuple))->polname))
          : nullptr;
  systable_endscan(scan);
  table_close(policies, AccessShareLock);
  return name;
}

void CheckRulesAndPolicies(Relation rel) {
  if (rel->rd_rules != nullptr && rel->rd_rules->numLocks > 0) {
    Refuse(rel, psprintf("rule \"%s\"", RuleName(rel->rd_rules->rules[0]->ruleId)),
           "A rule rewrites the INSERT into statements of the user's");
  }
  const char *policy = AnyPolicy(rel);
  if (policy != nullptr) {
    Refuse(rel, psprintf("policy \"%s\"", policy),
           "A row security policy runs expressions of the user's");
  }
  if (rel->rd_rel->relrowsecurity) {
    Refuse(rel, "row level security", "Row security runs policies of the user's");
  }
}

void CheckColumns(Relation rel) {
  const TupleDesc desc = RelationGetDescr(rel);
  for (int a = 0; a < desc->natts; ++a) {
    const Form_pg_attribute att = TupleDescAttr(desc, a);
    if (att->attisdropped || BuiltIn(att->atttypid)) continue;
    Refuse(rel, psprintf("column \"%s\"", NameStr(att->attname)),
           psprintf("Its type %s is not built in (a domain's constraints run code)",
                    format_type_be(att->atttypid)));
  }
  const TupleConstr *constr = desc->constr;
  for (int i = 0; constr != nullptr && i < constr->num_defval; ++i) {
    const Form_pg_attribute att = TupleDescAttr(desc, constr->defval[i].adnum - 1);
    const bool generated = att->attgenerated != '\0';
    const char *why = StoredExpressionWhyNot(constr->defval[i].adbin, !generated);
    if (why != nullptr) {
      Refuse(rel,
             psprintf("the %s of column \"%s\"", generated ? "generation expression" : "default",
                      NameStr(att->attname)),
             psprintf("It is not built-in code: %s", why));
    }
  }
  for (int i = 0; constr != nullptr && i < constr->num_check; ++i) {
    const char *why = StoredExpressionWhyNot(constr->check[i].ccbin, false);
    if (why != nullptr) {
      Refuse(rel, psprintf("CHECK constraint \"%s\"", constr->check[i].ccname),
             psprintf("It is not built-in code: %s", why));
    }
  }
}

// The name of operator class `opclass`, for a message.
const char *OpclassName(Oid opclass) {
  HeapTuple tuple = SearchSysCache1(CLAOID, ObjectIdGetDatum(opclass));
  if (!HeapTupleIsValid(tuple)) return psprintf("%u", opclass);
  const char *name =
      psprintf("\"%s\"", NameStr(reinterpret_cast<Form_pg_opclass>(GETSTRUCT(tuple))->opcname));
  ReleaseSysCache(tuple);
  return name;
}

// Every OID of an oidvector column of a syscache row is built in (nullptr)
// or the first that is not.
Oid FirstNotBuiltIn(int cacheid, HeapTuple tuple, AttrNumber column) {
  bool isnull = true;
  const Datum datum = SysCacheGetAttr(cacheid, tuple, column, &isnull);
  if (isnull) return InvalidOid;
  const oidvector *oids = reinterpret_cast<const oidvector *>(DatumGetPointer(datum));
  for (int i = 0; i < oids->dim1; ++i) {
    if (OidIsValid(oids->values[i]) && !BuiltIn(oids->values[i])) return oids->values[i];
  }
  return InvalidOid;
}

const char *StoredColumnWhyNot(int cacheid, HeapTuple tuple, AttrNumber column) {
  bool isnull = true;
  const Datum stored = SysCacheGetAttr(cacheid, tuple, column, &isnull);
  return isnull ? nullptr : StoredExpressionWhyNot(TextDatumGetCString(stored), false);
}

void CheckIndexes(Relation rel, void (*watch)(Oid)) {
  List *indexes = RelationGetIndexList(rel);
  ListCell *cell;
  foreach (cell, indexes) {
    const Oid index = lfirst_oid(cell);
    watch(index);
    const char *what = psprintf("index \"%s\"", get_rel_name(index));
    HeapTuple class_tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(index));
    if (!HeapTupleIsValid(class_tuple)) continue;  // dropped meanwhile
    const Oid am = reinterpret_cast<Form_pg_class>(GETSTRUCT(class_tuple))->relam;
    ReleaseSysCache(class_tuple);
    if (!BuiltIn(am)) {
      Refuse(rel, what, psprintf("Its access method %s is not built in", get_am_name(am)));
    }
    HeapTuple tuple = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(index));
    if (!HeapTupleIsValid(tuple)) continue;
    const Oid opclass = FirstNotBuiltIn(INDEXRELID, tuple, Anum_pg_index_indclass);
    const char *why = StoredColumnWhyNot(INDEXRELID, tuple, Anum_pg_index_indexprs);
    if (why == nullptr) why = StoredColumnWhyNot(INDEXRELID, tuple, Anum_pg_index_indpred);
    ReleaseSysCache(tuple);
    if (OidIsValid(opclass)) {
      Refuse(rel, what, psprintf("Its operator class %s is not built in", OpclassName(opclass)));
    }
    if (why != nullptr) Refuse(rel, what, psprintf("It is not built-in code: %s", why));
  }
}

void CheckPartitionKey(Relation rel) {
  if (rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE) return;
  HeapTuple tuple = SearchSysCache1(PARTRELID, ObjectIdGetDatum(RelationGetRelid(rel)));
  if (!HeapTupleIsValid(tuple)) return;
  const Oid opclass = FirstNotBuiltIn(PARTRELID, tuple, Anum_pg_partitioned_table_partclass);
  const char *why = StoredColumnWhyNot(PARTRELID, tuple, Anum_pg_partitioned_table_partexprs);
  ReleaseSysCache(tuple);
  if (OidIsValid(opclass)) {
    Refuse(rel, "the partition key",
           psprintf("Its operator class %s is not built in", OpclassName(opclass)));
  }
  if (why != nullptr)
    Refuse(rel, "the partition key", psprintf("It is not built-in code: %s", why));
}

}  // namespace

const char *RefusedCodeOf(const char *message) {
  if (message == nullptr || strncmp(message, kRefusal, strlen(kRefusal)) != 0) return nullptr;
  return message + strlen(kRefusal);
}

void RefuseCodeNotBuiltIn(Relation rel, void (*watch)(Oid)) {
  const char kind = rel->rd_rel->relkind;
  if (kind != RELKIND_RELATION && kind != RELKIND_PARTITIONED_TABLE) {
    Refuse(rel, "no table storage",
           "It is a foreign table: a foreign data wrapper stores its rows");
  }
  if (kind == RELKIND_RELATION && !BuiltIn(rel->rd_rel->relam)) {
    Refuse(rel, psprintf("access method \"%s\"", get_am_name(rel->rd_rel->relam)),
           "Its table access method is not built in");
  }
  CheckTriggers(rel);
  CheckRulesAndPolicies(rel);
  CheckColumns(rel);
  CheckPartitionKey(rel);
  CheckIndexes(rel, watch);
}

const char *ExpressionWhyNot(Node *expression) {
  Walk walk = {false, nullptr};
  (void)CodeNotBuiltIn(expression, &walk);
  return walk.why;
}

bool OpclassBuiltIn(Oid opclass) { return BuiltIn(opclass); }

void RefuseIndexCodeNotBuiltIn(Relation rel) {
  CheckRulesAndPolicies(rel);
  CheckColumns(rel);
  CheckIndexes(rel, [](Oid) {});
  const TriggerDesc *triggers = rel->trigdesc;
  for (int i = 0; triggers != nullptr && i < triggers->numtriggers; ++i) {
    const Trigger &trigger = triggers->triggers[i];
    if (trigger.tgqual == nullptr) continue;
    if (const char *why = StoredExpressionWhyNot(trigger.tgqual, false)) {
      Refuse(rel, psprintf("trigger \"%s\" with a WHEN condition", trigger.tgname), why);
    }
  }
}

}  // namespace outbox
