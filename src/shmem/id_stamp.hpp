// Event ids in the order emit() takes them, across every backend.
//
// A UUIDv7's stamp (its millisecond and 12-bit counter, core/uuid7.hpp)
// comes from one counter in shared memory: each emit() takes the next one
// with a compare-and-swap, never below its own clock reading. So an event
// emitted after another one was (in another session, after that session
// committed, say: two transactions of one key serialised by the
// application) gets a larger id, and the publisher, which sends a key's
// events in id order, keeps the order in which they were emitted. Per
// backend counters would leave two sessions' ids of one millisecond in
// random order.
//
// The emit horizon's argument (emit_horizon.cpp) holds: a stamp is never
// below the clock reading it was taken with.
//
// Exists only when outbox is preloaded: NextIdStamp answers false otherwise,
// and emit() keeps a counter of its own (ids then follow the clock across
// sessions).
#pragma once

#include <cstdint>

namespace outbox {

// The next stamp at `unix_ms` (NextUuid7Stamp over the shared counter), or
// false when there is no shared memory. Lock-free; never throws.
bool NextIdStamp(int64_t unix_ms, const uint8_t random[10], uint64_t *stamp);

}  // namespace outbox
