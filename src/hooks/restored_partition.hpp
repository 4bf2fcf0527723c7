// pg_restore and psql replaying a dump of a database with outbox: the dump
// creates every partition maintain() made (CREATE TABLE outbox.events_p...,
// then ATTACH), but CREATE EXTENSION in the new database, and its publisher,
// made partitions for the days around today already, under the same names.
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "nodes/parsenodes.h"
}

namespace outbox {

// Called for every CREATE TABLE before it runs. When it creates
// outbox.events_pYYYYMMDD and a partition of that name exists, is a
// partition of outbox.events, holds no row version at all, and belongs to
// the current user, that partition is dropped first, so that the dump's
// table (with its rows, triggers and statistics) takes its place. Anything
// else is left for CREATE TABLE to report, as it would without outbox.
void MakeRoomForRestoredPartition(const CreateStmt *stmt);

// Called for every ALTER TABLE before it runs. When it is the dump's ALTER
// TABLE outbox.events ATTACH PARTITION outbox.events_pYYYYMMDD, by a role
// that owns outbox.events, that table and the default partition, and the
// table is not a partition yet: events emitted for that day since its empty
// partition gave way (MakeRoomForRestoredPartition) landed in
// outbox.events_default, and would make the ATTACH fail (leaving the
// restored events outside outbox.events); they are moved into the table
// first. Takes no lock and does nothing for anyone else.
void MoveDefaultRowsBeforeRestoredAttach(const AlterTableStmt *stmt);

// Called for every CREATE INDEX before it runs: true when it is the dump's
// CREATE INDEX for an index that attaching the restored partition made
// already (outbox.events' indexes exist before the dump's tables, being the
// extension's, so ATTACH PARTITION builds each partition's index under the
// name the dump uses; the dump's ALTER INDEX ... ATTACH PARTITION that
// follows finds it attached). The statement is then skipped.
bool MadeByAttachingRestoredPartition(const IndexStmt *stmt);

}  // namespace outbox
