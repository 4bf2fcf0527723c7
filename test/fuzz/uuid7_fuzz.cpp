// Fuzz target: Uuid7Generator never goes backwards whatever the clock does,
// always sets the version and variant bits, keeps the caller's random bits,
// and FormatUuid writes text that parses back to the same 16 bytes.
//
// Input: 6 bytes of starting Unix milliseconds, then steps of 11 bytes: a
// control byte (low 6 bits: clock moves by -32..+31 ms, so it also steps
// back; 0x40: call 2048 more times in that millisecond, enough to exhaust the
// 12-bit counter; 0x80: jump ahead by up to 2^32 ms) and 10 random bytes.
#include "core/uuid7.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using namespace outbox;

// The 48-bit field holds milliseconds until the year 10889; stay a little
// below so counter overflow (which borrows the next millisecond) fits too.
constexpr int64_t kMaxMs = (int64_t{1} << 48) - (int64_t{1} << 24);
constexpr int kMaxSteps = 64;
constexpr int kMaxBursts = 4;

[[noreturn]] void Fail(const char *what, const Uuid &id) {
  std::fprintf(stderr, "invariant failed: %s\n  id: %s\n", what, FormatUuid(id).c_str());
  std::abort();
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void ProveTextRoundTrips(const Uuid &id) {
  const std::string s = FormatUuid(id);
  if (s.size() != 36) Fail("text form is not 36 characters", id);
  Uuid back{};
  size_t b = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') Fail("dash missing in text form", id);
      continue;
    }
    const int hi = HexValue(s[i]), lo = HexValue(s[i + 1]);
    if (hi < 0 || lo < 0) Fail("text form is not lower-case hex", id);
    back[b++] = static_cast<uint8_t>(hi << 4 | lo);
    ++i;
  }
  if (b != 16 || back != id) Fail("text form does not parse back", id);
}

// One call, checked against the previous id.
void Step(Uuid7Generator &gen, int64_t unix_ms, const uint8_t random[10], Uuid *prev,
          bool *have_prev) {
  const Uuid id = gen.Next(unix_ms, random);
  if ((id[6] >> 4) != 7) Fail("version is not 7", id);
  if ((id[8] >> 6) != 2) Fail("variant is not 10", id);
  if ((id[8] & 0x3F) != (random[2] & 0x3F) || std::memcmp(&id[9], &random[3], 7) != 0) {
    Fail("rand_b is not the caller's random bits", id);
  }
  const int64_t ms = Uuid7UnixMs(id);
  const int64_t clock = unix_ms < 0 ? 0 : unix_ms;
  if (ms < clock) Fail("timestamp is behind the clock", id);
  if (*have_prev) {
    // Byte order is the order the publisher sorts by.
    if (std::memcmp(id.data(), prev->data(), id.size()) <= 0) Fail("id did not increase", id);
    const int64_t prev_ms = Uuid7UnixMs(*prev);
    if (ms > (clock > prev_ms ? clock : prev_ms + 1)) Fail("timestamp ran ahead", id);
  }
  *prev = id;
  *have_prev = true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 6) return 0;
  int64_t ms = 0;
  for (int i = 0; i < 6; ++i) ms = ms << 8 | data[i];
  if (ms > kMaxMs) ms = kMaxMs;
  data += 6;
  size -= 6;

  Uuid7Generator gen;
  Uuid prev{};
  bool have_prev = false;
  int bursts = 0;
  for (int steps = 0; size >= 11 && steps < kMaxSteps; ++steps, data += 11, size -= 11) {
    const uint8_t control = data[0];
    const uint8_t *random = data + 1;
    ms += static_cast<int>(control & 0x3F) - 32;
    if (control & 0x80) ms += static_cast<int64_t>(random[0]) << 24 | random[1] << 16 | random[2];
    if (ms > kMaxMs) ms = kMaxMs;
    if (ms < -1000) ms = -1000;  // a clock before 1970 is clamped by Next
    Step(gen, ms, random, &prev, &have_prev);
    ProveTextRoundTrips(prev);
    if ((control & 0x40) && bursts++ < kMaxBursts) {
      for (int i = 0; i < 2048; ++i) Step(gen, ms, random, &prev, &have_prev);
    }
  }
  return 0;
}
