// Turns fuzzer bytes into sink options, one option a line, so seeds stay
// readable:   s<key>=<text>   a JSON string   (any first byte but n and o)
//             n<key>=<text>   a JSON number
//             o<key>          anything else (object, bool, null: text empty)
// A line without '=' has empty text.
#pragma once

#include "sinks/sink_options.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace outbox::fuzz {

constexpr size_t kMaxOptions = 16;

// False when the input cannot come from PostgreSQL: jsonb keys and strings never
// hold a NUL byte, and create_sink's callers pass C strings, so a NUL would only
// find differences no user can reach.
inline bool DecodeOptionLines(const uint8_t *data, size_t size, SinkOptions *out) {
  const std::string_view in(reinterpret_cast<const char *>(data), size);
  if (in.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (start < in.size() && out->size() < kMaxOptions) {
    size_t end = in.find('\n', start);
    if (end == std::string_view::npos) end = in.size();
    std::string_view line = in.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    SinkOption opt;
    if (line[0] == 'n') {
      opt.kind = SinkOption::Kind::kNumber;
    } else if (line[0] == 'o') {
      opt.kind = SinkOption::Kind::kOther;
    }
    line.remove_prefix(1);
    const size_t eq = line.find('=');
    opt.key = std::string(line.substr(0, eq));
    if (eq != std::string_view::npos && opt.kind != SinkOption::Kind::kOther) {
      opt.text = std::string(line.substr(eq + 1));
    }
    out->push_back(std::move(opt));
  }
  return true;
}

}  // namespace outbox::fuzz
