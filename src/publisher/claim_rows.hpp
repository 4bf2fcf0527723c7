// Reading the rows a claim took (claim.cpp runs the claims): weighing them as
// the cursor returns them, and turning them into a batch of the Dispatcher's
// events, in id order.
//
// Requires: the cycle's transaction, SPI connected. Memory: everything is
// palloc'd in CurrentMemoryContext (the caller's per-cycle context); the
// rows point into SPI's tuple tables, which live until SPI_finish. The only
// C++ objects are the trivially destructible views handed to the
// Dispatcher.
#pragma once

#include "pg_bridge.hpp"

#include "core/claim_floor.hpp"
#include "core/dispatch.hpp"
#include "publisher/outcomes.hpp"

extern "C" {
#include "executor/spi.h"
#include "lib/stringinfo.h"
}

namespace outbox {

// The columns of both claim queries (claim.cpp), in this order.
enum ClaimColumn {
  kTableOid = 1,
  kCtid,
  kId,
  kTopic,
  kKey,
  kPayload,
  kHeaders,
  kAttempts,
  kCreatedAt
};

#define CLAIM_COLUMNS "tableoid, ctid, id, topic, key, payload, headers, attempts, created_at"

// A claimed row's payload and headers as compact JSON text: made once, by
// the claim that weighs them (FetchClaimedRows), and used for the message.
struct RowTexts {
  StringInfoData payload;
  StringInfoData headers;  // "{}" when the row has none
};

// The rows one claim took, in the order the claim returned them.
struct ClaimedRows {
  HeapTuple *rows = nullptr;
  RowTexts *texts = nullptr;  // rows[i]'s; unset for a row that is not Publishable
  TupleDesc desc = nullptr;
  int n = 0;
  bool cut = false;  // stopped by the byte budget: more rows may be waiting
};

// Fetch a claim's rows from its open cursor, a few at a time, taking rows
// until `limit` or until they weigh *bytes_left (WeighRow; always at least
// one row). Rows the cursor locked beyond that stay as they are (pending;
// the next claim of this window starts after the last one taken and meets
// them again, as our own locks do not make it skip them). The caller closes
// the cursor.
ClaimedRows FetchClaimedRows(Portal portal, int limit, int64 *bytes_left);

// The id of claimed row `i`.
IdPosition ClaimedId(const ClaimedRows &claimed, int i);

// One claimed batch of a window, in id order. The first `sendable` rows go
// to the dispatcher; the others were too large to turn into a message at all
// (kMaxPublishableBytes) and are dead already.
struct Batch {
  Dispatcher::Ticket ticket = 0;  // Dispatcher::Begin's; 0 when nothing was sent
  int n = 0;
  int sendable = 0;
  EventRow *rows = nullptr;  // [sendable]
  Claimed *claimed = nullptr;
  RowOutcome *outcomes = nullptr;
};

// Read and sort the rows of the last claims into a batch (palloc'd).
Batch ReadBatch(Dispatcher *dispatcher, const ClaimedRows &retry, const ClaimedRows &ready);

}  // namespace outbox
