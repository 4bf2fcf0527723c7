// The log lines a sink or the dispatcher has to say, kept until the
// publisher's main thread takes them and hands them to PostgreSQL's log
// (nothing here may call PostgreSQL: librdkafka's callbacks add lines).
//
// Bounded: past kMaxLines, or when memory runs out, a line is counted as
// dropped instead, and Take() ends with one line saying how many were. Used
// from one thread only (the caller counts lines from other threads itself
// and reports them with CountDropped).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/sink.hpp"

namespace outbox {

class LogBuffer {
 public:
  static constexpr size_t kMaxLines = 10000;

  // `what` names the lines in the dropped-lines line ("Redis sink log
  // line(s)"); it must outlive the buffer (a string literal).
  explicit LogBuffer(const char *what) : what_(what) {}

  void Add(LogLevel level, std::string text) noexcept;
  void CountDropped(size_t n) noexcept { dropped_ += n; }
  bool empty() const noexcept { return lines_.empty() && dropped_ == 0; }

  // Every line since the last call, in order, then the dropped count if any.
  // On out of memory it returns what it has and keeps the count.
  std::vector<LogLine> Take() noexcept;

 private:
  const char *what_;
  std::vector<LogLine> lines_;
  size_t dropped_ = 0;
};

}  // namespace outbox
