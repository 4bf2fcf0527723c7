// The per-backend cache behind emit()'s direct insert (event_insert.hpp):
// which partition of outbox.events takes the current time and the range of
// times it covers, where each column sits in its rows, the values
// outbox.events' defaults give the columns emit() does not supply, its CHECK
// constraints and each index's IndexInfo with its predicate compiled: what an
// INSERT's executor would otherwise derive on every call. Built by
// PrepareInsertCache, kept until a relcache invalidation says what it
// describes changed (insert_cache.cpp says how), and used by the write
// (event_insert.cpp).
#pragma once

#include "pg_bridge.hpp"

#include "emit/event_insert.hpp"

extern "C" {
#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "nodes/execnodes.h"
#include "utils/palloc.h"
}

namespace outbox {

// Every column of outbox.events: EventColumn's six, then the ones emit()
// leaves to outbox.events' defaults.
enum TableColumn {
  kStatus = kEmitColumns,
  kAttempts,
  kPublishedAt,
  kLastError,
  kNextAttemptAt,
  kTableColumns
};

// More than this many indexes or columns on the partition: SPI path. Ours
// has 4 indexes and 11 columns.
constexpr int kMaxIndexes = 16;
constexpr int kMaxAttributes = 64;

// A CHECK constraint of the partition. `state`: `expr` compiled as
// ExecRelCheck compiles it, when the first row gets to it (nullptr before).
// `constant`: it reads only columns whose value is the same in every row the
// cache writes (the defaulted ones, tableoid) and calls only immutable
// functions, so once it has held for one row it holds for all (`held`).
struct CheckPlan {
  Expr *expr;
  ExprState *state;
  bool constant;
  bool held;
};

struct IndexPlan {
  Oid oid;
  IndexInfo *info;       // BuildIndexInfo's, in cache.context
  ExprState *predicate;  // compiled partial-index predicate; nullptr: none
  bool unique;
};

// What a cache built by Prepare depends on beyond its own relations, to be
// matched by invalidation callbacks, which cannot look anything up: up to
// kMaxWatched entries in cache.context, beyond that everything matches.
template <typename T>
struct WatchList {
  static constexpr int kMaxWatched = 64;
  int count = 0;
  T *items = nullptr;
  bool all = false;

  void Reset() {
    count = 0;
    items = nullptr;
    all = false;
  }
  void Add(MemoryContext context, const T &item) {
    if (items == nullptr) {
      items = static_cast<T *>(MemoryContextAlloc(context, kMaxWatched * sizeof(T)));
    }
    if (count < kMaxWatched) {
      items[count++] = item;
    } else {
      all = true;
    }
  }
  bool Matches(const T &item) const {
    for (int i = 0; !all && i < count; ++i) {
      if (items[i] == item) return true;
    }
    return all;
  }
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
  TupleTableSlot *slot = nullptr;  // over `desc`: the row, for CHECKs and indexes
  EState *estate = nullptr;        // for CHECKs, predicates and index expressions only
  int attnum[kTableColumns];       // 0-based position of each column in `desc`
  // The value outbox.events' default gives each column emit() does not
  // supply (indexes kStatus and up; NULL when it has none).
  Datum value[kTableColumns];
  bool value_null[kTableColumns];
  bool not_null[kEmitColumns];  // NOT NULL on a supplied column: a NULL one takes SPI
  int nchecks = 0;
  CheckPlan *checks = nullptr;  // in the partition's order (ExecRelCheck's)
  bool checks_compiled = false;
  bool checks_compiling = false;  // true and not compiled: compiling them failed
  int nindexes = 0;
  IndexPlan indexes[kMaxIndexes];
  // Every index RefuseCodeNotBuiltIn looked at, which includes every index
  // in `indexes` (Inspect may stop before it reaches them all), and every
  // partition below outbox.events it looked at when the INSERT routes: a
  // change to one must make it look again.
  WatchList<Oid> watched_relations;
};

// Make the backend's cache describe the partition taking `at`, with the
// locks an INSERT takes held (RowExclusiveLock on outbox.events and the
// partition). Returns the cache when the direct path may be used, nullptr
// when the row must take the SPI INSERT. Called on both paths, in a
// transaction, as the writer: it refuses (42501) to write while
// outbox.events or a partition the row can reach would run code that is not
// built in (writer_code_rule.hpp). May ereport. The cache it returns holds
// only while those locks do: use it in this call's transaction, and call
// again for the next row (an invalidation may rebuild it then).
InsertCache *PrepareInsertCache(TimestampTz at);

}  // namespace outbox
