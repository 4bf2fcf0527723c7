#include "hooks/restored_partition.hpp"

#include "core/partition_calendar.hpp"
#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/dependency.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_namespace.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

namespace outbox {

namespace {

// Whether the relation holds any tuple at all, live or dead (SnapshotAny):
// a partition that ever held a row is never taken for a fresh one.
bool HoldsNoRowVersion(Relation rel) {
  TableScanDesc scan = table_beginscan(rel, SnapshotAny, 0, nullptr);
  const bool empty = heap_getnext(scan, ForwardScanDirection) == nullptr;
  table_endscan(scan);
  return empty;
}

}  // namespace

void MakeRoomForRestoredPartition(const CreateStmt *stmt) {
  const RangeVar *target = stmt->relation;
  if (target == nullptr || stmt->if_not_exists || target->schemaname == nullptr ||
      strcmp(target->schemaname, "outbox") != 0 || !ParsePartitionName(target->relname)) {
    return;
  }
  const Oid schema = get_namespace_oid("outbox", true);
  if (!OidIsValid(schema)) return;
  const Oid events = get_relname_relid("events", schema);
  const Oid existing = get_relname_relid(target->relname, schema);
  if (!OidIsValid(events) || !OidIsValid(existing)) return;
  // Nothing, not even a lock, for a role PostgreSQL would refuse this
  // CREATE TABLE or the DROP it stands for: it must be able to create in
  // the schema and own both the partition and outbox.events (as DROP TABLE
  // and the dump's ATTACH PARTITION require). Checked on the catalog before
  // any lock; the checks are made again under the locks below.
  if (!CurrentUserMayCreateInSchema(schema) || !CurrentUserOwnsRelation(events) ||
      !CurrentUserOwnsRelation(existing)) {
    return;
  }
  // As DROP TABLE would lock it: the parent first, then the partition.
  LockRelationOid(events, AccessExclusiveLock);
  Relation rel = table_open(existing, AccessExclusiveLock);
  const bool ours = rel->rd_rel->relkind == RELKIND_RELATION && rel->rd_rel->relispartition &&
                    get_partition_parent(existing, true) == events &&
                    CurrentUserOwnsRelation(existing) && HoldsNoRowVersion(rel);
  table_close(rel, NoLock);
  if (!ours) return;
  ereport(LOG, (errmsg("outbox: empty partition outbox.%s gives way to the one being restored",
                       target->relname)));
  ObjectAddress address;
  address.classId = RelationRelationId;
  address.objectId = existing;
  address.objectSubId = 0;
  // Its triggers and statistics go with it (they depend on it automatically).
  performDeletion(&address, DROP_RESTRICT, 0);
  CommandCounterIncrement();
}

void MoveDefaultRowsBeforeRestoredAttach(const AlterTableStmt *stmt) {
  const RangeVar *parent = stmt->relation;
  if (parent == nullptr || stmt->objtype != OBJECT_TABLE || parent->schemaname == nullptr ||
      strcmp(parent->schemaname, "outbox") != 0 || strcmp(parent->relname, "events") != 0 ||
      list_length(stmt->cmds) != 1) {
    return;
  }
  const AlterTableCmd *cmd = static_cast<const AlterTableCmd *>(linitial(stmt->cmds));
  if (cmd->subtype != AT_AttachPartition || cmd->def == nullptr || !IsA(cmd->def, PartitionCmd)) {
    return;
  }
  const RangeVar *part = castNode(PartitionCmd, cmd->def)->name;
  // Only a name qualified as the dump writes it: an unqualified one is
  // looked up along search_path, and may not be outbox's table.
  if (part == nullptr || part->relname == nullptr || part->schemaname == nullptr ||
      strcmp(part->schemaname, "outbox") != 0) {
    return;
  }
  const std::optional<int64_t> day = ParsePartitionName(part->relname);
  if (!day) return;
  const Oid schema = get_namespace_oid("outbox", true);
  if (!OidIsValid(schema)) return;
  const Oid events = get_relname_relid("events", schema);
  const Oid table = get_relname_relid(part->relname, schema);
  const Oid fallback = get_relname_relid("events_default", schema);
  if (!OidIsValid(events) || !OidIsValid(table) || !OidIsValid(fallback)) return;
  // Only for a role the ATTACH itself would be allowed to (it owns both
  // tables), before any lock; and only for a table not yet a partition,
  // beside a default partition that is outbox.events'.
  if (!CurrentUserOwnsRelation(events) || !CurrentUserOwnsRelation(table) ||
      !CurrentUserOwnsRelation(fallback) || get_rel_relkind(table) != RELKIND_RELATION ||
      get_rel_relispartition(table) || !get_rel_relispartition(fallback) ||
      get_partition_parent(fallback, true) != events) {
    return;
  }
  char from[kPartitionNameBufSize], to[kPartitionNameBufSize];
  FormatDayStartLiteral(*day, from);
  FormatDayStartLiteral(*day + 1, to);
  const char *qname = quote_identifier(part->relname);
  // Locks in the order ATTACH and partition maintenance take them: outbox.events
  // SHARE UPDATE EXCLUSIVE (what ATTACH takes on it), then the default
  // partition. Taking the default partition first would deadlock with a
  // maintenance run that holds outbox.events and reads the default partition.
  // AccessExclusive on the default partition only (as maintenance moves
  // rows): an emit() of another day is not held up; ATTACH takes the same
  // lock right after, for its check of the default partition.
  LockRelationOid(events, ShareUpdateExclusiveLock);
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  if (SPI_execute("LOCK TABLE outbox.events_default IN ACCESS EXCLUSIVE MODE", false, 0) < 0) {
    elog(ERROR, "outbox: could not lock outbox.events_default");
  }
  const char *move = psprintf(
      "WITH moved AS (DELETE FROM outbox.events_default WHERE created_at "
      "OPERATOR(pg_catalog.>=) '%s'::pg_catalog.timestamptz AND created_at "
      "OPERATOR(pg_catalog.<) '%s'::pg_catalog.timestamptz RETURNING *) "
      "INSERT INTO outbox.%s SELECT * FROM moved",
      from, to, qname);
  if (SPI_execute(move, false, 0) != SPI_OK_INSERT) {
    elog(ERROR, "outbox: could not move events into outbox.%s", part->relname);
  }
  const uint64 moved = SPI_processed;
  SPI_finish();
  if (moved > 0) {
    // Never-tried events moved get new index entries with their old ids,
    // which a publisher's claims may have passed already.
    ResetClaimFloorsAtCommit();
    ereport(LOG, (errmsg("outbox: moved %llu event(s) emitted during the restore from "
                         "outbox.events_default into outbox.%s, which is being attached",
                         static_cast<unsigned long long>(moved), part->relname)));
  }
}

bool MadeByAttachingRestoredPartition(const IndexStmt *stmt) {
  const RangeVar *table = stmt->relation;
  if (table == nullptr || stmt->idxname == nullptr || stmt->if_not_exists ||
      table->schemaname == nullptr || strcmp(table->schemaname, "outbox") != 0 ||
      !ParsePartitionName(table->relname)) {
    return false;
  }
  const Oid schema = get_namespace_oid("outbox", true);
  if (!OidIsValid(schema)) return false;
  const Oid events = get_relname_relid("events", schema);
  const Oid partition = get_relname_relid(table->relname, schema);
  const Oid index = get_relname_relid(stmt->idxname, schema);
  if (!OidIsValid(events) || !OidIsValid(partition) || !OidIsValid(index)) return false;
  if (!get_rel_relispartition(partition) || get_partition_parent(partition, true) != events) {
    return false;
  }
  // Only for whoever could have created it (others get PostgreSQL's error).
  if (!CurrentUserOwnsRelation(partition)) return false;
  if (IndexGetRelation(index, true) != partition || !get_rel_relispartition(index)) return false;
  const Oid parent_index = get_partition_parent(index, true);
  if (IndexGetRelation(parent_index, true) != events) return false;
  ereport(DEBUG1, (errmsg("outbox: index outbox.%s exists already (made when its partition was "
                          "attached); the restored CREATE INDEX is skipped",
                          stmt->idxname)));
  return true;
}

}  // namespace outbox
