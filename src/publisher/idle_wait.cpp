// The publisher's waits between its transactions (idle_wait.hpp). Every
// wait is on the process latch, with WL_EXIT_ON_PM_DEATH, and resets it only
// when the wait returned because it was set: a wake-up that lands after a
// wait timed out, before the reset, would otherwise be lost (a commit sets
// the latch only when no cycle is requested yet, so later commits would not
// set it again), and the publisher would sleep until outbox.poll_interval.
// The latch left set ends the next wait at once.
#include "publisher/idle_wait.hpp"

#include "fault_injection.hpp"
#include "guc.hpp"
#include "core/wait_time.hpp"

#include <malloc.h>

extern "C" {
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace {

// While a sink's late answers are awaited (dispatch.hpp, "Slow sinks"),
// how often the idle publisher looks for them: a look costs a few µs of
// librdkafka's queue (KafkaSink::Wait without waiting), so the wait costs
// well under 1 % of a core (TAP 096), and an answer is recorded within this
// long of its arrival, which came after outbox.ack_wait anyway.
constexpr long kLatePollMs = 25;

// After a busy spell (a backlog drained, a sink's late answers settled) the
// heap holds megabytes freed in small pieces, which glibc keeps: when idle,
// and more than kTrimFreeBytes lie free, give those pages back to the
// system. Looked at no more than every kTrimCheckMs (mallinfo2 walks the
// heap's free lists).
constexpr long kTrimCheckMs = 1000;
constexpr size_t kTrimFreeBytes = 4 * 1024 * 1024;
TimestampTz last_trim_check = 0;

// Waits on the latch up to `ms`; true (the latch reset) when it was set.
bool WaitLatchFor(long ms) {
  if ((WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION) &
       WL_LATCH_SET) == 0) {
    return false;
  }
  ResetLatch(MyLatch);
  return true;
}

}  // namespace

void ReturnFreedMemory() {
  const TimestampTz now = GetCurrentTimestamp();
  if (now - last_trim_check < kTrimCheckMs * 1000L) return;
  last_trim_check = now;
  if (mallinfo2().fordblks > kTrimFreeBytes) (void)malloc_trim(0);
}

void Sleep(Dispatcher *dispatcher, long ms) {
  if (ms <= 0) return;
  const TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
  for (;;) {
    long slice = static_cast<long>((until - GetCurrentTimestamp()) / 1000);
    if (slice <= 0) return;
    // Late answers come through the sinks' queues, not the latch: look for
    // them every few ms while any are awaited.
    const bool late = dispatcher->HasLate();
    if (late && slice > kLatePollMs) slice = kLatePollMs;
    if (WaitLatchFor(slice)) return;
    // Timed out: a commit's wake-up may land right now (TAP 109 stalls here).
    OUTBOX_FAULT("publisher.sleep_timed_out");
    if (!late || dispatcher->LateArrived()) return;
  }
}

void Backoff(long ms, PauseCheck paused) {
  const TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
  for (;;) {
    const long left = static_cast<long>((until - GetCurrentTimestamp()) / 1000);
    if (left <= 0 || ShutdownRequestPending || paused()) return;
    (void)WaitLatchFor(left);
  }
}

void WaitForWakeInterval(TimestampTz last_cycle_start, PauseCheck paused) {
  if (guc::wake_interval_ms <= 0 || last_cycle_start == 0) return;
  const TimestampTz until = TimestampTzPlusMilliseconds(last_cycle_start, guc::wake_interval_ms);
  for (;;) {
    // WaitLatch counts milliseconds: rounded up, or the last one would spin.
    const int64_t left_ms = WaitMsUntil(until, GetCurrentTimestamp());
    if (left_ms <= 0 || ShutdownRequestPending || paused()) return;
    (void)WaitLatchFor(static_cast<long>(left_ms));
  }
}

}  // namespace outbox
