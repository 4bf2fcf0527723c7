// The per-backend cache behind emit()'s direct insert (insert_cache.hpp):
// building it for the partition that takes the current time, and its
// invalidation. The write that uses it is event_insert.cpp.
//
// The cache never holds a Relation, a lock or a pinned tuple descriptor
// across calls: those belong to transactions (resource owners), the cache
// outlives them. Every call takes the same locks an INSERT would
// (RowExclusiveLock on outbox.events, the partition and each index it
// writes), and taking a lock for the first time in a transaction processes
// pending invalidations; the relcache callback below then bumps
// `inval_generation`, and a cache built under an older generation is rebuilt
// before use. So the cache is only trusted while the locks that freeze what
// it describes are held. (ALTER TABLE ... SET/DROP DEFAULT on outbox.events
// and ADD/DROP CONSTRAINT on it or the partition invalidate their relcache
// entries: pg_attribute and pg_class rows change.)
//
// Defaults, as the INSERT takes them: it names outbox.events, so the
// rewriter fills the columns emit() does not supply from outbox.events'
// defaults (the partition's own are never used). A constant default is the
// very Const the INSERT's plan writes, so the cache holds its value; any
// other default (now(), nextval(), an identity column, any expression) is
// left to the INSERT. (writer_code_rule.hpp refuses defaults and columns
// that would run code that is not built in, domains included.)
//
// The partition's CHECK constraints are read here and compiled by the
// write, when the first row gets past NOT NULL (event_insert.cpp says why).
//
// Invariants: no C++ object with a destructor anywhere in this file (every
// function here may ereport); the cache's memory lives in `cache.context`, a
// child of TopMemoryContext, reset when the cache is rebuilt.
#include "emit/insert_cache.hpp"

#include "emit/writer_code_rule.hpp"
#include "emit/writer_search_path.hpp"

extern "C" {
#include "access/genam.h"
#include "access/table.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_proc_d.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/partcache.h"
#include "utils/rel.h"
}

#include <cstring>

namespace outbox {
namespace {

// Each column's name and type, by TableColumn.
struct ColumnSpec {
  const char *name;
  Oid type;
};
constexpr ColumnSpec kColumns[kTableColumns] = {{"id", UUIDOID},
                                                {"topic", TEXTOID},
                                                {"key", TEXTOID},
                                                {"payload", JSONBOID},
                                                {"headers", JSONBOID},
                                                {"created_at", TIMESTAMPTZOID},
                                                {"status", TEXTOID},
                                                {"attempts", INT4OID},
                                                {"published_at", TIMESTAMPTZOID},
                                                {"last_error", TEXTOID},
                                                {"next_attempt_at", TIMESTAMPTZOID}};

constexpr const char *kUnbounded = "a partition has an unbounded range";

InsertCache cache;
uint64 inval_generation = 1;
bool callback_registered = false;

// Relcache invalidation of outbox.events, the cached partition or one of its
// indexes (or of everything: InvalidOid). May run inside any catalog access,
// including in the middle of InsertEvent: it only bumps a counter; the cache
// is rebuilt at the next check, never freed under a caller.
void OnRelcacheInvalidation(Datum, Oid relid) {
  if (!cache.built && cache.parent == InvalidOid) return;
  if (relid == InvalidOid || relid == cache.parent || relid == cache.partition ||
      cache.watched_relations.Matches(relid)) {
    ++inval_generation;
  }
}

// RefuseCodeNotBuiltIn's `watch`, and the partitions it looked at.
void WatchRelation(Oid relid) { cache.watched_relations.Add(cache.context, relid); }

// Which partition of outbox.events takes `at`, and the range of times that go
// to the same place. Requires RowExclusiveLock on `parent`. Returns why not
// (nullptr: routed) when outbox.events is not partitioned as the extension
// made it (one range key on created_at compared as timestamptz, concrete
// bounds, leaf partitions) or no partition takes `at`: then the SPI INSERT
// routes, or reports the missing partition.
const char *Route(Relation parent, TimestampTz at) {
  if (parent->rd_rel->relkind != RELKIND_PARTITIONED_TABLE) return "it is not partitioned";
  PartitionKey key = RelationGetPartitionKey(parent);
  const AttrNumber created_at = get_attnum(RelationGetRelid(parent), "created_at");
  if (key == nullptr || key->strategy != PARTITION_STRATEGY_RANGE || key->partnatts != 1 ||
      key->partattrs[0] != created_at || key->partsupfunc[0].fn_oid != F_TIMESTAMPTZ_CMP) {
    return "it is not partitioned by range of created_at";
  }
  PartitionDesc parts = RelationGetPartitionDesc(parent, true);
  const PartitionBoundInfo bounds = parts->boundinfo;
  if (parts->nparts == 0 || bounds == nullptr) return "it has no partitions";
  // The last bound at or before `at` (-1: none); bounds[i] is an upper bound
  // of the partition at indexes[i] and a lower bound of the one at
  // indexes[i + 1] (-1 there: a gap, which the default partition fills).
  int below = -1;
  for (int lo = 0, hi = bounds->ndatums - 1; lo <= hi;) {
    const int mid = lo + (hi - lo) / 2;
    if (bounds->kind[mid][0] != PARTITION_RANGE_DATUM_VALUE) return kUnbounded;
    if (DatumGetTimestampTz(bounds->datums[mid][0]) <= at) {
      below = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  const int above = below + 1;
  if ((above < bounds->ndatums && bounds->kind[above][0] != PARTITION_RANGE_DATUM_VALUE) ||
      (below >= 0 && bounds->kind[below][0] != PARTITION_RANGE_DATUM_VALUE)) {
    return kUnbounded;
  }
  int index = bounds->indexes[above];
  if (index < 0) index = bounds->default_index;
  if (index < 0) return "no partition takes the current time";
  if (!parts->is_leaf[index]) return "the partition taking the current time is partitioned";
  cache.partition = parts->oids[index];
  cache.lo = below >= 0 ? DatumGetTimestampTz(bounds->datums[below][0]) : PG_INT64_MIN;
  cache.hi = above < bounds->ndatums ? DatumGetTimestampTz(bounds->datums[above][0]) : PG_INT64_MAX;
  return nullptr;
}

// The values outbox.events' defaults give the columns emit() does not
// supply, as the INSERT's rewriter builds them (build_column_default: the
// column's default, an identity column's nextval, a domain's default), or
// why the direct write cannot use them (nullptr: cache.value filled in).
// Requires a lock on `parent`; allocates in cache.context.
const char *Defaults(Relation parent, TupleDesc part_desc) {
  const TupleDesc desc = RelationGetDescr(parent);
  for (int c = kStatus; c < kTableColumns; ++c) {
    int attnum = 0;  // 1-based, in outbox.events (a partition's can differ)
    for (int a = 0; a < desc->natts && attnum == 0; ++a) {
      const Form_pg_attribute att = TupleDescAttr(desc, a);
      if (!att->attisdropped && strcmp(NameStr(att->attname), kColumns[c].name) == 0) {
        attnum = a + 1;
      }
    }
    if (attnum == 0) return "a column is missing";
    Node *expr = build_column_default(parent, attnum);
    if (expr == nullptr) {
      cache.value[c] = (Datum)0;
      cache.value_null[c] = true;
    } else if (IsA(expr, Const) && castNode(Const, expr)->consttype == kColumns[c].type) {
      // Planning leaves a Const as it is and the executor stores its datum:
      // the same bytes as heap_form_tuple gets here.
      const Const *value = castNode(Const, expr);
      cache.value[c] = value->constisnull
                           ? (Datum)0
                           : datumCopy(value->constvalue, value->constbyval, value->constlen);
      cache.value_null[c] = value->constisnull;
    } else {
      return psprintf("the default of %s is not a constant", kColumns[c].name);
    }
    if (cache.value_null[c] && TupleDescAttr(part_desc, cache.attnum[c])->attnotnull) {
      return psprintf("%s is NOT NULL and defaults to NULL", kColumns[c].name);
    }
  }
  return nullptr;
}

// check_functions_in_node's callback: whether a function of a CHECK (all
// immutable and built in, writer_code_rule.hpp) can send a notice, which
// evaluating the constraint here and again in the INSERT when it refuses the
// row would show twice: those that make a tsquery (to_tsquery() and the
// like) do for a query of stop words only.
bool MakesTsquery(Oid function, void *) { return get_func_rettype(function) == TSQUERYOID; }

bool SendsNotice(Node *node, void *context) {
  if (node == nullptr) return false;
  if (check_functions_in_node(node, MakesTsquery, context)) return true;
  return expression_tree_walker(node, TreeWalker(SendsNotice), context);
}

// Read the partition's CHECK constraints into cache.checks, or say why the
// direct write must not evaluate one (nullptr: read). They are compiled
// later, by CompileChecks. Requires cache.attnum; allocates in cache.context.
const char *PlanChecks(const TupleConstr *constr) {
  if (constr == nullptr || constr->num_check == 0) return nullptr;
  cache.checks = static_cast<CheckPlan *>(palloc(constr->num_check * sizeof(CheckPlan)));
  for (int i = 0; i < constr->num_check; ++i) {
    Expr *expr = static_cast<Expr *>(stringToNode(constr->check[i].ccbin));
    if (SendsNotice(reinterpret_cast<Node *>(expr), nullptr)) {
      return psprintf("CHECK constraint %s can send a notice: it must run once per row",
                      constr->check[i].ccname);
    }
    // Constant: immutable, and every column it reads (pull_varattnos'
    // numbers are offset by FirstLowInvalidHeapAttributeNumber; a whole-row
    // reference is 0) is tableoid or one emit() leaves to its default.
    Bitmapset *columns = nullptr;
    pull_varattnos(reinterpret_cast<Node *>(expr), 1, &columns);
    bool constant = !contain_mutable_functions(reinterpret_cast<Node *>(expr));
    int member = -1;
    while (constant && (member = bms_next_member(columns, member)) >= 0) {
      const AttrNumber attnum = member + FirstLowInvalidHeapAttributeNumber;
      bool fixed = attnum == TableOidAttributeNumber;
      for (int c = kStatus; c < kTableColumns && !fixed; ++c) fixed = attnum == cache.attnum[c] + 1;
      constant = fixed;
    }
    CheckPlan &plan = cache.checks[cache.nchecks];
    plan.expr = expr;
    plan.state = nullptr;
    plan.constant = constant;
    plan.held = false;
    ++cache.nchecks;
  }
  return nullptr;
}

// Whether rows can be written straight into `part` (nullptr) or why not, and
// if so fill in the column positions, default values, CHECK constraints and
// index plans. Requires RowExclusiveLock on `parent` and `part`; allocates in
// cache.context (the current memory context).
const char *Inspect(Relation parent, Relation part) {
  if (part->rd_rel->relkind != RELKIND_RELATION) return "its partition is not a table";
  if (part->rd_rel->relam != HEAP_TABLE_AM_OID) return "its partition is not a heap table";
  TupleDesc desc = RelationGetDescr(part);
  if (desc->natts > kMaxAttributes) return "its partition has too many columns";
  if (desc->constr != nullptr && desc->constr->has_generated_stored) {
    return "it has generated columns";
  }
  for (int c = 0; c < kTableColumns; ++c) cache.attnum[c] = -1;
  for (int a = 0; a < desc->natts; ++a) {
    const Form_pg_attribute att = TupleDescAttr(desc, a);
    if (att->attisdropped) continue;
    int column = -1;
    for (int c = 0; c < kTableColumns && column < 0; ++c) {
      if (strcmp(NameStr(att->attname), kColumns[c].name) == 0) column = c;
    }
    // A column emit() would not fill, or one of another type: SPI fills it.
    if (column < 0) return "it has a column emit() does not fill";
    if (att->atttypid != kColumns[column].type) return "a column has another type";
    cache.attnum[column] = a;
  }
  for (int c = 0; c < kTableColumns; ++c) {
    if (cache.attnum[c] < 0) return "a column is missing";
  }
  for (int c = 0; c < kEmitColumns; ++c) {
    cache.not_null[c] = TupleDescAttr(desc, cache.attnum[c])->attnotnull;
  }
  const char *why_not = Defaults(parent, desc);
  if (why_not != nullptr) return why_not;

  why_not = PlanChecks(desc->constr);
  if (why_not != nullptr) return why_not;

  cache.estate = CreateExecutorState();

  List *index_oids = RelationGetIndexList(part);
  if (list_length(index_oids) > kMaxIndexes) return "its partition has too many indexes";
  ListCell *cell;
  foreach (cell, index_oids) {
    IndexPlan &plan = cache.indexes[cache.nindexes];
    plan.oid = lfirst_oid(cell);
    ++cache.nindexes;  // (its invalidations count already: watched_relations)
    Relation index = index_open(plan.oid, RowExclusiveLock);
    plan.info = BuildIndexInfo(index);
    plan.unique = index->rd_index->indisunique;
    // Only access methods whose inserts keep no state between calls
    // (ii_AmCache) and no deferred or exclusion checks.
    const bool plain =
        (index->rd_rel->relam == BTREE_AM_OID || index->rd_rel->relam == HASH_AM_OID) &&
        plan.info->ii_ExclusionOps == nullptr && (!plan.unique || index->rd_index->indimmediate);
    index_close(index, NoLock);
    if (!plain) return "its partition has an index other than an immediate btree or hash";
    plan.predicate = plan.info->ii_Predicate != NIL
                         ? ExecPrepareQual(plan.info->ii_Predicate, cache.estate)
                         : nullptr;
  }
  cache.desc = CreateTupleDescCopy(desc);
  cache.slot = MakeSingleTupleTableSlot(cache.desc, &TTSOpsHeapTuple);
  return nullptr;
}

// Make the cache describe the partition taking `at`, with the locks an INSERT
// takes held. Returns whether the direct path may be used.
bool Prepare(TimestampTz at) {
  if (!callback_registered) {
    CacheRegisterRelcacheCallback(OnRelcacheInvalidation, (Datum)0);
    callback_registered = true;
  }
  if (cache.context == nullptr) {
    cache.context =
        AllocSetContextCreate(TopMemoryContext, "outbox emit insert", ALLOCSET_SMALL_SIZES);
  }
  // A few rounds: a concurrent change can invalidate what a round just read.
  for (int round = 0; round < 3; ++round) {
    if (cache.built && cache.generation == inval_generation && cache.lo <= at && at < cache.hi) {
      LockRelationOid(cache.parent, RowExclusiveLock);
      if (OidIsValid(cache.partition)) LockRelationOid(cache.partition, RowExclusiveLock);
      if (cache.generation == inval_generation) return cache.direct;
      continue;
    }
    // (Re)build: forget everything first, so an error below leaves no
    // half-built cache behind.
    cache.built = false;
    cache.direct = false;
    cache.nchecks = 0;
    cache.checks = nullptr;
    cache.checks_compiled = false;
    cache.checks_compiling = false;
    cache.nindexes = 0;
    cache.watched_relations.Reset();
    cache.partition = InvalidOid;
    MemoryContextReset(cache.context);
    const uint64 generation = inval_generation;
    const Oid schema = get_namespace_oid("outbox", true);
    cache.parent = OidIsValid(schema) ? get_relname_relid("events", schema) : InvalidOid;
    if (!OidIsValid(cache.parent)) return false;

    // Nothing of the user's runs below: the rule is checked on each relation
    // before its index expressions, predicates or partition key are loaded
    // (which folds and inlines them), and those are then built-in code.
    // search_path pinned all the same, as the INSERT would have it.
    const int level = PinSearchPath();
    const char *unrouted = nullptr;
    const char *indirect = nullptr;
    LockRelationOid(cache.parent, RowExclusiveLock);
    Relation parent = table_open(cache.parent, NoLock);
    // outbox.events first: routing loads its partition key.
    RefuseCodeNotBuiltIn(parent, WatchRelation);
    unrouted = Route(parent, at);
    Relation part = nullptr;
    if (unrouted == nullptr) {
      LockRelationOid(cache.partition, RowExclusiveLock);
      part = table_open(cache.partition, NoLock);
      RefuseCodeNotBuiltIn(part, WatchRelation);
    } else {
      // A layout the direct write does not route (a day partitioned again,
      // unbounded ranges): the INSERT may reach any partition.
      List *all = find_all_inheritors(cache.parent, RowExclusiveLock, nullptr);
      ListCell *cell;
      foreach (cell, all) {
        if (lfirst_oid(cell) == cache.parent) continue;
        WatchRelation(lfirst_oid(cell));
        Relation member = table_open(lfirst_oid(cell), NoLock);
        RefuseCodeNotBuiltIn(member, WatchRelation);
        table_close(member, NoLock);
      }
    }
    indirect = unrouted;
    if (part != nullptr) {
      MemoryContext caller = MemoryContextSwitchTo(cache.context);
      indirect = Inspect(parent, part);
      MemoryContextSwitchTo(caller);
      table_close(part, NoLock);
    }
    table_close(parent, NoLock);
    UnpinSearchPath(level);
    // Once per rebuild, for whoever wonders why emit() costs what it does.
    if (indirect == nullptr) {
      ereport(DEBUG1, (errmsg("outbox: emit() writes events straight into outbox.events")));
    } else {
      ereport(DEBUG1, (errmsg("outbox: emit() writes events through an INSERT statement"),
                       errdetail("outbox.events is not as the extension made it: %s.", indirect)));
    }
    const bool direct = indirect == nullptr;
    if (unrouted != nullptr) {
      // outbox.events is not as the extension made it, or no partition
      // takes `at`: the SPI INSERT routes (or reports the missing
      // partition) until outbox.events changes.
      cache.partition = InvalidOid;
      cache.lo = PG_INT64_MIN;
      cache.hi = PG_INT64_MAX;
    }
    cache.direct = direct;
    cache.generation = generation;
    cache.built = true;
    if (generation == inval_generation) return direct;
  }
  return false;
}

}  // namespace

InsertCache *PrepareInsertCache(TimestampTz at) { return Prepare(at) ? &cache : nullptr; }

}  // namespace outbox
