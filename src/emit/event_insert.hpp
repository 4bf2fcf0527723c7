// How emit() writes its row: straight into the day's partition of
// outbox.events (heap insert plus index entries), without building an
// executor per call.
//
// Why: an INSERT through SPI sets up a whole executor for one row every time
// (plan cache check, tuple routing, the defaults and CHECK constraints read
// back and compiled, every partial-index predicate compiled), which cost
// emit() about 3x a plain INSERT (bench/README.md, "Observations"). Here that
// work is done once per backend and kept until the tables it was derived
// from change (a relcache invalidation of outbox.events, the partition or one
// of its indexes).
//
// The direct path is taken only when it writes exactly what the INSERT would:
// - the table is the extension's own layout (no extra columns, no columns of
//   another type, no generated columns), and every index is an immediate
//   btree or hash index (the rule of writer_code_rule.hpp, which both paths
//   keep, leaves only built-in immutable functions in their expressions);
// - each column emit() does not supply (status, attempts, published_at,
//   last_error, next_attempt_at) has, on outbox.events (whose defaults the
//   INSERT takes, not the partition's), no default or a constant one, which
//   is then written as is, NULL only where the partition allows NULL;
// - the row's values satisfy the partition's NOT NULL constraints, and every
//   CHECK constraint of the partition, whatever its name and NOT VALID or
//   not, holds for the row: the constraints are compiled once per cache and
//   evaluated here before the row is written, and only those made of
//   built-in functions that are not volatile (a constraint that refuses the
//   row is evaluated again by the INSERT, which must not be seen).
// Anything else, or outbox.emit_direct_insert = off, takes the SPI INSERT,
// which is always correct; a row a constraint refuses too, so the error is
// PostgreSQL's own (message, SQLSTATE, DETAIL). An error both would raise
// (a CHECK that fails to evaluate, a unique violation) reads the same both
// ways, context line included. Both paths check the INSERT privilege on
// outbox.events and refuse read-only and parallel transactions the same way.
#pragma once

#include "pg_bridge.hpp"

namespace outbox {

// The columns emit() supplies, in this order (the rest take outbox.events'
// defaults, as the extension makes it: status 'pending', attempts 0, the
// others NULL).
enum EventColumn {
  kColId,
  kColTopic,
  kColKey,
  kColPayload,
  kColHeaders,
  kColCreatedAt,
  kEmitColumns
};

// Insert one event as `writer` (emit()'s owner: what SECURITY DEFINER would
// switch to; the caller's user is back on return, and on an error the
// (sub)transaction's abort restores it). values/isnull are indexed by
// EventColumn; created_at must not be null. Called in a transaction, from
// emit(); may ereport. Returns whether the direct path was taken (false: it
// went through SPI).
//
// Why not SECURITY DEFINER with SET search_path on the SQL function:
// fmgr_security_definer builds its cache for every statement that calls the
// function and sets search_path twice per call, about 14 us of the 25 us an
// emit() statement cost (bench/README.md). The user switch is two variable
// writes here, in a security-restricted operation (as REFRESH MATERIALIZED
// VIEW runs its owner's code); search_path is pinned only where a name could
// be resolved: around the SPI INSERT, around loading the partition's indexes
// and constraints into the cache, and around CHECK constraints not yet known
// to hold. On both paths, emit() refuses (42501) to write while outbox.events
// or a partition the row can reach would run code that is not built in or
// outbox's own: see writer_code_rule.hpp.
bool InsertEvent(const Datum *values, const bool *isnull, Oid writer);

}  // namespace outbox
