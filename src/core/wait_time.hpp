// How long a sleep until a moment is, in the milliseconds a latch wait
// takes. PostgreSQL-free.
#pragma once

#include <cstdint>

namespace outbox {

// Whole milliseconds from now_us until until_us (both microseconds on one
// clock), rounded up: 0 only once it is due. Rounded down, a moment less
// than a millisecond away would be a wait of 0, and a loop that sleeps
// until it would spin (a publisher ran cycle after cycle, each a
// transaction that claimed nothing, until a retry came due).
int64_t WaitMsUntil(int64_t until_us, int64_t now_us) noexcept;

}  // namespace outbox
