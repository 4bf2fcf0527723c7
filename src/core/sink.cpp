// What every sink shares (sink.hpp).
#include "core/sink.hpp"

#include <chrono>

namespace outbox {

int64_t UnixNowUs() noexcept {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void DescribeCurrentException(std::string *error) noexcept {
  try {
    error->clear();
    try {
      throw;
    } catch (const std::bad_alloc &) {
      *error = "out of memory";
    } catch (const std::exception &e) {
      *error = e.what();
    } catch (...) {
      *error = "unexpected error";
    }
  } catch (...) {
    // Assigning the text itself ran out of memory: leave it empty.
  }
}

}  // namespace outbox
