// Telling the DBA at CREATE time: a statement that leaves on outbox.events,
// or on one of its partitions, anything emit() refuses to run
// (writer_code_rule.hpp) is refused with the message emit() would raise,
// rather than accepted until every application's emit() fails (and the
// publisher runs it as the owner of outbox.events when it updates events).
// Outbox's own maintenance only gets a WARNING.
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "nodes/nodes.h"
}

namespace outbox {

// Called by the ProcessUtility hook after `stmt` ran, in its transaction:
// an ERROR (the refusal emit() would raise, SQLSTATE 42501; a WARNING in
// outbox's own workers) when `stmt`
// (CREATE TRIGGER, CREATE INDEX, CREATE RULE, CREATE/ALTER POLICY, ALTER
// TABLE, CREATE TABLE ... PARTITION OF) left outbox.events or a partition
// of it so that emit() refuses to write. Looks only at statements on those
// relations.
void RefuseDdlEmitWouldRefuse(Node *stmt);

// Called by the ProcessUtility hook before `stmt` runs: raises 42501, as
// PostgreSQL would, when `stmt` names one of outbox's relations and the
// current user may not do that to it: "must be owner of table ..." for
// CREATE TRIGGER, CREATE RULE, CREATE TABLE ... PARTITION OF / INHERITS,
// ALTER TABLE ... ATTACH / DETACH PARTITION or INHERIT naming it, and ALTER
// INDEX / MATERIALIZED VIEW / TRIGGER ... DEPENDS ON EXTENSION on it;
// "permission denied for table ..." for a foreign key referencing it
// (CREATE TABLE or ALTER TABLE, without the REFERENCES privilege).
// PostgreSQL takes those statements' locks (exclusive or share row
// exclusive ones) before it checks who may: a role refused anyway would
// otherwise queue a lock on outbox.events, and every emit() and claim behind
// it, for as long as another session of its holds a weaker one.
void RefuseLockingDdlOfNonOwners(Node *stmt);

// Called by the ProcessUtility hook before `stmt` runs: raises 42501 when
// `stmt` is CREATE INDEX CONCURRENTLY on outbox.events or below it with an
// expression, a predicate or a named operator class. Such a statement
// commits the index before it returns, so RefuseDdlEmitWouldRefuse could
// only refuse it once emit() and the publisher already ran its code.
void RefuseConcurrentIndexWithCode(Node *stmt);

// Called by the ProcessUtility hook before `stmt` runs: raises 42501 when
// `stmt` is ALTER TABLE ... INHERIT or ADD CONSTRAINT ... EXCLUDE on one of
// outbox's tables, or makes a table inherit from one (CREATE TABLE ...
// INHERITS, ALTER TABLE ... INHERIT): a parent table's privileges would
// reach their rows, a child's rows and triggers would be reached by outbox's
// statements, and an exclusion constraint builds an index (running its code
// as the tables' owner) inside ALTER TABLE, where RefuseIndexCodeBeforeBuild
// never sees it.
void RefuseAlterTableOfOutboxTables(Node *stmt);

// Called by the ProcessUtility hook before `stmt` runs: when `stmt` is
// CREATE INDEX (not CONCURRENTLY) on outbox.events, below it, or on
// outbox's other tables, with an expression, a predicate or a named
// operator class, takes the lock PostgreSQL takes next (after its owner
// check), parses the index as PostgreSQL will, and raises 42501 when it is
// not built-in code: its build would run that code as the tables' owner
// before RefuseDdlEmitWouldRefuse could refuse it.
void RefuseIndexCodeBeforeBuild(Node *stmt, const char *query_string);

// Called by the ProcessUtility hook before `stmt` runs: raises 42501 when
// `stmt` is CREATE STATISTICS on expressions of outbox.events or of a
// relation below it, which ANALYZE (autovacuum's too) would compute as the
// owner of outbox.events, whatever code they call.
void RefuseStatisticsOnExpressions(Node *stmt);

// Called by the ProcessUtility hook after `stmt` ran, in its transaction:
// when `stmt` changed who owns functions or who is a superuser (ALTER
// FUNCTION / PROCEDURE / ROUTINE ... OWNER TO, REASSIGN OWNED, ALTER ROLE
// ... NOSUPERUSER) or made an event trigger, raises 42501 if a trigger on
// outbox.events or below it, or an event trigger, now calls a function a
// role that is no superuser owns: the publisher runs those as the owner of
// outbox.events (event triggers fire in its partition maintenance). Sees
// this database only.
void RefuseTriggerFunctionsGivenAway(Node *stmt);

}  // namespace outbox
