#include "core/wait_time.hpp"

namespace outbox {

int64_t WaitMsUntil(int64_t until_us, int64_t now_us) noexcept {
  if (until_us <= now_us) return 0;
  const uint64_t left_us = static_cast<uint64_t>(until_us) - static_cast<uint64_t>(now_us);
  return static_cast<int64_t>(left_us / 1000 + (left_us % 1000 != 0 ? 1 : 0));
}

}  // namespace outbox
