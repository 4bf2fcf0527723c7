// What the claims know about the retry index (see retry_due.hpp).
#include "publisher/retry_due.hpp"

#include "publisher/claim_lists.hpp"
#include "publisher/key_ownership.hpp"
#include "publisher/spi_rows.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace {

constexpr int64 kRetryRecheckUs = USECS_PER_SEC;
bool retry_known = false;
TimestampTz retry_due = 0;
TimestampTz retry_read_at = 0;

// When the earliest event of our keys that waits for a time, and that a
// retry claim may take, is due (0 if none). Sees this transaction's own
// outcomes. Events of the topics the claims leave alone (behind a sink that
// is down or owes late answers) do not count: the claims would not take
// them when due, and the idle publisher would wake for nothing, at once and
// again (it spun through thousands of empty transactions a second while a
// sink's answers were late). What ends their wait wakes it anyway: the
// sink's retry time (Dispatcher::NextSinkRetryUs) or its answers.
TimestampTz NextRetryAt() {
  // Prepared once: planning a min() over every partition costs more than
  // running it.
  static SPIPlanPtr plan = nullptr;
  if (plan == nullptr) {
    Oid types[2] = {BYTEAOID, TEXTARRAYOID};
    plan = KeepPlan(
        "SELECT pg_catalog.min(next_attempt_at) FROM outbox.events"
        " WHERE status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text"
        " AND next_attempt_at IS NOT NULL"
        " AND next_attempt_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz"
        " AND topic OPERATOR(pg_catalog.<>) ALL ($2) AND" OWNED_KEYS("$1"),
        2, types);
  }
  Datum args[2] = {OwnedBitmap(), SkippedTopics()};
  if (SPI_execute_plan(plan, args, nullptr, false, 1) != SPI_OK_SELECT || SPI_processed != 1) {
    return 0;
  }
  bool isnull = false;
  Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
  return isnull ? 0 : DatumGetTimestampTz(d);
}

}  // namespace

TimestampTz KnownRetryDue(bool *known) {
  *known = retry_known;
  return retry_due;
}

void ForgetRetryDue() { retry_known = false; }

bool RetriesMayBeDue(TimestampTz now) {
  if (now - retry_read_at >= kRetryRecheckUs) retry_known = false;
  return !retry_known || (retry_due != 0 && retry_due <= now);
}

void NoteRetriesAfterCycle(TimestampTz now, bool claimed_retries, bool retries_left,
                           TimestampTz earliest_written) {
  if (claimed_retries && !retries_left) {
    retry_due = NextRetryAt();
    retry_known = true;
    retry_read_at = now;
  } else if (claimed_retries) {
    retry_known = false;  // more are due: claim them next cycle
  } else if (earliest_written != 0 && (retry_due == 0 || earliest_written < retry_due)) {
    retry_due = earliest_written;
  }
}

}  // namespace outbox
