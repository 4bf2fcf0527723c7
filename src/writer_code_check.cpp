// What emit() refuses to run as its owner: see writer_code_check.hpp.
//
// Invariants: no C++ object with a destructor (every function here may
// ereport); runs inside a transaction, with the relations it reads locked by
// the caller; allocates only in the current memory context.
#include "writer_code_check.hpp"

extern "C" {
#include "access/genam.h"
#include "access/transam.h"
#include "catalog/pg_language_d.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "rewrite/prs2lock.h"
#include "rewrite/rowsecurity.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
}

#include <cstring>

namespace outbox {
namespace {

// What the walk found: the object it refuses and why (why == nullptr:
// nothing yet).
struct Finding {
  Oid writer;
  void (*watch_function)(uint32);
  Oid object;
  bool is_domain;
  const char *why;
};

// Whether the function's pg_proc row sets search_path (proconfig holds
// "search_path=..."): then PostgreSQL never inlines it and runs (and
// compiles) its body under that path.
bool SetsSearchPath(HeapTuple proc) {
  bool isnull = true;
  const Datum config = SysCacheGetAttr(PROCOID, proc, Anum_pg_proc_proconfig, &isnull);
  if (isnull) return false;
  Datum *items = nullptr;
  bool *nulls = nullptr;
  int count = 0;
  deconstruct_array(DatumGetArrayTypeP(config), TEXTOID, -1, false, TYPALIGN_INT, &items, &nulls,
                    &count);
  for (int i = 0; i < count; ++i) {
    if (nulls[i]) continue;
    const char *setting = TextDatumGetCString(items[i]);
    if (strncmp(setting, "search_path=", strlen("search_path=")) == 0) return true;
  }
  return false;
}

// Why `function` must not run as `writer` (nullptr: it may).
const char *WhyNot(Oid function, Oid writer) {
  if (function < FirstNormalObjectId) return nullptr;
  HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
  if (!HeapTupleIsValid(tuple)) return nullptr;  // dropped meanwhile: nothing to run
  const Form_pg_proc proc = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple));
  const char *why = nullptr;
  if (proc->proowner != writer && !superuser_arg(proc->proowner)) {
    why = "neither emit()'s owner nor a superuser owns it";
  } else if (proc->prolang != ClanguageId && proc->prolang != INTERNALlanguageId &&
             !SetsSearchPath(tuple)) {
    why = "it is not declared with SET search_path";
  }
  ReleaseSysCache(tuple);
  return why;
}

// check_functions_in_node's callback: true (stop) for a function that
// must not run as the writer.
bool Refused(Oid function, void *context) {
  Finding *finding = static_cast<Finding *>(context);
  const char *why = WhyNot(function, finding->writer);
  if (why == nullptr) {
    if (function >= FirstNormalObjectId) {
      finding->watch_function(GetSysCacheHashValue1(PROCOID, ObjectIdGetDatum(function)));
    }
    return false;
  }
  finding->object = function;
  finding->is_domain = false;
  finding->why = why;
  return true;
}

// expression_tree_walker's callback over an index expression or predicate
// or a CHECK constraint: true when it calls a function Refused, or coerces
// to a domain that is not built in.
bool CallsRefusedCode(Node *node, void *context) {
  if (node == nullptr) return false;
  if (IsA(node, CoerceToDomain)) {
    const Oid domain = castNode(CoerceToDomain, node)->resulttype;
    if (domain >= FirstNormalObjectId) {
      Finding *finding = static_cast<Finding *>(context);
      finding->object = domain;
      finding->is_domain = true;
      finding->why = "only built-in domains are";
      return true;
    }
  }
  // PostgreSQL 15 declares the walkers as `bool (*)()`; see event_insert.cpp.
  using Walker = bool (*)();
  const Walker walker = reinterpret_cast<Walker>(reinterpret_cast<void (*)()>(CallsRefusedCode));
  // A subquery (a rule's action, a policy's SubLink): every expression in it.
  if (IsA(node, Query)) return query_tree_walker(castNode(Query, node), walker, context, 0);
  if (check_functions_in_node(node, Refused, context)) return true;
  return expression_tree_walker(node, walker, context);
}

void Refuse(const Finding &finding, const char *what, const char *where) {
  ereport(ERROR,
          (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
           errmsg("outbox: emit() does not run %s %s as its owner",
                  finding.is_domain ? "domain" : "function",
                  finding.is_domain ? format_type_be(finding.object)
                                    : format_procedure(finding.object)),
           errdetail("%s %s uses it, and %s.", what, where, finding.why),
           errhint("Functions that indexes, CHECK constraints and INSERT triggers on "
                   "outbox.events call must belong to emit()'s owner or a superuser and be "
                   "declared with SET search_path = pg_catalog, pg_temp (docs/security.md).")));
}

// Everything of `rel` that an INSERT into it runs as the writer: its INSERT
// triggers (row or statement, their WHEN conditions; not PostgreSQL's
// internal ones, which call built-in functions), column defaults and
// generated columns, CHECK constraints, rules, and row security policies when
// they apply to the table's owner too (FORCE ROW LEVEL SECURITY).
void CheckRelation(Relation rel, Finding *finding) {
  const TriggerDesc *triggers = rel->trigdesc;
  for (int i = 0; triggers != nullptr && i < triggers->numtriggers; ++i) {
    const Trigger &trigger = triggers->triggers[i];
    if (!TRIGGER_FOR_INSERT(trigger.tgtype) || trigger.tgisinternal) continue;
    if (Refused(trigger.tgfoid, finding) ||
        (trigger.tgqual != nullptr &&
         CallsRefusedCode(static_cast<Node *>(stringToNode(trigger.tgqual)), finding))) {
      Refuse(*finding, "trigger", quote_identifier(trigger.tgname));
    }
  }
  const TupleDesc desc = RelationGetDescr(rel);
  const TupleConstr *constr = desc->constr;
  for (int i = 0; constr != nullptr && i < constr->num_defval; ++i) {
    if (CallsRefusedCode(static_cast<Node *>(stringToNode(constr->defval[i].adbin)), finding)) {
      const Form_pg_attribute att = TupleDescAttr(desc, constr->defval[i].adnum - 1);
      Refuse(*finding, "the default or generation expression of column",
             quote_identifier(NameStr(att->attname)));
    }
  }
  for (int i = 0; constr != nullptr && i < constr->num_check; ++i) {
    if (CallsRefusedCode(static_cast<Node *>(stringToNode(constr->check[i].ccbin)), finding)) {
      Refuse(*finding, "CHECK constraint", quote_identifier(constr->check[i].ccname));
    }
  }
  const RuleLock *rules = rel->rd_rules;
  for (int i = 0; rules != nullptr && i < rules->numLocks; ++i) {
    const RewriteRule *rule = rules->rules[i];
    if (CallsRefusedCode(rule->qual, finding) ||
        CallsRefusedCode(reinterpret_cast<Node *>(rule->actions), finding)) {
      Refuse(*finding, "a rule of", quote_identifier(RelationGetRelationName(rel)));
    }
  }
  if (rel->rd_rel->relrowsecurity && rel->rd_rel->relforcerowsecurity &&
      rel->rd_rsdesc != nullptr) {
    ListCell *cell;
    foreach (cell, rel->rd_rsdesc->policies) {
      const RowSecurityPolicy *policy = static_cast<RowSecurityPolicy *>(lfirst(cell));
      if (CallsRefusedCode(reinterpret_cast<Node *>(policy->qual), finding) ||
          CallsRefusedCode(reinterpret_cast<Node *>(policy->with_check_qual), finding)) {
        Refuse(*finding, "policy", quote_identifier(policy->policy_name));
      }
    }
  }
}

}  // namespace

void RefuseCodeTheCallerCouldBind(Relation parent, Relation part, Oid writer,
                                  void (*watch_index)(Oid), void (*watch_function)(uint32)) {
  Finding finding = {writer, watch_function, InvalidOid, false, nullptr};
  CheckRelation(parent, &finding);
  if (part == nullptr) return;
  CheckRelation(part, &finding);

  List *index_oids = RelationGetIndexList(part);
  ListCell *cell;
  foreach (cell, index_oids) {
    const Oid oid = lfirst_oid(cell);
    watch_index(oid);
    Relation index = index_open(oid, RowExclusiveLock);
    // The relcache's trees: what the INSERT will evaluate, inlined with the
    // search_path of whichever statement of this backend loaded them first.
    if (CallsRefusedCode(reinterpret_cast<Node *>(RelationGetIndexExpressions(index)), &finding) ||
        CallsRefusedCode(reinterpret_cast<Node *>(RelationGetIndexPredicate(index)), &finding)) {
      Refuse(finding, "index", quote_identifier(RelationGetRelationName(index)));
    }
    index_close(index, NoLock);
  }
}

}  // namespace outbox
