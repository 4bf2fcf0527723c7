// Route control: outbox.pause, outbox.resume and outbox.replay. Like the
// catalog functions (sink_catalog.cpp), they are for superusers and the
// extension owner only, and every statement is parameterised.
#include "pg_bridge.hpp"

#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"
#include "catalog/sink_catalog.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "executor/spi.h"
}

using namespace outbox;

// outbox.pause(pattern) / outbox.resume(pattern): flip a route's paused
// flag. Publishers reload routes at commit: a paused route's events wait
// (next_attempt_at = 'infinity') and flow again, in order, on resume.
static Datum SetRoutePaused(FunctionCallInfo fcinfo, bool paused) {
  AdminScope admin;
  ConnectAsSinkAdmin(fcinfo, paused ? "pause routes" : "resume routes", &admin);
  text *pattern = RequireText(fcinfo, 0, "pattern");
  Oid types[2] = {TEXTOID, BOOLOID};
  Datum values[2] = {PointerGetDatum(pattern), BoolGetDatum(paused)};
  if (RunCatalogStatement(
          "UPDATE ONLY outbox.routes SET paused = $2 WHERE pattern OPERATOR(pg_catalog.=) $1", 2,
          types, values, nullptr, false) == 0) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("no route for pattern %s", QuoteText(pattern))));
  }
  ReloadConfigAtCommit();
  FinishAsSinkAdmin(admin);
  PG_RETURN_VOID();
}

OUTBOX_SQL_FUNCTION(outbox_pause) { return SetRoutePaused(fcinfo, true); }

OUTBOX_SQL_FUNCTION(outbox_resume) { return SetRoutePaused(fcinfo, false); }

// outbox.replay(since timestamptz, topic text DEFAULT NULL) RETURNS bigint:
// retained events already published, emitted at or after `since`, go back
// to pending (due now, through the retry index) and are delivered again with
// their own ids.
OUTBOX_SQL_FUNCTION(outbox_replay) {
  AdminScope admin;
  ConnectAsSinkAdmin(fcinfo, "replay events", &admin);
  if (PG_ARGISNULL(0)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("since must not be NULL")));
  }
  Oid types[2] = {TIMESTAMPTZOID, TEXTOID};
  Datum values[2] = {PG_GETARG_DATUM(0), PG_ARGISNULL(1) ? (Datum)0 : PG_GETARG_DATUM(1)};
  const char nulls[2] = {' ', PG_ARGISNULL(1) ? 'n' : ' '};
  const uint64 n = RunCatalogStatement(
      "UPDATE outbox.events SET status = 'pending', attempts = 0,"
      " next_attempt_at = pg_catalog.now(), last_error = NULL"
      " WHERE status OPERATOR(pg_catalog.=) 'published'::pg_catalog.text"
      " AND created_at OPERATOR(pg_catalog.>=) $1"
      " AND ($2::pg_catalog.text IS NULL OR topic OPERATOR(pg_catalog.=) $2)",
      2, types, values, nulls, false);
  if (n > 0) WakePublishersAtCommit();
  FinishAsSinkAdmin(admin);
  PG_RETURN_INT64(static_cast<int64>(n));
}
