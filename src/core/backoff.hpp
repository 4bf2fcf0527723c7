// Exponential backoff with full jitter. PostgreSQL-free.
#pragma once

#include <cstdint>

namespace outbox {

// Delay before try number `attempt` (1 = the first retry): a uniformly random
// value in [min_ms, min(max_ms, min_ms * 2^(attempt-1))]. `unit_random` is in
// [0, 1). "Full jitter" (AWS architecture blog): spreads retries of many
// events failing together instead of retrying them in lockstep. Never below
// min_ms, never above max_ms (max_ms below min_ms counts as min_ms).
int64_t BackoffMs(int attempt, int64_t min_ms, int64_t max_ms, double unit_random);

}  // namespace outbox
