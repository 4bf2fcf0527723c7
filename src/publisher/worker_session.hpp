// The session every outbox background worker (launcher and publishers) runs
// in: settings pinned so that what a database owner, a role or the server's
// defaults say cannot change what the workers' statements mean or do.
#pragma once

#include "pg_bridge.hpp"

namespace outbox {

// Pin, for the rest of this process, at the highest priority
// (PGC_S_OVERRIDE: beats postgresql.conf, ALTER SYSTEM, ALTER DATABASE/ROLE
// SET and SET):
// - search_path = pg_catalog, pg_temp: no name or operator in the workers'
//   SQL resolves to anything another role created;
// - READ COMMITTED, read-write, not deferrable: every statement takes a
//   fresh snapshot (the claims' correctness argument and maintenance's
//   lock-then-recount depend on it), whatever default_transaction_isolation
//   the server or database has;
// - no statement_timeout, lock_timeout, idle_in_transaction_session_timeout
//   (or transaction_timeout): the workers bound their own waits (maintenance
//   sets its own lock timeout per step), and a server-wide timeout must not
//   turn every cycle into an error;
// - session_replication_role = origin: the counting triggers always fire;
// and, before those, every setting the database's owner could have chosen
// (ALTER DATABASE ... SET of a setting any user may set: role, work_mem, the
// planner's and JIT's, exit_on_error, ...) goes back to its built-in
// default, logged at DEBUG1: a database owner must not be able to make the
// workers run as another role, fail, or burn CPU.
// Call after the database connection is initialised.
void PinWorkerSettings();

// The second part alone (PinWorkerSettings calls it).
void DiscardDatabaseSettings();

}  // namespace outbox
