#include "core/uuid7.hpp"

namespace outbox {

namespace {
// Largest starting counter: leaves half the 12-bit space for ids generated in
// the same millisecond before the counter has to borrow the next millisecond.
constexpr uint64_t kCounterSeedMask = 0x07FF;
constexpr int kCounterBits = 12;
constexpr uint64_t kCounterMask = (uint64_t{1} << kCounterBits) - 1;
constexpr uint64_t kMaxMs = 0xFFFFFFFFFFFFull;
}  // namespace

uint64_t NextUuid7Stamp(uint64_t last, int64_t unix_ms, const uint8_t random[10]) {
  if (unix_ms < 0) unix_ms = 0;
  const uint64_t ms = static_cast<uint64_t>(unix_ms) & kMaxMs;
  // `last` 0 (none yet) needs no case of its own: any millisecond after
  // 1970-01-01 is past it, and at that one the counter starts at 1.
  if (ms > (last >> kCounterBits)) {
    return (ms << kCounterBits) |
           ((static_cast<uint64_t>(random[0] << 8) | random[1]) & kCounterSeedMask);
  }
  return last + 1;  // same (or earlier) millisecond: keep increasing
}

Uuid Uuid7FromStamp(uint64_t stamp, const uint8_t random[10]) {
  const uint64_t ms = (stamp >> kCounterBits) & kMaxMs;
  const auto counter = static_cast<uint16_t>(stamp & kCounterMask);
  Uuid id{};
  for (int i = 0; i < 6; ++i) id[i] = static_cast<uint8_t>(ms >> (40 - 8 * i));
  id[6] = static_cast<uint8_t>(0x70 | ((counter >> 8) & 0x0F));
  id[7] = static_cast<uint8_t>(counter & 0xFF);
  for (int i = 0; i < 8; ++i) id[8 + i] = random[2 + i];
  id[8] = static_cast<uint8_t>(0x80 | (id[8] & 0x3F));  // RFC 9562 variant 10xx
  return id;
}

Uuid Uuid7Generator::Next(int64_t unix_ms, const uint8_t random[10]) {
  last_stamp_ = NextUuid7Stamp(last_stamp_, unix_ms, random);
  return Uuid7FromStamp(last_stamp_, random);
}

int64_t Uuid7UnixMs(const Uuid &id) {
  uint64_t ms = 0;
  for (int i = 0; i < 6; ++i) ms = (ms << 8) | id[i];
  return static_cast<int64_t>(ms);
}

std::string FormatUuid(const Uuid &id) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[id[i] >> 4]);
    out.push_back(kHex[id[i] & 0x0F]);
  }
  return out;
}

}  // namespace outbox
