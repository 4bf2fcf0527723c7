// outbox.worker_stats(), behind the outbox.workers view: one row per running
// publisher of the current database, from what each reports in shared memory
// (shmem.hpp), or, in a copy of another database, one row saying why none
// runs (database_home.hpp). Copies each publisher's record under its spinlock, then builds
// the row outside it.
#include "pg_bridge.hpp"

#include "catalog/database_home.hpp"
#include "shmem/shmem.hpp"

extern "C" {
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

OUTBOX_SQL_FUNCTION(outbox_worker_stats) {
  using namespace outbox;
  InitMaterializedSRF(fcinfo, 0);
  ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
  // A copy of another database has no publisher: one row that says why.
  Oid copied_from = InvalidOid;
  if (HomeOfOutbox(&copied_from) == Home::kCopy) {
    const char *datname = get_database_name(MyDatabaseId);
    Datum values[12];
    bool nulls[12] = {false};
    for (bool &n : nulls) n = true;
    values[0] = datname != nullptr ? CStringGetTextDatum(datname) : (Datum)0;
    nulls[0] = datname == nullptr;
    values[2] = CStringGetTextDatum(
        "paused: this database is a copy of another one (CREATE DATABASE ... TEMPLATE); "
        "SELECT outbox.publish_here() publishes its events from here");
    nulls[2] = false;
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    return (Datum)0;
  }
  SharedState *shared = Shared();
  if (shared == nullptr) return (Datum)0;  // not preloaded: no publishers

  for (int s = 0; s < shared->nslots; ++s) {
    DatabaseSlot *slot = &shared->slots[s];
    const Oid dboid = slot->dboid;
    // This database's publishers only: another database's sink names,
    // states and errors are not this database's users' business.
    if (!OidIsValid(dboid) || dboid != MyDatabaseId) continue;
    for (int w = 0; w < kMaxWorkersPerDatabase; ++w) {
      PublisherStats copy;
      SpinLockAcquire(&slot->stats[w].mutex);
      memcpy(&copy, &slot->stats[w], sizeof copy);
      SpinLockRelease(&slot->stats[w].mutex);
      if (copy.pid == 0) continue;

      const char *datname = get_database_name(dboid);
      Datum values[12];
      bool nulls[12] = {false};
      values[0] = datname != nullptr ? CStringGetTextDatum(datname) : (Datum)0;
      nulls[0] = datname == nullptr;
      values[1] = Int32GetDatum(copy.pid);
      values[2] = CStringGetTextDatum(copy.state);
      values[3] = CStringGetTextDatum(copy.sinks);
      values[4] = Int64GetDatum(static_cast<int64>(copy.published));
      values[5] = Int64GetDatum(static_cast<int64>(copy.failures));
      nulls[6] = copy.last_error[0] == '\0';
      values[6] = nulls[6] ? (Datum)0 : CStringGetTextDatum(copy.last_error);
      nulls[7] = copy.last_error_at == 0;
      values[7] = TimestampTzGetDatum(copy.last_error_at);
      nulls[8] = copy.last_batch_size == 0;
      values[8] = Int32GetDatum(copy.last_batch_size);
      nulls[9] = copy.last_batch_size == 0;
      values[9] = Float8GetDatum(copy.last_batch_ms);
      values[10] = Int32GetDatum(w);
      values[11] = Int32GetDatum(copy.key_slots);
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    }
  }
  return (Datum)0;
}
