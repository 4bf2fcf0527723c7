// What the claims know about the retry index (our keys' events waiting for a
// time): the earliest next_attempt_at there, 0 for none. Exact when read
// (NextRetryAt, in retry_due.cpp) in a cycle's transaction, then lowered by
// every time this process writes; unknown again after anything else may
// have written one (a reload releasing events, outbox.wakeup(), key slots
// gained, an error) and at least once a second, for writers nobody tells us
// about. A cycle claims due retries only when one may be due (claim.cpp).
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace outbox {

// When the earliest event of our keys that waits for a time is due (0: none),
// as the last cycle left it; *known false when a cycle must read it again
// (it then claims due retries first). No transaction needed.
TimestampTz KnownRetryDue(bool *known);

// Something else may have written a retry time, or the last reading went
// with an aborted transaction: the next cycle claims retries and reads the
// time again. No transaction needed.
void ForgetRetryDue();

// Whether a cycle that began at `now` claims due retries: when one may be
// due, or nobody knows (forgotten, or read a second or more ago).
bool RetriesMayBeDue(TimestampTz now);

// At the end of a cycle that began at `now`, its outcomes written: after a
// retry claim that took every due retry (`claimed_retries`, not
// `retries_left`), read the earliest time again (this transaction sees its
// own outcomes); after one that left some, forget it (they are claimed next
// cycle); without a retry claim, lower it to the earliest retry time the
// cycle wrote (`earliest_written`, 0: none). Requires the cycle's
// transaction and SPI connected (ERROR as any statement).
void NoteRetriesAfterCycle(TimestampTz now, bool claimed_retries, bool retries_left,
                           TimestampTz earliest_written);

}  // namespace outbox
