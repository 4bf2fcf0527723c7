// emit()'s write: the direct insert into the day's partition, through
// PostgreSQL's own single-row insert, and the SPI INSERT it falls back to.
// See event_insert.hpp for why and when.
//
// What the direct write knows of the partition (which one takes the current
// time, where each column sits, the defaults' values, its indexes) is the
// per-backend cache of insert_cache.hpp, trusted only while the locks that
// freeze what it describes are held: PrepareInsertCache takes them, as an
// INSERT would, before the write reads it.
//
// The row goes through ExecSimpleRelationInsert (execReplication.c), which
// logical replication's apply uses to write one row: NOT NULL, then the CHECK
// constraints in the partition's order (ExecConstraints), the partition
// constraint (ExecPartitionCheck), the heap insert and every index entry
// (ExecInsertIndexTuples); its BEFORE and AFTER ROW triggers and generated
// columns never come into play (writer_code_rule.hpp refuses row triggers,
// insert_cache.cpp generated columns). What it takes, set up as the INSERT's
// executor sets it up for a row routed to the partition:
// - an EState whose range table holds outbox.events as the INSERT names it
//   (range table index 1, its permission entry listing the columns emit()
//   supplies: ExecConstraints shows them in an error's DETAIL when the
//   writer may not read every column);
// - outbox.events' ResultRelInfo and the partition's, routed from it
//   (InitResultRelInfo with range table index 0 and ri_RootResultRelInfo, as
//   ExecInitPartitionInfo makes it): an error names the partition, as the
//   INSERT's does, and its DETAIL shows the row in outbox.events' column
//   order, whatever the partition's;
// - the partition's indexes opened (ExecOpenIndices: every index, with
//   RowExclusiveLock);
// - es_output_cid, the command id the row is written with.
// The after-trigger queue (AfterTriggerBeginQuery) and a snapshot are not
// needed: no AFTER ROW trigger or deferred constraint can be on the
// partition (the rule; insert_cache.cpp takes only immediate indexes), and
// an insert reads no snapshot.
//
// That state is built by the first write after the cache is (re)built and
// kept for the next ones. Built per call, as apply builds it, every call
// would compile the CHECK constraints, the partition constraint and the
// index predicates again: 2.6 times the instructions a hand-rolled INSERT
// statement costs per call, where kept it costs about as many. Kept, its
// Relation pointers belong to no call: each write sets them from table_open
// and index_open under its own locks and clears them after. A write
// that raises an error midway leaves it to be built again (ExecRelCheck
// keeps a half-compiled array when planning a CHECK fails, as 1/0 folded
// does). The IndexInfos it keeps live across transactions: insert_cache.cpp
// takes only btree and hash indexes, whose inserts keep no state in them
// (ii_AmCache).
//
// Where the direct write differs from the INSERT, none of it visible in what
// is written or raised:
// - It evaluates the partition constraint for every row, which the INSERT
//   skips for a row it routed itself (the row is routed to the partition
//   whose bounds hold it, so it always passes).
// - It keeps the index locks until the transaction ends; the INSERT releases
//   them when the statement ends (ExecCloseIndices). Both hold
//   RowExclusiveLock on outbox.events and the partition until the
//   transaction ends.
// - An error raised by the write (a NOT NULL or CHECK violation, a CHECK that
//   fails to plan or evaluate, a unique violation) carries the context line
//   SPI adds to the INSERT's, so the two read the same.
//
// Invariants: no C++ object with a destructor anywhere in this file (every
// function here may ereport); the write's EState and ResultRelInfos live in
// the cache's exec_context, a child of its memory context.
#include "emit/event_insert.hpp"

#include "guc.hpp"
#include "emit/insert_cache.hpp"
#include "emit/writer_search_path.hpp"

extern "C" {
#include "access/genam.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "nodes/parsenodes.h"
#if PG_VERSION_NUM >= 160000
#include "parser/parse_relation.h"
#endif
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
}

namespace outbox {
namespace {

// The fallback, word for word: SPI names it in the context of its errors.
constexpr const char *kInsertStatement =
    "INSERT INTO outbox.events (id, topic, key, payload, headers, created_at) "
    "VALUES ($1, $2, $3, $4, $5, $6)";
SPIPlanPtr insert_plan = nullptr;  // the fallback, prepared once per backend

// Pushed while the direct write does what the INSERT's executor would do, so
// that an error raised there reads as the INSERT's: SPI's error callback
// (_SPI_error_callback) adds this very line to every error of the statement.
void InsertStatementContext(void *) { errcontext("SQL statement \"%s\"", kInsertStatement); }

// The columns the INSERT names (insertedCols: attribute numbers of
// outbox.events, offset by FirstLowInvalidHeapAttributeNumber).
Bitmapset *InsertedColumns(Relation parent) {
  static constexpr const char *kNames[kEmitColumns] = {"id",      "topic",   "key",
                                                       "payload", "headers", "created_at"};
  Bitmapset *columns = nullptr;
  for (int c = 0; c < kEmitColumns; ++c) {
    const AttrNumber attnum = get_attnum(RelationGetRelid(parent), kNames[c]);
    columns = bms_add_member(columns, attnum - FirstLowInvalidHeapAttributeNumber);
  }
  return columns;
}

// outbox.events as the INSERT's range table has it, entry 1 of `estate`.
// Allocates in the current memory context.
void InitRangeTable(EState *estate, Relation parent) {
  RangeTblEntry *rte = makeNode(RangeTblEntry);
  rte->rtekind = RTE_RELATION;
  rte->relid = RelationGetRelid(parent);
  rte->relkind = parent->rd_rel->relkind;
  rte->rellockmode = RowExclusiveLock;
#if PG_VERSION_NUM >= 160000
  List *permissions = NIL;
  RTEPermissionInfo *permission = addRTEPermissionInfo(&permissions, rte);
  permission->requiredPerms = ACL_INSERT;
  permission->insertedCols = InsertedColumns(parent);
#if PG_VERSION_NUM >= 180000
  ExecInitRangeTable(estate, list_make1(rte), permissions, bms_make_singleton(1));
#else
  ExecInitRangeTable(estate, list_make1(rte), permissions);
#endif
#else
  rte->requiredPerms = ACL_INSERT;
  rte->insertedCols = InsertedColumns(parent);
  ExecInitRangeTable(estate, list_make1(rte));
#endif
}

// Build the write's EState and ResultRelInfos in cache.exec_context (see the
// top of this file), the partition's indexes opened by ExecOpenIndices and
// closed again (each write opens them). Requires RowExclusiveLock on
// `parent` and `part`, open.
void BuildExecutorState(InsertCache *cache, Relation parent, Relation part) {
  if (cache->exec_context == nullptr) {
    cache->exec_context =
        AllocSetContextCreate(cache->context, "outbox emit executor", ALLOCSET_SMALL_SIZES);
  }
  MemoryContext caller = MemoryContextSwitchTo(cache->exec_context);
  cache->estate = CreateExecutorState();
  InitRangeTable(cache->estate, parent);
  cache->root_info = makeNode(ResultRelInfo);
  InitResultRelInfo(cache->root_info, parent, 1, nullptr, 0);
  ResultRelInfo *info = makeNode(ResultRelInfo);
  InitResultRelInfo(info, part, 0, cache->root_info, 0);
  ExecOpenIndices(info, false);
  MemoryContextSwitchTo(caller);
  // ExecOpenIndices read the partition's index list as Inspect did, under
  // the same lock: the same indexes in the same order, which each write
  // opens by OID.
  bool same = info->ri_NumIndices == cache->nindexes;
  for (int i = 0; same && i < cache->nindexes; ++i) {
    same = RelationGetRelid(info->ri_IndexRelationDescs[i]) == cache->index_oids[i];
  }
  if (!same) elog(ERROR, "outbox: the partition's indexes changed under the insert cache");
  for (int i = 0; i < info->ri_NumIndices; ++i) {
    index_close(info->ri_IndexRelationDescs[i], NoLock);
    info->ri_IndexRelationDescs[i] = nullptr;
  }
  cache->part_info = info;
}

// The row in cache.slot, as a virtual tuple of the partition's row type, with
// the partition as its tableoid (a CHECK may read it, as it reads the
// INSERT's routed row).
void StoreRow(const InsertCache &cache, const Datum *values, const bool *isnull) {
  TupleTableSlot *slot = cache.slot;
  ExecClearTuple(slot);
  Datum *row = slot->tts_values;
  bool *nulls = slot->tts_isnull;
  for (int a = 0; a < slot->tts_tupleDescriptor->natts; ++a) nulls[a] = true;
  for (int c = 0; c < kEmitColumns; ++c) {
    row[cache.attnum[c]] = values[c];
    nulls[cache.attnum[c]] = isnull[c];
  }
  for (int c = kStatus; c < kTableColumns; ++c) {
    row[cache.attnum[c]] = cache.value[c];
    nulls[cache.attnum[c]] = cache.value_null[c];
  }
  ExecStoreVirtualTuple(slot);
  slot->tts_tableOid = cache.partition;
}

// Write the row straight into the partition through ExecSimpleRelationInsert,
// or raise the INSERT's error. Requires the locks PrepareInsertCache took.
// The first write through a new executor state loads and compiles the
// partition's constraints, index expressions and predicates: with
// search_path pinned, as the INSERT would have it. (Any error leaves the
// state to be built again, so every compilation happens in such a write.)
void InsertDirect(InsertCache *cache, const Datum *values, const bool *isnull) {
  ErrorContextCallback context = {error_context_stack, InsertStatementContext, nullptr};
  error_context_stack = &context;
  if (cache->writing) {
    // The last write raised an error midway: start from nothing again.
    if (cache->exec_context != nullptr) MemoryContextReset(cache->exec_context);
    cache->estate = nullptr;
    cache->root_info = nullptr;
    cache->part_info = nullptr;
  }
  cache->writing = true;
  const bool fresh = cache->part_info == nullptr;
  const int level = fresh ? PinSearchPath() : 0;
  Relation parent = table_open(cache->parent, NoLock);  // locked by PrepareInsertCache
  Relation part = table_open(cache->partition, NoLock);
  if (fresh) BuildExecutorState(cache, parent, part);
  ResultRelInfo *info = cache->part_info;
  cache->root_info->ri_RelationDesc = parent;
  info->ri_RelationDesc = part;
  for (int i = 0; i < info->ri_NumIndices; ++i) {
    info->ri_IndexRelationDescs[i] = index_open(cache->index_oids[i], RowExclusiveLock);
  }
  cache->estate->es_output_cid = GetCurrentCommandId(true);
  StoreRow(*cache, values, isnull);
  ExecSimpleRelationInsert(info, cache->estate, cache->slot);
  ExecClearTuple(cache->slot);
  ResetExprContext(GetPerTupleExprContext(cache->estate));
  for (int i = 0; i < info->ri_NumIndices; ++i) {
    index_close(info->ri_IndexRelationDescs[i], NoLock);
    info->ri_IndexRelationDescs[i] = nullptr;
  }
  info->ri_RelationDesc = nullptr;
  cache->root_info->ri_RelationDesc = nullptr;
  table_close(part, NoLock);
  table_close(parent, NoLock);
  if (fresh) UnpinSearchPath(level);
  cache->writing = false;
  error_context_stack = context.previous;
}

void InsertThroughSpi(const Datum *values, const bool *isnull) {
  char nulls[kEmitColumns];
  for (int c = 0; c < kEmitColumns; ++c) nulls[c] = isnull[c] ? 'n' : ' ';
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  if (insert_plan == nullptr) {
    // Schema-qualified, so the plan means the same whatever the caller's
    // search_path; the plan cache re-plans it if the table is recreated.
    Oid types[kEmitColumns] = {UUIDOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID, TIMESTAMPTZOID};
    SPIPlanPtr plan = SPI_prepare(kInsertStatement, kEmitColumns, types);
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

bool InsertEvent(const Datum *values, const bool *isnull, Oid writer) {
  // What the executor checks before an INSERT, in the same words.
  PreventCommandIfReadOnly("INSERT");
  PreventCommandIfParallelMode("INSERT");
  // As the writer from here on (see the header), in a security-restricted
  // operation as REFRESH MATERIALIZED VIEW runs its owner's code: nothing
  // the INSERT runs can outlive the call to run as the caller (no temporary
  // objects, no deferred triggers, no SET ROLE). An ERROR below leaves it to
  // the abort to switch back.
  Oid caller = InvalidOid;
  int caller_context = 0;
  GetUserIdAndSecContext(&caller, &caller_context);
  SetUserIdAndSecContext(
      writer, caller_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
  const TimestampTz at = DatumGetTimestampTz(values[kColCreatedAt]);
  // Prepared on both paths: it refuses to write while outbox.events or the
  // partition would run code that is not built in (writer_code_rule.hpp).
  InsertCache *cache = PrepareInsertCache(at);  // nullptr: the SPI path
  // The INSERT privilege on outbox.events, as the INSERT's executor checks
  // it; column privileges alone take the INSERT, which checks those.
  const bool direct = guc::emit_direct_insert && cache != nullptr &&
                      pg_class_aclcheck(cache->parent, writer, ACL_INSERT) == ACLCHECK_OK;
  if (direct) {
    InsertDirect(cache, values, isnull);
  } else {
    // SPI checks privileges and parses its statement: with search_path
    // pinned.
    const int level = PinSearchPath();
    InsertThroughSpi(values, isnull);
    UnpinSearchPath(level);
  }
  SetUserIdAndSecContext(caller, caller_context);
  return direct;
}

}  // namespace outbox
