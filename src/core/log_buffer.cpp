// See log_buffer.hpp.
#include "core/log_buffer.hpp"

#include <utility>

namespace outbox {

void LogBuffer::Add(LogLevel level, std::string text) noexcept {
  if (lines_.size() >= kMaxLines) {
    ++dropped_;
    return;
  }
  try {
    lines_.push_back(LogLine{level, std::move(text)});
  } catch (...) {
    ++dropped_;
  }
}

std::vector<LogLine> LogBuffer::Take() noexcept {
  std::vector<LogLine> lines;
  lines.swap(lines_);
  if (dropped_ > 0) {
    try {
      lines.push_back(
          LogLine{LogLevel::kWarning, std::to_string(dropped_) + " " + what_ + " dropped"});
      dropped_ = 0;
    } catch (...) {
      // Said next time.
    }
  }
  return lines;
}

}  // namespace outbox
