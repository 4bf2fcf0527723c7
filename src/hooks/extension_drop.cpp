#include "hooks/extension_drop.hpp"

#include "catalog/events_owner.hpp"
#include "subtransaction.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
}

namespace outbox {

namespace {

// Inside a transaction; the caller holds a subtransaction open for it.
DroppedEvents CountAsEventsOwner() {
  DroppedEvents dropped;
  OwnerScope owner;
  EnterExtensionOwner(&owner);
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  if (SPI_execute("SELECT (SELECT pg_catalog.count(*) FROM outbox.events WHERE status "
                  "OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text), "
                  "(SELECT pg_catalog.count(*) FROM outbox.events WHERE status "
                  "OPERATOR(pg_catalog.=) 'dead'::pg_catalog.text)",
                  true, 1) == SPI_OK_SELECT &&
      SPI_processed == 1) {
    bool isnull = false;
    dropped.pending =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    dropped.dead =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
    dropped.counted = true;
  }
  SPI_finish();
  LeaveExtensionOwner(owner);
  return dropped;
}

}  // namespace

DroppedEvents CountEventsDroppedWith(const DropStmt *stmt) {
  DroppedEvents dropped;
  if (stmt->removeType != OBJECT_EXTENSION) return dropped;
  bool names_outbox = false;
  ListCell *cell;
  foreach (cell, stmt->objects) {
    const Node *object = static_cast<const Node *>(lfirst(cell));
    if (IsA(object, String) && strcmp(strVal(object), "outbox") == 0) names_outbox = true;
  }
  const Oid extension = get_extension_oid("outbox", true);
  if (!names_outbox || !OidIsValid(extension) || !CurrentUserOwnsExtension(extension)) {
    return dropped;
  }
  // Counting must never make the DROP fail: only a table that is there.
  const Oid schema = get_namespace_oid("outbox", true);
  const Oid events = OidIsValid(schema) ? get_relname_relid("events", schema) : InvalidOid;
  if (!OidIsValid(events)) return dropped;
  // The three partial indexes of unpublished events answer this without
  // reading published ones (AccessShare on outbox.events, which the DROP
  // takes in AccessExclusive mode next anyway). As the owner of
  // outbox.events, in a security-restricted operation (as autovacuum runs
  // a table's index functions): a superuser who drops the extension runs
  // nothing that the tables' owner or anyone else put on them (an index or
  // partition-key expression of a table outbox did not make) with its own
  // rights, and an extension owner who may not read the table is told what
  // it drops all the same. The statement names everything by schema. In a
  // subtransaction: an error there (code someone put on the tables raising
  // one) costs the WARNING, never the DROP.
  ErrorData *error = RunInSubtransaction(
      [](void *out) {
        *static_cast<DroppedEvents *>(out) = CountAsEventsOwner();
        return true;
      },
      &dropped);
  if (error != nullptr) {
    ereport(WARNING, (errmsg("outbox: could not count the events DROP EXTENSION drops: %s",
                             error->message)));
    FreeErrorData(error);
    dropped = DroppedEvents{};
  }
  return dropped;
}

void WarnOfDroppedEvents(const DroppedEvents &dropped) {
  if (!dropped.counted || dropped.pending + dropped.dead == 0) return;
  ereport(WARNING,
          (errmsg("DROP EXTENSION outbox dropped %lld pending and %lld dead event(s), "
                  "never delivered",
                  static_cast<long long>(dropped.pending), static_cast<long long>(dropped.dead)),
           errhint("Before dropping outbox, let the publisher deliver what is pending "
                   "(outbox.stats) or pg_dump the database.")));
}

}  // namespace outbox
