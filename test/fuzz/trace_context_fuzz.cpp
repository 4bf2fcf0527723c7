// Fuzz target: the W3C Trace Context checks accept exactly the header's grammar.
//
// The whole input is tried both as a traceparent and as a tracestate. The
// traceparent reference splits on '-' (the spec's own reading) instead of
// indexing fixed offsets as trace_context.cpp does, so the two formulations
// check each other; an accepted value must also rebuild from its fields.
#include "core/trace_context.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace outbox;

void Fail(const char *what, std::string_view input) {
  std::fprintf(stderr, "invariant failed: %s\n  input: \"%.*s\"\n", what,
               static_cast<int>(input.size()), input.data());
  std::abort();
}

bool LowerHex(std::string_view s, size_t len) {
  if (s.size() != len) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

std::vector<std::string_view> SplitDash(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    const size_t dash = s.find('-', start);
    parts.push_back(s.substr(start, dash == std::string_view::npos ? dash : dash - start));
    if (dash == std::string_view::npos) return parts;
    start = dash + 1;
  }
}

// version "-" trace-id "-" parent-id "-" flags [ "-" anything, versions > 00 ],
// at most 512 bytes, printable ASCII without space when longer than 55
bool RefTraceparent(std::string_view v) {
  if (v.size() > 512) return false;
  if (v.size() > 55) {
    for (char c : v) {
      if (c < 0x21 || c > 0x7e) return false;
    }
  }
  const std::vector<std::string_view> f = SplitDash(v);
  if (f.size() < 4) return false;
  if (!LowerHex(f[0], 2) || f[0] == "ff") return false;
  if (!LowerHex(f[1], 32) || AllZero(f[1])) return false;
  if (!LowerHex(f[2], 16) || AllZero(f[2])) return false;
  if (!LowerHex(f[3], 2)) return false;
  return f.size() == 4 || f[0] != "00";
}

bool RefTracestate(std::string_view v) {
  if (v.size() > 512) return false;
  for (unsigned char c : v) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

void ProveTraceparentFollowsGrammar(std::string_view v) {
  const bool ok = IsValidTraceparent(v);
  if (ok != RefTraceparent(v)) Fail(ok ? "accepted a bad traceparent" : "rejected a good one", v);
  if (!ok) return;
  // Round trip: the fields put back together are the value's first 55 bytes,
  // which are a valid traceparent on their own (what a version-00 reader keeps).
  const std::vector<std::string_view> f = SplitDash(v);
  const std::string rebuilt = std::string(f[0]) + "-" + std::string(f[1]) + "-" +
                              std::string(f[2]) + "-" + std::string(f[3]);
  if (v.substr(0, rebuilt.size()) != rebuilt || rebuilt.size() != 55) {
    Fail("fields do not rebuild the traceparent", v);
  }
  if (!IsValidTraceparent(rebuilt)) Fail("the 55-byte prefix of a valid value is invalid", v);
  // Version ff is forbidden whatever follows.
  std::string ff(v);
  ff[0] = ff[1] = 'f';
  if (IsValidTraceparent(ff)) Fail("version ff accepted", ff);
}

void ProveTracestateIsBoundedPrintableAscii(std::string_view v) {
  const bool ok = IsValidTracestate(v);
  if (ok != RefTracestate(v)) Fail(ok ? "accepted a bad tracestate" : "rejected a good one", v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view v(reinterpret_cast<const char *>(data), size);
  ProveTraceparentFollowsGrammar(v);
  ProveTracestateIsBoundedPrintableAscii(v);
  return 0;
}
