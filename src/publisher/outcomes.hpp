// Recording what became of claimed events: the outcomes of a finished batch,
// written into the rows the cycle holds locked, and the late answers of slow
// sinks (dispatch.hpp, "Slow sinks"), written into rows still as parked.
#pragma once

#include "pg_bridge.hpp"

#include "core/dispatch.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

extern "C" {
#include "storage/itemptr.h"
}

namespace outbox {

// What one cycle did, for the outbox.workers view.
struct CycleStats {
  int claimed = 0;
  int published = 0;
  int failed = 0;              // attempts that failed (retry or dead)
  char last_error[256] = {0};  // of the last failed attempt, if any
  bool more_waiting = false;   // a claim stopped at outbox.max_batch_bytes
  // The earliest retry time (next_attempt_at) this cycle wrote; 0: none.
  TimestampTz earliest_retry = 0;

  void NoteRetryAt(TimestampTz at) {
    if (earliest_retry == 0 || at < earliest_retry) earliest_retry = at;
  }
};

// One claimed row, copied out of SPI's tuple table.
struct Claimed {
  Oid tableoid;
  ItemPointerData ctid;
};

// Write the outcomes of the rows claimed from one partition (claimed[i] whose
// tableoid is `partition`). Requires: the cycle's transaction, SPI connected,
// the rows locked by this transaction (their ctids cannot change).
void WriteOutcomes(Oid partition, const Claimed *claimed, const RowOutcome *outcomes, int n);

// Judge the late answers that have come in and write them (see
// outcomes.cpp). Same requirements as WriteOutcomes.
void WriteLateOutcomes(Dispatcher *dispatcher, const DispatchSettings &settings, CycleStats *stats);

}  // namespace outbox
