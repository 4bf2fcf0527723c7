#include "restored_partition.hpp"

#include "core/partition_calendar.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/dependency.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
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
