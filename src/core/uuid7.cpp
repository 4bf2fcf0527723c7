#include "core/uuid7.hpp"

namespace outbox {

namespace {
// Largest starting counter: leaves half the 12-bit space for ids generated in
// the same millisecond before the counter has to borrow the next millisecond.
constexpr uint16_t kCounterSeedMask = 0x07FF;
constexpr uint16_t kCounterMax = 0x0FFF;
}  // namespace

Uuid Uuid7Generator::Next(int64_t unix_ms, const uint8_t random[10]) {
  if (unix_ms < 0) unix_ms = 0;
  if (unix_ms > last_ms_) {
    last_ms_ = unix_ms;
    counter_ = static_cast<uint16_t>(((random[0] << 8) | random[1]) & kCounterSeedMask);
  } else if (counter_ < kCounterMax) {
    ++counter_;  // same (or earlier) millisecond: keep increasing
  } else {
    ++last_ms_;  // counter exhausted: borrow the next millisecond
    counter_ = 0;
  }

  Uuid id{};
  const uint64_t ms = static_cast<uint64_t>(last_ms_) & 0xFFFFFFFFFFFFull;
  for (int i = 0; i < 6; ++i) id[i] = static_cast<uint8_t>(ms >> (40 - 8 * i));
  id[6] = static_cast<uint8_t>(0x70 | ((counter_ >> 8) & 0x0F));
  id[7] = static_cast<uint8_t>(counter_ & 0xFF);
  for (int i = 0; i < 8; ++i) id[8 + i] = random[2 + i];
  id[8] = static_cast<uint8_t>(0x80 | (id[8] & 0x3F));  // RFC 9562 variant 10xx
  return id;
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
