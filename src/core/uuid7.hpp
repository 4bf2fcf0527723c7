// UUIDv7 (RFC 9562): 48-bit Unix milliseconds, version 7, a 12-bit counter in
// rand_a, the RFC variant, then 62 random bits. PostgreSQL-free.
//
// Why a counter: ids generated within the same millisecond must still sort in
// emit order (method 1 of RFC 9562 section 6.2), so the publisher can order by
// id. The millisecond and the counter together are the id's stamp, one
// number; emit() takes stamps from one counter in shared memory when outbox
// is preloaded (shmem/id_stamp.hpp), so ids sort in the order emit() took
// them across backends too, and from a Uuid7Generator of its own otherwise
// (then across backends the order follows the clock only).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace outbox {

using Uuid = std::array<uint8_t, 16>;

// The stamp after `last` (0: none yet) at `unix_ms`, always above it: a new
// millisecond starts its counter at a random value from random[0..1] (at
// most 0x7FF, leaving room for the ids of that millisecond); the same or an
// earlier millisecond (a clock stepped back) takes last + 1, whose counter
// overflow carries into the next millisecond. So stamps only grow.
uint64_t NextUuid7Stamp(uint64_t last, int64_t unix_ms, const uint8_t random[10]);

// The UUIDv7 of a stamp: its millisecond and counter, the version and the
// variant, and 62 random bits from random[2..9].
Uuid Uuid7FromStamp(uint64_t stamp, const uint8_t random[10]);

class Uuid7Generator {
 public:
  // unix_ms: the current time; random: 10 bytes of fresh randomness (only the
  // low 62 bits of the last 8 are used for rand_b; the first 2 seed rand_a when
  // the millisecond changes). Never goes backwards: if the clock steps back or
  // the counter overflows, the previous millisecond is reused or advanced.
  Uuid Next(int64_t unix_ms, const uint8_t random[10]);

 private:
  uint64_t last_stamp_ = 0;
};

// The millisecond timestamp stored in a UUIDv7.
int64_t Uuid7UnixMs(const Uuid &id);

// Canonical 36-character lower-case text form.
std::string FormatUuid(const Uuid &id);

}  // namespace outbox
