// emit()'s write: the direct insert into the day's partition, and the SPI
// INSERT it falls back to. See event_insert.hpp for why and when.
//
// The per-backend cache (InsertCache) holds what an INSERT's executor would
// otherwise derive on every call: which partition takes the current time and
// the time range it covers, where each column sits in that partition's rows,
// and each index's IndexInfo with its predicate compiled. It never holds a
// Relation, a lock or a pinned tuple descriptor across calls: those belong to
// transactions (resource owners), the cache outlives them. Every call takes
// the same locks an INSERT would (RowExclusiveLock on outbox.events, the
// partition and each index it writes), and taking a lock for the first time
// in a transaction processes pending invalidations; the relcache callback
// below then bumps `inval_generation`, and a cache built under an older
// generation is rebuilt before use. So the cache is only trusted while the
// locks that freeze what it describes are held.
//
// Invariants: no C++ object with a destructor anywhere in this file (every
// function here may ereport); the cache's memory lives in `cache.context`, a
// child of TopMemoryContext, reset when the cache is rebuilt.
#include "event_insert.hpp"

#include "guc.hpp"

extern "C" {
#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
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

// Every column of outbox.events, by name and type: EventColumn's six, then
// the ones emit() leaves to their defaults.
enum TableColumn {
  kStatus = kEmitColumns,
  kAttempts,
  kPublishedAt,
  kLastError,
  kNextAttemptAt,
  kTableColumns
};
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

// More than this many indexes or columns on the partition: SPI path. Ours
// has 4 indexes and 11 columns.
constexpr int kMaxIndexes = 16;
constexpr int kMaxAttributes = 64;
constexpr const char *kUnbounded = "a partition has an unbounded range";

struct IndexPlan {
  Oid oid;
  IndexInfo *info;       // BuildIndexInfo's, in cache.context
  ExprState *predicate;  // compiled partial-index predicate; nullptr: none
  bool unique;
};

struct InsertCache {
  MemoryContext context = nullptr;
  bool built = false;              // the fields below describe `partition`
  uint64 generation = 0;           // inval_generation when built
  Oid parent = InvalidOid;         // outbox.events
  Oid partition = InvalidOid;      // the partition taking [lo, hi)
  TimestampTz lo = 0, hi = 0;      // the created_at range routed to `partition`
  bool direct = false;             // false: this partition takes the SPI path
  TupleDesc desc = nullptr;        // copy of the partition's row type (not refcounted)
  TupleTableSlot *slot = nullptr;  // over `desc`, for index values and predicates
  EState *estate = nullptr;        // for predicates and index expressions only
  Datum pending = 0;               // 'pending'::text
  int attnum[kTableColumns];       // 0-based position of each column in `desc`
  bool key_not_null = false;       // NOT NULL on key / headers: a NULL one takes SPI
  bool headers_not_null = false;
  int nindexes = 0;
  IndexPlan indexes[kMaxIndexes];
};

InsertCache cache;
uint64 inval_generation = 1;
bool callback_registered = false;
SPIPlanPtr insert_plan = nullptr;  // the fallback, prepared once per backend

// Relcache invalidation of outbox.events, the cached partition or one of its
// indexes (or of everything: InvalidOid). May run inside any catalog access,
// including in the middle of InsertEvent: it only bumps a counter; the cache
// is rebuilt at the next check, never freed under a caller.
void OnRelcacheInvalidation(Datum, Oid relid) {
  if (!cache.built && cache.parent == InvalidOid) return;
  bool ours = relid == InvalidOid || relid == cache.parent || relid == cache.partition;
  for (int i = 0; !ours && i < cache.nindexes; ++i) ours = relid == cache.indexes[i].oid;
  if (ours) ++inval_generation;
}

bool HasRowInsertTriggers(Relation rel) {
  const TriggerDesc *t = rel->trigdesc;
  return t != nullptr &&
         (t->trig_insert_before_row || t->trig_insert_after_row || t->trig_insert_instead_row);
}

bool HasAnyInsertTriggers(Relation rel) {
  const TriggerDesc *t = rel->trigdesc;
  return t != nullptr && (HasRowInsertTriggers(rel) || t->trig_insert_before_statement ||
                          t->trig_insert_after_statement || t->trig_insert_new_table);
}

// Which partition of outbox.events takes `at`, and the range of times that go
// to the same place. Requires RowExclusiveLock on `parent`. Returns why not
// (nullptr: routed) when outbox.events is not as the extension made it (one
// range key on created_at compared as timestamptz, concrete bounds, leaf
// partitions, no rules, row security or INSERT triggers) or no partition takes
// `at`: then the SPI INSERT routes, or reports the missing partition.
const char *Route(Relation parent, TimestampTz at) {
  if (parent->rd_rel->relkind != RELKIND_PARTITIONED_TABLE) return "it is not partitioned";
  if (parent->rd_rules != nullptr) return "it has rules";
  if (parent->rd_rel->relrowsecurity) return "it has row security";
  if (HasAnyInsertTriggers(parent)) return "it has INSERT triggers";
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

// Whether rows can be written straight into `part` (nullptr) or why not, and
// if so fill in the column positions and index plans. Requires
// RowExclusiveLock on `part`; allocates in cache.context (the current memory
// context).
const char *Inspect(Relation part) {
  if (part->rd_rel->relkind != RELKIND_RELATION) return "its partition is not a table";
  if (part->rd_rel->relam != HEAP_TABLE_AM_OID) return "its partition is not a heap table";
  if (HasRowInsertTriggers(part)) return "its partition has row INSERT triggers";
  TupleDesc desc = RelationGetDescr(part);
  if (desc->natts > kMaxAttributes) return "its partition has too many columns";
  if (desc->constr != nullptr) {
    // The status CHECK is the only constraint the table has, and emit's
    // constant 'pending' satisfies it.
    const TupleConstr *constr = desc->constr;
    if (constr->has_generated_stored) return "it has generated columns";
    for (int i = 0; i < constr->num_check; ++i) {
      if (strcmp(constr->check[i].ccname, "events_status_check") != 0) {
        return "it has CHECK constraints of its own";
      }
    }
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
    if (att->attnotnull &&
        (column == kPublishedAt || column == kLastError || column == kNextAttemptAt)) {
      return "a column emit() leaves NULL is NOT NULL";
    }
  }
  for (int c = 0; c < kTableColumns; ++c) {
    if (cache.attnum[c] < 0) return "a column is missing";
  }
  cache.key_not_null = TupleDescAttr(desc, cache.attnum[kColKey])->attnotnull;
  cache.headers_not_null = TupleDescAttr(desc, cache.attnum[kColHeaders])->attnotnull;

  List *index_oids = RelationGetIndexList(part);
  if (list_length(index_oids) > kMaxIndexes) return "its partition has too many indexes";
  cache.estate = CreateExecutorState();
  ListCell *cell;
  foreach (cell, index_oids) {
    IndexPlan &plan = cache.indexes[cache.nindexes];
    plan.oid = lfirst_oid(cell);
    ++cache.nindexes;  // before the lock: its invalidations count from here
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
  cache.pending = CStringGetTextDatum("pending");
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
    cache.nindexes = 0;
    cache.partition = InvalidOid;
    MemoryContextReset(cache.context);
    const uint64 generation = inval_generation;
    const Oid schema = get_namespace_oid("outbox", true);
    cache.parent = OidIsValid(schema) ? get_relname_relid("events", schema) : InvalidOid;
    if (!OidIsValid(cache.parent)) return false;

    MemoryContext caller = MemoryContextSwitchTo(cache.context);
    LockRelationOid(cache.parent, RowExclusiveLock);
    Relation parent = table_open(cache.parent, NoLock);
    const char *unrouted = Route(parent, at);
    table_close(parent, NoLock);
    const char *indirect = unrouted;
    if (unrouted == nullptr) {
      LockRelationOid(cache.partition, RowExclusiveLock);
      Relation part = table_open(cache.partition, NoLock);
      indirect = Inspect(part);
      table_close(part, NoLock);
    }
    MemoryContextSwitchTo(caller);
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

void InsertDirect(const Datum *values, const bool *isnull) {
  Relation part = table_open(cache.partition, NoLock);  // locked by Prepare
  const int natts = cache.desc->natts;
  Datum row[kMaxAttributes];
  bool nulls[kMaxAttributes];
  for (int a = 0; a < natts; ++a) nulls[a] = true;
  for (int c = 0; c < kEmitColumns; ++c) {
    row[cache.attnum[c]] = values[c];
    nulls[cache.attnum[c]] = isnull[c];
  }
  row[cache.attnum[kStatus]] = cache.pending;
  nulls[cache.attnum[kStatus]] = false;
  row[cache.attnum[kAttempts]] = Int32GetDatum(0);
  nulls[cache.attnum[kAttempts]] = false;

  HeapTuple tuple = heap_form_tuple(cache.desc, row, nulls);
  heap_insert(part, tuple, GetCurrentCommandId(true), 0, nullptr);

  // Index entries, as ExecInsertIndexTuples makes them, for the indexes whose
  // predicate the row satisfies (emit's row: the ready index only). An
  // index is opened and locked only when it gets an entry.
  ExecStoreHeapTuple(tuple, cache.slot, false);
  ExprContext *econtext = GetPerTupleExprContext(cache.estate);
  econtext->ecxt_scantuple = cache.slot;
  for (int i = 0; i < cache.nindexes; ++i) {
    const IndexPlan &plan = cache.indexes[i];
    if (!plan.info->ii_ReadyForInserts) continue;
    if (plan.predicate != nullptr && !ExecQual(plan.predicate, econtext)) continue;
    Relation index = index_open(plan.oid, RowExclusiveLock);
    Datum key[INDEX_MAX_KEYS];
    bool key_null[INDEX_MAX_KEYS];
    FormIndexDatum(plan.info, cache.slot, cache.estate, key, key_null);
    index_insert(index, key, key_null, &tuple->t_self, part,
                 plan.unique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO, false, plan.info);
    index_close(index, NoLock);
  }
  ExecClearTuple(cache.slot);
  ResetExprContext(econtext);
  heap_freetuple(tuple);
  table_close(part, NoLock);
}

void InsertThroughSpi(const Datum *values, const bool *isnull) {
  char nulls[kEmitColumns];
  for (int c = 0; c < kEmitColumns; ++c) nulls[c] = isnull[c] ? 'n' : ' ';
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  if (insert_plan == nullptr) {
    // Schema-qualified, so the plan means the same whatever the caller's
    // search_path; the plan cache re-plans it if the table is recreated.
    Oid types[kEmitColumns] = {UUIDOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID, TIMESTAMPTZOID};
    SPIPlanPtr plan = SPI_prepare(
        "INSERT INTO outbox.events (id, topic, key, payload, headers, created_at) "
        "VALUES ($1, $2, $3, $4, $5, $6)",
        kEmitColumns, types);
    if (plan == nullptr) {
      elog(ERROR, "outbox: could not prepare the event insert: %s",
           SPI_result_code_string(SPI_result));
    }
    if (SPI_keepplan(plan) != 0) elog(ERROR, "outbox: could not keep the event insert plan");
    insert_plan = plan;
  }
  const int rc = SPI_execute_plan(insert_plan, const_cast<Datum *>(values), nulls, false, 0);
  if (rc != SPI_OK_INSERT) {
    elog(ERROR, "outbox: event insert failed: %s", SPI_result_code_string(rc));
  }
  SPI_finish();
}

}  // namespace

bool InsertEvent(const Datum *values, const bool *isnull) {
  // What the executor checks before an INSERT, in the same words.
  PreventCommandIfReadOnly("INSERT");
  PreventCommandIfParallelMode("INSERT");
  const TimestampTz at = DatumGetTimestampTz(values[kColCreatedAt]);
  if (!guc::emit_direct_insert || !Prepare(at) || (isnull[kColKey] && cache.key_not_null) ||
      (isnull[kColHeaders] && cache.headers_not_null) ||
      pg_class_aclcheck(cache.parent, GetUserId(), ACL_INSERT) != ACLCHECK_OK) {
    // SPI checks column privileges, NOT NULL and everything else itself.
    InsertThroughSpi(values, isnull);
    return false;
  }
  InsertDirect(values, isnull);
  return true;
}

}  // namespace outbox
