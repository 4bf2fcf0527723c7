// Fuzz target: the name rules of names.hpp accept exactly what they promise.
// Each input is one candidate name; every rule is compared with a reference
// written from the header's words, so a future "optimisation" of names.cpp
// that lets one byte too many through (or rejects a valid name) aborts here.
#include "core/names.hpp"
#include "core/route_match.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

using namespace outbox;

void Fail(const char *what, std::string_view input) {
  std::fprintf(stderr, "invariant failed: %s (input length %zu)\n", what, input.size());
  std::abort();
}

// [A-Za-z0-9._-], spelled out rather than shared with names.cpp.
bool RefTopicChar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

bool RefAll(std::string_view s, size_t max_len, bool allow_star) {
  if (s.empty() || s.size() > max_len) return false;
  for (unsigned char c : s) {
    if (!RefTopicChar(c) && !(allow_star && c == '*')) return false;
  }
  return true;
}

void ProveRulesMatchTheirDefinitions(std::string_view s) {
  const bool topic = IsValidTopic(s);
  if (topic != RefAll(s, 249, false)) Fail("IsValidTopic != 1..249 of [A-Za-z0-9._-]", s);
  if (IsValidKafkaTopic(s) != (topic && s != "." && s != "..")) {
    Fail("IsValidKafkaTopic != valid topic other than . and ..", s);
  }
  const bool pattern = IsValidPattern(s);
  if (pattern != RefAll(s, 249, true)) Fail("IsValidPattern != 1..249 of [A-Za-z0-9._-*]", s);
  if (IsValidSinkName(s) != RefAll(s, 63, false)) {
    Fail("IsValidSinkName != 1..63 of [A-Za-z0-9._-]", s);
  }
  // Consequences other code relies on.
  if (topic && !pattern) Fail("a valid topic is not a valid pattern", s);
  if (IsValidSinkName(s) && !topic) Fail("a valid sink name is not a valid topic", s);
}

// A star-free pattern (every valid topic) is an exact route: it must match
// its own topic and nothing else, or exact routes would capture other topics.
void ProveTopicAsPatternMatchesOnlyItself(std::string_view s) {
  if (!IsValidTopic(s)) return;
  if (!PatternMatches(s, s)) Fail("a topic used as a pattern does not match itself", s);
  const std::string_view shorter = s.substr(0, s.size() - 1);
  if (PatternMatches(s, shorter)) Fail("an exact pattern matches a shorter topic", s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view s(reinterpret_cast<const char *>(data), size);
  ProveRulesMatchTheirDefinitions(s);
  ProveTopicAsPatternMatchesOnlyItself(s);
  return 0;
}
