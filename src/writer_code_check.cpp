// What emit() refuses to run as its owner: see writer_code_check.hpp.
//
// Invariants: no C++ object with a destructor (every function here may
// ereport); runs inside a transaction, with the relations it reads locked by
// the caller; allocates only in the current memory context.
#include "writer_code_check.hpp"

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/transam.h"
#include "catalog/namespace.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_index.h"
#include "catalog/pg_language_d.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "rewrite/prs2lock.h"
#include "rewrite/rowsecurity.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
#include "utils/typcache.h"
#include "utils/varlena.h"
}

#include <cstring>

namespace outbox {
namespace {

// What the walk found: the object it refuses and why (why == nullptr:
// nothing yet).
struct Finding {
  Oid writer;
  void (*watch_row)(int, uint32);
  Oid object;
  bool is_domain;
  const char *why;
};

bool OwnedByWriterOrSuperuser(Oid owner, Oid writer) {
  return owner == writer || superuser_arg(owner);
}

// Whether the schema's ACL gives CREATE to PUBLIC or to any role that is
// neither `writer` nor a superuser (a role's members may use its grant).
// NULL ACL: the owner's default, CREATE for the owner only.
bool OthersMayCreateIn(HeapTuple schema, Oid writer) {
  bool isnull = true;
  const Datum datum = SysCacheGetAttr(NAMESPACEOID, schema, Anum_pg_namespace_nspacl, &isnull);
  if (isnull) return false;
  const Acl *acl = DatumGetAclP(datum);
  const AclItem *items = ACL_DAT(acl);
  for (int i = 0; i < ACL_NUM(acl); ++i) {
    if ((ACLITEM_GET_PRIVS(items[i]) & ACL_CREATE) == 0) continue;
    const Oid grantee = items[i].ai_grantee;
    if (grantee == ACL_ID_PUBLIC || !OwnedByWriterOrSuperuser(grantee, writer)) return true;
  }
  return false;
}

// Whether `path` (a search_path value) finds nothing the caller could have
// made: pg_temp named, and last (else the caller's temporary schema is
// searched first for tables and types), and every other schema pg_catalog or
// one that emit()'s owner or a superuser owns and no one else may create
// objects in ("$user" is whoever runs).
bool SafePath(const char *path, Oid writer) {
  char *copy = pstrdup(path);
  List *names = nullptr;
  if (!SplitIdentifierString(copy, ',', &names) || names == nullptr) return false;
  if (strcmp(static_cast<const char *>(llast(names)), "pg_temp") != 0) return false;
  ListCell *cell;
  foreach (cell, names) {
    const char *name = static_cast<const char *>(lfirst(cell));
    if (cell == list_last_cell(names) || strcmp(name, "pg_catalog") == 0) continue;
    if (strcmp(name, "pg_temp") == 0) return false;  // only last
    const Oid schema = get_namespace_oid(name, true);
    // Missing: whoever may create schemas could make it later, and nothing
    // here would notice.
    if (!OidIsValid(schema)) return false;
    HeapTuple tuple = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(schema));
    if (!HeapTupleIsValid(tuple)) return false;
    const Oid owner = reinterpret_cast<Form_pg_namespace>(GETSTRUCT(tuple))->nspowner;
    const bool others_create = OthersMayCreateIn(tuple, writer);
    ReleaseSysCache(tuple);
    if (!OwnedByWriterOrSuperuser(owner, writer) || others_create) return false;
  }
  return true;
}

// Whether the function's pg_proc row sets a SafePath search_path: then
// PostgreSQL never inlines it and runs (and compiles) its body under that
// path.
bool SetsSafeSearchPath(HeapTuple proc, Oid writer) {
  bool isnull = true;
  const Datum config = SysCacheGetAttr(PROCOID, proc, Anum_pg_proc_proconfig, &isnull);
  if (isnull) return false;
  Datum *items = nullptr;
  bool *nulls = nullptr;
  int count = 0;
  deconstruct_array(DatumGetArrayTypeP(config), TEXTOID, -1, false, TYPALIGN_INT, &items, &nulls,
                    &count);
  constexpr const char kPrefix[] = "search_path=";
  for (int i = 0; i < count; ++i) {
    if (nulls[i]) continue;
    const char *setting = TextDatumGetCString(items[i]);
    if (strncmp(setting, kPrefix, strlen(kPrefix)) == 0) {
      return SafePath(setting + strlen(kPrefix), writer);
    }
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
  if (!OwnedByWriterOrSuperuser(proc->proowner, writer)) {
    why = "neither emit()'s owner nor a superuser owns it";
  } else if (proc->prolang != ClanguageId && proc->prolang != INTERNALlanguageId &&
             !SetsSafeSearchPath(tuple, writer)) {
    why =
        "it is not declared with SET search_path = pg_catalog, pg_temp (or other schemas "
        "only emit()'s owner or a superuser owns, then pg_temp)";
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
      finding->watch_row(PROCOID, GetSysCacheHashValue1(PROCOID, ObjectIdGetDatum(function)));
    }
    return false;
  }
  finding->object = function;
  finding->is_domain = false;
  finding->why = why;
  return true;
}

bool CallsRefusedCode(Node *node, void *context);

// Whether the CHECK constraints of domain `domain` (not its base type's)
// call code that must not run as the writer: their stored trees, as the
// domain's owner wrote them (the typcache plans them with the search_path of
// the backend's first use of the domain, which changes nothing for code
// that is built in or pinned).
bool DomainChecksRefused(Oid domain, Finding *finding) {
  Relation constraints = table_open(ConstraintRelationId, AccessShareLock);
  ScanKeyData key;
  ScanKeyInit(&key, Anum_pg_constraint_contypid, BTEqualStrategyNumber, F_OIDEQ,
              ObjectIdGetDatum(domain));
  SysScanDesc scan =
      systable_beginscan(constraints, ConstraintTypidIndexId, true, nullptr, 1, &key);
  bool refused = false;
  HeapTuple tuple;
  while (!refused && HeapTupleIsValid(tuple = systable_getnext(scan))) {
    if (reinterpret_cast<Form_pg_constraint>(GETSTRUCT(tuple))->contype != CONSTRAINT_CHECK) {
      continue;
    }
    bool isnull = true;
    const Datum bin =
        heap_getattr(tuple, Anum_pg_constraint_conbin, RelationGetDescr(constraints), &isnull);
    refused = !isnull && CallsRefusedCode(
                             static_cast<Node *>(stringToNode(TextDatumGetCString(bin))), finding);
  }
  systable_endscan(scan);
  table_close(constraints, AccessShareLock);
  return refused;
}

// Whether making or coercing a value of `type` runs code that must not run
// as the writer: a domain's CHECK constraints, also inside a composite,
// array, range or multirange type (populate_record, a row or array input).
// Other types that are not built in run only C functions, which only a
// superuser can create. Nesting deeper than a few levels counts as yes.
bool TypeRefused(Oid type, Finding *finding, int depth) {
  if (type < FirstNormalObjectId) return false;
  if (depth > 8) {
    finding->object = type;
    finding->is_domain = true;
    finding->why = "it nests types too deeply to be looked through";
    return true;
  }
  HeapTuple tuple = SearchSysCache1(TYPEOID, ObjectIdGetDatum(type));
  if (!HeapTupleIsValid(tuple)) return false;
  const Form_pg_type form = reinterpret_cast<Form_pg_type>(GETSTRUCT(tuple));
  const char kind = form->typtype;
  const Oid base = form->typbasetype;
  const Oid element = form->typlen == -1 ? form->typelem : InvalidOid;  // an array's
  ReleaseSysCache(tuple);
  switch (kind) {
    case TYPTYPE_DOMAIN:
      // ALTER DOMAIN ... ADD CONSTRAINT changes the pg_type row too.
      finding->watch_row(TYPEOID, GetSysCacheHashValue1(TYPEOID, ObjectIdGetDatum(type)));
      return DomainChecksRefused(type, finding) || TypeRefused(base, finding, depth + 1);
    case TYPTYPE_COMPOSITE: {
      TupleDesc desc = lookup_rowtype_tupdesc(type, -1);
      bool refused = false;
      for (int a = 0; a < desc->natts && !refused; ++a) {
        const Form_pg_attribute att = TupleDescAttr(desc, a);
        refused = !att->attisdropped && TypeRefused(att->atttypid, finding, depth + 1);
      }
      ReleaseTupleDesc(desc);
      return refused;
    }
    case TYPTYPE_RANGE:
      return TypeRefused(get_range_subtype(type), finding, depth + 1);
    case TYPTYPE_MULTIRANGE:
      return TypeRefused(get_multirange_range(type), finding, depth + 1);
    default:
      return OidIsValid(element) && TypeRefused(element, finding, depth + 1);
  }
}

// expression_tree_walker's callback over an index expression or predicate
// or a CHECK constraint: true when it calls a function Refused, or coerces
// to a domain that is not built in.
bool CallsRefusedCode(Node *node, void *context) {
  if (node == nullptr) return false;
  // The value of every node that makes or converts one: its type (exprType
  // knows these node types).
  switch (nodeTag(node)) {
    case T_Const:
    case T_Var:
    case T_Param:
    case T_FuncExpr:
    case T_OpExpr:
    case T_RelabelType:
    case T_CoerceViaIO:
    case T_ArrayCoerceExpr:
    case T_ConvertRowtypeExpr:
    case T_RowExpr:
    case T_ArrayExpr:
    case T_CoerceToDomain:
      if (TypeRefused(exprType(node), static_cast<Finding *>(context), 0)) return true;
      break;
    default:
      break;
  }
  const auto walker = TreeWalker(CallsRefusedCode);
  // A subquery (a rule's action, a policy's SubLink): every expression in it.
  if (IsA(node, Query)) return query_tree_walker(castNode(Query, node), walker, context, 0);
  if (check_functions_in_node(node, Refused, context)) return true;
  return expression_tree_walker(node, walker, context);
}

void Refuse(const Finding &finding, const char *what, const char *where) {
  ereport(ERROR,
          (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
           errmsg("outbox: emit() does not run %s %s as its owner",
                  finding.is_domain ? "type" : "function",
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
// generated columns, CHECK constraints, rules, and row security policies.
void CheckRelation(Relation rel, Finding *finding) {
  const TriggerDesc *triggers = rel->trigdesc;
  for (int i = 0; triggers != nullptr && i < triggers->numtriggers; ++i) {
    const Trigger &trigger = triggers->triggers[i];
    if (!TRIGGER_FOR_INSERT(trigger.tgtype) || trigger.tgisinternal ||
        trigger.tgenabled == TRIGGER_DISABLED) {
      continue;  // enabling it changes the relcache entry: checked then
    }
    if (Refused(trigger.tgfoid, finding) ||
        (trigger.tgqual != nullptr &&
         CallsRefusedCode(static_cast<Node *>(stringToNode(trigger.tgqual)), finding))) {
      Refuse(*finding, "trigger", quote_identifier(trigger.tgname));
    }
  }
  const TupleDesc desc = RelationGetDescr(rel);
  // A column the INSERT fills with its default (NULL too) is coerced to its
  // type, whose domain constraints then run.
  for (int a = 0; a < desc->natts; ++a) {
    const Form_pg_attribute att = TupleDescAttr(desc, a);
    if (!att->attisdropped && TypeRefused(att->atttypid, finding, 0)) {
      Refuse(*finding, "column", quote_identifier(NameStr(att->attname)));
    }
  }
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
  // Whether the policies apply to the writer (not the table's owner, or
  // FORCE) or not, they are looked at: conservative, and cheap.
  if (rel->rd_rel->relrowsecurity && rel->rd_rsdesc != nullptr) {
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
                                  void (*watch_index)(Oid), void (*watch_row)(int, uint32)) {
  Finding finding = {writer, watch_row, InvalidOid, false, nullptr};
  CheckRelation(parent, &finding);
  if (part == nullptr) return;
  CheckRelation(part, &finding);

  List *index_oids = RelationGetIndexList(part);
  ListCell *cell;
  foreach (cell, index_oids) {
    const Oid oid = lfirst_oid(cell);
    watch_index(oid);
    Relation index = index_open(oid, RowExclusiveLock);
    // The catalog's trees first: loading them folds immutable functions on
    // constants, that is runs them, as the writer.
    for (const AttrNumber column : {Anum_pg_index_indexprs, Anum_pg_index_indpred}) {
      bool isnull = true;
      const Datum stored = SysCacheGetAttr(INDEXRELID, index->rd_indextuple, column, &isnull);
      if (!isnull &&
          CallsRefusedCode(static_cast<Node *>(stringToNode(TextDatumGetCString(stored))),
                           &finding)) {
        Refuse(finding, "index", quote_identifier(RelationGetRelationName(index)));
      }
    }
    // Then the relcache's trees: what the INSERT will evaluate, inlined with the
    // search_path of whichever statement of this backend loaded them first.
    if (CallsRefusedCode(reinterpret_cast<Node *>(RelationGetIndexExpressions(index)), &finding) ||
        CallsRefusedCode(reinterpret_cast<Node *>(RelationGetIndexPredicate(index)), &finding)) {
      Refuse(finding, "index", quote_identifier(RelationGetRelationName(index)));
    }
    index_close(index, NoLock);
  }
}

}  // namespace outbox
