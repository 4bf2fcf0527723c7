// Event id stamps from shared memory (see id_stamp.hpp).
#include "shmem/id_stamp.hpp"

#include "core/uuid7.hpp"
#include "shmem/shmem.hpp"

namespace outbox {

bool NextIdStamp(int64_t unix_ms, const uint8_t random[10], uint64_t *stamp) {
  SharedState *shared = Shared();
  if (shared == nullptr) return false;
  uint64 last = pg_atomic_read_u64(&shared->id_stamp);
  for (;;) {
    const uint64 next = NextUuid7Stamp(last, unix_ms, random);
    // On failure `last` is reloaded with what another backend stored.
    if (pg_atomic_compare_exchange_u64(&shared->id_stamp, &last, next)) {
      *stamp = next;
      return true;
    }
  }
}

}  // namespace outbox
