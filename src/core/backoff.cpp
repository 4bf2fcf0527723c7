#include "core/backoff.hpp"

#include <algorithm>

namespace outbox {

int64_t BackoffMs(int attempt, int64_t min_ms, int64_t max_ms, double unit_random) {
  if (min_ms < 1) min_ms = 1;
  if (max_ms < min_ms) max_ms = min_ms;
  if (attempt < 1) attempt = 1;
  if (unit_random < 0) unit_random = 0;
  if (unit_random >= 1) unit_random = 0.999999999;
  // Cap the exponent before shifting: 2^40 ms is already 35 years.
  const int shift = std::min(attempt - 1, 40);
  int64_t ceiling = min_ms;
  if (shift > 0 && min_ms <= (max_ms >> shift)) {
    ceiling = min_ms << shift;
  } else if (shift > 0) {
    ceiling = max_ms;
  }
  ceiling = std::min(ceiling, max_ms);
  return min_ms + static_cast<int64_t>(unit_random * static_cast<double>(ceiling - min_ms + 1));
}

}  // namespace outbox
