// emit()'s write: the direct insert into the day's partition, and the SPI
// INSERT it falls back to. See event_insert.hpp for why and when.
//
// What the direct write knows of the partition (which one takes the current
// time, where each column sits, the defaults' values, its CHECK constraints
// and indexes) is the per-backend cache of insert_cache.hpp, trusted only
// while the locks that freeze what it describes are held: PrepareInsertCache
// takes them, as an INSERT would, before the write reads it.
//
// What the INSERT does that the direct write must do the same way:
// - Defaults. The INSERT takes outbox.events' defaults for the columns
//   emit() does not supply; the cache holds the value of each constant one,
//   and any other default takes the INSERT (insert_cache.cpp).
// - NOT NULL, then the CHECK constraints, in the partition's order, as
//   ExecConstraints does after routing. A NULL for a NOT NULL column and a
//   CHECK that refuses the row both take the SPI INSERT, which raises
//   PostgreSQL's own error (and SQLSTATE, and DETAIL). A CHECK that refuses is
//   thus evaluated twice, here and in the INSERT, which cannot be seen: the
//   rule (writer_code_rule.hpp) lets a CHECK call only immutable built-in
//   functions.
//   Planning a CHECK can fail (1/0, folded): like ExecRelCheck, the direct
//   write compiles them when the first row gets past NOT NULL, not when the
//   cache is built, so that error comes where the INSERT raises it.
// - Errors. An error the direct write raises where the INSERT would raise it
//   too (a CHECK that fails to plan or to evaluate, a unique violation)
//   carries the context line SPI adds to the INSERT's, so the two read the
//   same.
//
// Invariants: no C++ object with a destructor anywhere in this file (every
// function here may ereport); what the write compiles (the CHECK
// constraints) goes into the cache's EState, in the cache's memory context.
#include "emit/event_insert.hpp"

#include "guc.hpp"
#include "emit/insert_cache.hpp"
#include "emit/writer_search_path.hpp"

extern "C" {
#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "utils/acl.h"
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

// Compile the CHECK constraints, all of them, as ExecRelCheck does for the
// first row that gets past NOT NULL: planning one can raise an error
// (constant folding, 1/0), which must come where the INSERT raises it, not
// when the cache is built. Returns false if an earlier attempt raised one:
// then the INSERT raises its own error, in its own order, every time (and
// this does not leak another partial compilation into cache.context).
bool CompileChecks(InsertCache *cache) {
  if (cache->checks_compiled) return true;
  if (cache->checks_compiling) return false;
  cache->checks_compiling = true;
  for (int i = 0; i < cache->nchecks; ++i) {
    cache->checks[i].state = ExecPrepareExpr(cache->checks[i].expr, cache->estate);
  }
  cache->checks_compiled = true;
  return true;
}

// Whether every CHECK constraint holds for the row in cache.slot, evaluated
// in ExecRelCheck's order and way (NULL is a pass); stops at the first that
// refuses it, as ExecRelCheck does, so an error from a later one is raised
// only where the INSERT raises it too. With search_path pinned while any is
// compiled or evaluated (those of the extension's table hold for every row
// once they held for one: after the first row this costs nothing).
bool ChecksHold(InsertCache *cache, ExprContext *econtext) {
  bool all_held = cache->checks_compiled;
  for (int i = 0; all_held && i < cache->nchecks; ++i) all_held = cache->checks[i].held;
  if (all_held) return true;
  const int level = PinSearchPath();
  bool holds = CompileChecks(cache);
  for (int i = 0; holds && i < cache->nchecks; ++i) {
    CheckPlan &plan = cache->checks[i];
    if (plan.held) continue;
    holds = ExecCheck(plan.state, econtext);
    if (holds) plan.held = plan.constant;
  }
  UnpinSearchPath(level);
  return holds;
}

// Index entries for the row in cache.slot, just written to `part` at `tid`,
// as ExecInsertIndexTuples makes them, for the indexes whose predicate the
// row satisfies (emit's row: the ready index only). An index is opened and
// locked only when it gets an entry.
void InsertIndexEntries(const InsertCache &cache, Relation part, ItemPointer tid,
                        ExprContext *econtext) {
  for (int i = 0; i < cache.nindexes; ++i) {
    const IndexPlan &plan = cache.indexes[i];
    if (!plan.info->ii_ReadyForInserts) continue;
    if (plan.predicate != nullptr && !ExecQual(plan.predicate, econtext)) continue;
    Relation index = index_open(plan.oid, RowExclusiveLock);
    Datum key[INDEX_MAX_KEYS];
    bool key_null[INDEX_MAX_KEYS];
    FormIndexDatum(plan.info, cache.slot, cache.estate, key, key_null);
    index_insert(index, key, key_null, tid, part, plan.unique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
                 false, plan.info);
    index_close(index, NoLock);
  }
}

// Write the row straight into the partition, or return false, having
// written nothing, when a CHECK constraint refuses it (the INSERT then
// reports which one).
bool InsertDirect(InsertCache *cache, const Datum *values, const bool *isnull) {
  ErrorContextCallback context = {error_context_stack, InsertStatementContext, nullptr};
  error_context_stack = &context;
  Relation part = table_open(cache->partition, NoLock);  // locked by PrepareInsertCache
  const int natts = cache->desc->natts;
  Datum row[kMaxAttributes];
  bool nulls[kMaxAttributes];
  for (int a = 0; a < natts; ++a) nulls[a] = true;
  for (int c = 0; c < kEmitColumns; ++c) {
    row[cache->attnum[c]] = values[c];
    nulls[cache->attnum[c]] = isnull[c];
  }
  for (int c = kStatus; c < kTableColumns; ++c) {
    row[cache->attnum[c]] = cache->value[c];
    nulls[cache->attnum[c]] = cache->value_null[c];
  }

  HeapTuple tuple = heap_form_tuple(cache->desc, row, nulls);
  // The slot shows the partition as the row's tableoid, which a CHECK may
  // read, as the INSERT's slot does before ExecConstraints.
  tuple->t_tableOid = cache->partition;
  ExecStoreHeapTuple(tuple, cache->slot, false);
  ExprContext *econtext = GetPerTupleExprContext(cache->estate);
  econtext->ecxt_scantuple = cache->slot;
  const bool holds = ChecksHold(cache, econtext);
  if (holds) {
    heap_insert(part, tuple, GetCurrentCommandId(true), 0, nullptr);
    ExecStoreHeapTuple(tuple, cache->slot, false);  // again: with the t_self just set
    InsertIndexEntries(*cache, part, &tuple->t_self, econtext);
  }
  ExecClearTuple(cache->slot);
  ResetExprContext(econtext);
  heap_freetuple(tuple);
  table_close(part, NoLock);
  error_context_stack = context.previous;
  return holds;
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
  bool direct = guc::emit_direct_insert && cache != nullptr &&
                pg_class_aclcheck(cache->parent, writer, ACL_INSERT) == ACLCHECK_OK;
  // A NULL in a NOT NULL column: the INSERT reports it (ExecConstraints
  // checks NOT NULL before any CHECK constraint).
  for (int c = 0; direct && c < kEmitColumns; ++c) direct = !(isnull[c] && cache->not_null[c]);
  // A CHECK constraint refusing the row: the INSERT reports which one.
  direct = direct && InsertDirect(cache, values, isnull);
  if (!direct) {
    // SPI checks column privileges, NOT NULL, CHECK and everything else
    // itself, and parses its statement: with search_path pinned.
    const int level = PinSearchPath();
    InsertThroughSpi(values, isnull);
    UnpinSearchPath(level);
  }
  SetUserIdAndSecContext(caller, caller_context);
  return direct;
}

}  // namespace outbox
