// outbox.home and outbox.publish_here() (see database_home.hpp).
#include "catalog/database_home.hpp"

#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"
#include "catalog/sink_catalog.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
}

namespace outbox {

Home HomeOfOutbox(Oid *from) {
  *from = InvalidOid;
  const Oid schema = get_namespace_oid("outbox", true);
  const Oid relid = OidIsValid(schema) ? get_relname_relid("home", schema) : InvalidOid;
  if (!OidIsValid(relid)) return Home::kUnrecorded;
  Relation rel = table_open(relid, AccessShareLock);
  if (rel->rd_rel->relkind != RELKIND_RELATION || RelationGetDescr(rel)->natts < 1 ||
      TupleDescAttr(RelationGetDescr(rel), 0)->atttypid != OIDOID) {
    table_close(rel, AccessShareLock);
    return Home::kCopy;  // not the table outbox made: publish nothing
  }
  TableScanDesc scan = table_beginscan(rel, GetActiveSnapshot(), 0, nullptr);
  HeapTuple tuple = heap_getnext(scan, ForwardScanDirection);
  if (tuple != nullptr) {
    bool isnull = false;
    const Datum d = heap_getattr(tuple, 1, RelationGetDescr(rel), &isnull);
    if (!isnull) *from = DatumGetObjectId(d);
  }
  table_endscan(scan);
  table_close(rel, AccessShareLock);
  return *from == MyDatabaseId ? Home::kHome : Home::kCopy;
}

}  // namespace outbox

using namespace outbox;

// outbox.publish_here(): this database's events are its own from now on
// (a copy made with CREATE DATABASE ... TEMPLATE starts without a
// publisher). For superusers and the extension owner.
OUTBOX_SQL_FUNCTION(outbox_publish_here) {
  AdminScope admin;
  ConnectAsSinkAdmin(fcinfo, "publish from this database", &admin);
  Oid from = InvalidOid;
  if (HomeOfOutbox(&from) != Home::kCopy) {
    FinishAsSinkAdmin(admin);
    ereport(NOTICE, (errmsg("outbox already publishes from database \"%s\"",
                            get_database_name(MyDatabaseId))));
    PG_RETURN_VOID();
  }
  Oid types[1] = {OIDOID};
  Datum values[1] = {ObjectIdGetDatum(MyDatabaseId)};
  RunCatalogStatement("DELETE FROM outbox.home", 0, nullptr, nullptr, nullptr, false);
  RunCatalogStatement("INSERT INTO outbox.home (database) VALUES ($1)", 1, types, values, nullptr,
                      false);
  FinishAsSinkAdmin(admin);
  // The launcher looks at the database again once this commits, and the
  // publisher it starts finds the database home.
  AnnounceExtensionAtCommit();
  ereport(LOG, (errmsg("outbox: database \"%s\" publishes its own events from now on",
                       get_database_name(MyDatabaseId)),
                errdetail("It was a copy of database OID %u.", from)));
  PG_RETURN_VOID();
}
