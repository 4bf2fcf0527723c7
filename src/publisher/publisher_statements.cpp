// outbox.publisher_statements(): the SQL text of the statements a publisher
// runs to claim events, exactly as it prepares them. For a DBA who wants to
// EXPLAIN a claim, and for the isolation tests, which run these texts (not
// copies of them) from concurrent sessions.
#include "pg_bridge.hpp"

#include "publisher/claim.hpp"

extern "C" {
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"
}

OUTBOX_SQL_FUNCTION(outbox_publisher_statements) {
  InitMaterializedSRF(fcinfo, 0);
  ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
  static constexpr const char *kNames[] = {"claim_ready", "claim_retry"};
  for (const char *name : kNames) {
    Datum values[2] = {CStringGetTextDatum(name),
                       CStringGetTextDatum(outbox::PublisherStatement(name))};
    bool nulls[2] = {false, false};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  return (Datum)0;
}
