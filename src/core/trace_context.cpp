#include "core/trace_context.hpp"

namespace outbox {

namespace {

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool HexField(std::string_view s, size_t pos, size_t len, bool nonzero) {
  bool any_nonzero = false;
  for (size_t i = pos; i < pos + len; ++i) {
    if (!IsLowerHex(s[i])) return false;
    if (s[i] != '0') any_nonzero = true;
  }
  return !nonzero || any_nonzero;
}

constexpr size_t kVersion00Length = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2

}  // namespace

bool IsValidTraceparent(std::string_view v) {
  if (v.size() < kVersion00Length) return false;
  if (!HexField(v, 0, 2, false) || v.substr(0, 2) == "ff") return false;
  if (v[2] != '-' || v[35] != '-' || v[52] != '-') return false;
  if (!HexField(v, 3, 32, true) || !HexField(v, 36, 16, true) || !HexField(v, 53, 2, false)) {
    return false;
  }
  if (v.size() == kVersion00Length) return true;
  // Longer values: only from a future version, only after a '-', and (as
  // every header an application role may attach is bounded, names.hpp) at
  // most kMaxTraceparentLength characters of printable ASCII: a value of
  // control characters would grow sixfold as JSON text in the publisher.
  if (v.size() > kMaxTraceparentLength) return false;
  for (char c : v) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return v.substr(0, 2) != "00" && v[kVersion00Length] == '-';
}

bool IsValidTracestate(std::string_view v) {
  if (v.size() > 512) return false;
  for (char c : v) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace outbox
