// How emit() writes its row: straight into the day's partition of
// outbox.events (heap insert plus index entries), without building an
// executor per call.
//
// Why: an INSERT through SPI sets up a whole executor for one row every time
// (plan cache check, tuple routing, the status CHECK constraint read back and
// compiled, every partial-index predicate compiled), which cost emit() about
// 3x a plain INSERT (bench/README.md, "Observations"). Here that work is done
// once per backend and kept until the tables it was derived from change (a
// relcache invalidation of outbox.events, the partition or one of its indexes).
//
// The direct path is taken only when it writes exactly what the INSERT would:
// the table is the extension's own layout (no extra columns, CHECK
// constraints, row triggers, rules or row security on it, generated columns),
// every index is an immediate btree or hash index, and the row's values
// satisfy the columns' NOT NULL constraints. Anything else, or
// outbox.emit_direct_insert = off, takes the SPI INSERT, which is always
// correct. Both paths check the INSERT privilege on outbox.events and refuse
// read-only and parallel transactions the same way.
#pragma once

#include "pg_bridge.hpp"

namespace outbox {

// The columns emit() supplies, in this order (the rest take their defaults:
// status 'pending', attempts 0, the others NULL).
enum EventColumn {
  kColId,
  kColTopic,
  kColKey,
  kColPayload,
  kColHeaders,
  kColCreatedAt,
  kEmitColumns
};

// Insert one event. values/isnull are indexed by EventColumn; created_at must
// not be null. Called in a transaction, from emit(); may ereport. Returns
// whether the direct path was taken (false: it went through SPI).
bool InsertEvent(const Datum *values, const bool *isnull);

}  // namespace outbox
