// Loading a publisher's configuration (see configuration.hpp).
//
// Memory: the rows are palloc'd in the caller's per-cycle context; the
// dispatcher copies what it keeps. The order state rebuild reads through a
// cursor into a context reset per chunk.
#include "publisher/configuration.hpp"

#include "guc.hpp"
#include "publisher/claim.hpp"
#include "publisher/claim_lists.hpp"
#include "publisher/key_ownership.hpp"
#include "publisher/spi_rows.hpp"
#include "catalog/sink_catalog.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

namespace outbox {
namespace {

// Rows the order state rebuild reads at a time.
constexpr long kRebuildChunkRows = 1000;

}  // namespace

void LoadConfiguration(Dispatcher *dispatcher) {
  // Whoever can write outbox.sinks (its owner, roles granted INSERT or
  // UPDATE on it, the extension owner, or a superuser) chose the options: a
  // superuser's options only when the extension's owner is a superuser, the
  // table's is one too or is outbox_writer (as which only outbox's own code
  // writes; its functions judge the options by their caller, writer_role.cpp),
  // and no other role may insert or update rows: by a grant on the table or
  // on one of its columns (a grant a restore brought back from an older
  // release's database, say), or as a login role that may become the
  // table's owner or pg_write_all_data (which writes every table without a
  // grant).
  // The installed version too: a route's format may mean what an earlier
  // release meant by it until ALTER EXTENSION UPDATE (which reloads).
  if (SPI_execute(
          "SELECT r.rolsuper AND (s.rolsuper OR s.rolname OPERATOR(pg_catalog.=)"
          " 'outbox_writer') AND NOT EXISTS (SELECT FROM pg_catalog.aclexplode(c.relacl) a"
          " WHERE a.grantee OPERATOR(pg_catalog.<>) c.relowner"
          " AND a.privilege_type OPERATOR(pg_catalog.=) ANY ('{INSERT,UPDATE}'))"
          " AND NOT EXISTS (SELECT FROM pg_catalog.pg_attribute t,"
          " pg_catalog.aclexplode(t.attacl) a"
          " WHERE t.attrelid OPERATOR(pg_catalog.=) c.oid AND t.attacl IS NOT NULL"
          " AND a.grantee OPERATOR(pg_catalog.<>) c.relowner"
          " AND a.privilege_type OPERATOR(pg_catalog.=) ANY ('{INSERT,UPDATE}'))"
          " AND NOT EXISTS (SELECT FROM pg_catalog.pg_roles o"
          " WHERE o.rolcanlogin AND NOT o.rolsuper AND o.oid OPERATOR(pg_catalog.<>) c.relowner"
          " AND (pg_catalog.pg_has_role(o.oid, c.relowner, 'MEMBER')"
          " OR pg_catalog.pg_has_role(o.oid, 'pg_write_all_data'::pg_catalog.regrole,"
          " 'MEMBER')))"
          " AND NOT EXISTS (SELECT FROM pg_catalog.pg_inherits h"
          " WHERE h.inhparent OPERATOR(pg_catalog.=) c.oid), e.extversion"
          " FROM pg_catalog.pg_extension e"
          " JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) e.extowner"
          " JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=)"
          " 'outbox.sinks'::pg_catalog.regclass"
          " JOIN pg_catalog.pg_roles s ON s.oid OPERATOR(pg_catalog.=) c.relowner"
          " WHERE e.extname OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.name",
          true, 1) != SPI_OK_SELECT) {
    elog(ERROR, "outbox: cannot read the extension's owner");
  }
  bool privileged = false;
  bool version_0_1_0 = false;
  if (SPI_processed == 1) {
    bool isnull = false;
    const Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    privileged = !isnull && DatumGetBool(d);
    const char *version = TextColumn(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
    version_0_1_0 = !isnull && strcmp(version, "0.1.0") == 0;
  }
  if (SPI_execute("SELECT name, kind, options FROM ONLY outbox.sinks ORDER BY name", false, 0) !=
      SPI_OK_SELECT) {
    elog(ERROR, "outbox: cannot read outbox.sinks");
  }
  const int nsinks = static_cast<int>(SPI_processed);
  SPITupleTable *sink_rows = SPI_tuptable;
  SinkRow *sinks = static_cast<SinkRow *>(palloc(sizeof(SinkRow) * (nsinks + 1)));
  for (int i = 0; i < nsinks; ++i) {
    new (&sinks[i]) SinkRow();
    bool isnull = false;
    HeapTuple row = sink_rows->vals[i];
    sinks[i].name = View(TextColumn(row, sink_rows->tupdesc, 1, &isnull));
    sinks[i].kind = View(TextColumn(row, sink_rows->tupdesc, 2, &isnull));
    Jsonb *options = DatumGetJsonbP(SPI_getbinval(row, sink_rows->tupdesc, 3, &isnull));
    int count = 0;
    sinks[i].options = FlattenSinkOptions(options, &count, privileged);
    sinks[i].option_count = static_cast<size_t>(count);
    sinks[i].privileged = privileged;
  }

  if (SPI_execute("SELECT pattern, sink, target, paused, format FROM ONLY outbox.routes", false,
                  0) != SPI_OK_SELECT) {
    elog(ERROR, "outbox: cannot read outbox.routes");
  }
  const int nroutes = static_cast<int>(SPI_processed);
  SPITupleTable *route_rows = SPI_tuptable;
  RouteRow *routes = static_cast<RouteRow *>(palloc(sizeof(RouteRow) * (nroutes + 1)));
  for (int i = 0; i < nroutes; ++i) {
    new (&routes[i]) RouteRow();
    bool isnull = false;
    HeapTuple row = route_rows->vals[i];
    routes[i].pattern = View(TextColumn(row, route_rows->tupdesc, 1, &isnull));
    routes[i].sink = View(TextColumn(row, route_rows->tupdesc, 2, &isnull));
    const char *target = TextColumn(row, route_rows->tupdesc, 3, &isnull);
    routes[i].has_target = !isnull;
    routes[i].target = isnull ? std::string_view() : View(target);
    routes[i].paused = DatumGetBool(SPI_getbinval(row, route_rows->tupdesc, 4, &isnull));
    // The table's CHECK admits only names ParseMessageFormat knows.
    routes[i].format = ParseMessageFormat(View(TextColumn(row, route_rows->tupdesc, 5, &isnull)))
                           .value_or(MessageFormat::kRaw);
    // 0.1.0's debezium, until the update renames such routes
    // debezium-expanded (message_format.hpp).
    if (version_0_1_0 && routes[i].format == MessageFormat::kDebezium) {
      routes[i].format = MessageFormat::kDebezium010;
    }
  }
  if (!dispatcher->Configure(routes, static_cast<size_t>(nroutes), sinks,
                             static_cast<size_t>(nsinks))) {
    ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                    errmsg("outbox: the publisher ran out of memory while loading sinks and "
                           "routes")));
  }
  NoteRoutesLoaded(dispatcher);

  // Events parked for lack of a route (or behind a paused one) get another
  // look under the new routes
  // (due now, through the retry index: the ready index only ever receives
  // new events, which keeps the ready claim's starting point valid).
  // Only those of keys we own (and keyless ones): another publisher's are
  // its business, and updating them could wait for its row locks.
  // Only those a route may now take: events of topics no route matches stay
  // as they are, at no cost per reload. The patterns are the ready claims'
  // (NoteRoutesLoaded, above: the routes that are not paused and name a sink
  // that exists, as LIKE patterns).
  Oid types[2] = {BYTEAOID, TEXTARRAYOID};
  Datum args[2] = {OwnedBitmap(), DeliverablePatterns()};
  if (SPI_execute_with_args(
          "UPDATE outbox.events SET next_attempt_at = pg_catalog.now()"
          " WHERE status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text"
          " AND next_attempt_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz"
          " AND topic OPERATOR(pg_catalog.~~) ANY ($2) AND" OWNED_KEYS("$1"),
          2, types, args, nullptr, false, 0) != SPI_OK_UPDATE) {
    elog(ERROR, "outbox: cannot release events that waited for a route");
  }

  // Events of our keys parked for a sink's late answer that this process
  // does not await (dispatch.hpp, "Slow sinks"): the publisher that sent
  // them exited, or gave up their key slot, and the answer will never be
  // recorded. They are due now instead of when the sink's whole timeout
  // would be over (tens of seconds: a key handed over waited that long).
  // Sent again, with the same id (at least once); in id order with their
  // key's later events, which wait behind them here. Keyless events belong
  // to every publisher: with several, another one may await their answer,
  // so they are left to their time then (they hold no key back).
  Oid late_types[3] = {BYTEAOID, TEXTARRAYOID, BOOLOID};
  Datum late_args[3] = {OwnedBitmap(), LateAnswerIds(dispatcher), BoolGetDatum(guc::workers <= 1)};
  if (SPI_execute_with_args(
          "UPDATE outbox.events SET next_attempt_at = pg_catalog.now()"
          " WHERE status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text"
          " AND next_attempt_at OPERATOR(pg_catalog.>) pg_catalog.now()"
          " AND next_attempt_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz"
          " AND last_error OPERATOR(pg_catalog.~~) 'waiting for sink % to answer%'::pg_catalog.text"
          " AND id::pg_catalog.text OPERATOR(pg_catalog.<>) ALL($2)"
          " AND (key IS NOT NULL OR $3) AND" OWNED_KEYS("$1"),
          3, late_types, late_args, nullptr, false, 0) != SPI_OK_UPDATE) {
    elog(ERROR, "outbox: cannot release events that waited for another publisher's answer");
  }

  // Rebuild the per-key order state from the events of our keys that wait
  // for a retry. Their number has no bound (a poison event parks every later
  // event of its key, and keys may be 4 kB): a cursor reads them a chunk at
  // a time into memory reset per chunk, and the guard keeps ~70 bytes per
  // event whatever its key (order_guard.hpp).
  Portal portal = SPI_cursor_open_with_args(
      nullptr,
      "SELECT id, topic, key, next_attempt_at FROM outbox.events"
      " WHERE status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text"
      " AND next_attempt_at IS NOT NULL"
      " AND next_attempt_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz"
      " AND key IS NOT NULL AND" OWNED_KEYS("$1") " ORDER BY id",
      // Not read-only: it must see the events released above (now due).
      1, types, args, nullptr, false, 0);
  MemoryContext chunk_context = AllocSetContextCreate(
      CurrentMemoryContext, "outbox order state rebuild", ALLOCSET_DEFAULT_SIZES);
  for (;;) {
    SPI_cursor_fetch(portal, true, kRebuildChunkRows);
    if (SPI_processed == 0) break;
    MemoryContext caller = MemoryContextSwitchTo(chunk_context);
    for (uint64 i = 0; i < SPI_processed; ++i) {
      HeapTuple row = SPI_tuptable->vals[i];
      TupleDesc desc = SPI_tuptable->tupdesc;
      bool isnull = false;
      EventRow event;
      event.id = View(
          DatumGetCString(DirectFunctionCall1(uuid_out, SPI_getbinval(row, desc, 1, &isnull))));
      event.topic = View(TextColumn(row, desc, 2, &isnull));
      event.has_key = true;
      event.key = View(TextColumn(row, desc, 3, &isnull));
      const TimestampTz until = DatumGetTimestampTz(SPI_getbinval(row, desc, 4, &isnull));
      if (!dispatcher->NoteWaiting(event, until)) {
        ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                        errmsg("outbox: the publisher ran out of memory while rebuilding the "
                               "per-key order state")));
      }
    }
    MemoryContextSwitchTo(caller);
    MemoryContextReset(chunk_context);
    SPI_freetuptable(SPI_tuptable);
  }
  SPI_cursor_close(portal);
  MemoryContextDelete(chunk_context);
}

}  // namespace outbox
