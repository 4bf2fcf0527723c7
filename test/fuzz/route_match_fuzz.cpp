// Fuzz target: route resolution agrees with the contract's precedence rules.
//
// Input: the first line is the topic, every further line a route pattern (at
// most kMaxPatterns). PatternMatches is compared with a dynamic-programming
// glob written here, and BestPatternIndex / BestRoute with the contract read
// literally: an exact pattern beats any wildcard, among wildcards the longest
// wins, equal lengths go to the smaller pattern in byte order, and the answer
// does not depend on the order of the routes.
#include "core/route_match.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace outbox;

constexpr size_t kMaxPatterns = 32;

void Fail(const char *what, std::string_view topic, std::string_view pattern) {
  std::fprintf(stderr, "invariant failed: %s\n  topic:   \"%.*s\"\n  pattern: \"%.*s\"\n", what,
               static_cast<int>(topic.size()), topic.data(), static_cast<int>(pattern.size()),
               pattern.data());
  std::abort();
}

// The textbook O(|p|*|t|) glob: m[j] says whether pattern[0..i) matches
// topic[0..j). Slow but obviously right, unlike the backtracking matcher.
bool RefMatches(std::string_view pattern, std::string_view topic) {
  std::vector<char> m(topic.size() + 1, 0), next(topic.size() + 1, 0);
  m[0] = 1;
  for (char pc : pattern) {
    if (pc == '*') {
      // '*' after a matched prefix matches any run: prefix OR of the row.
      char any = 0;
      for (size_t j = 0; j <= topic.size(); ++j) {
        any = any || m[j];
        next[j] = any;
      }
    } else {
      next[0] = 0;
      for (size_t j = 1; j <= topic.size(); ++j) next[j] = m[j - 1] && topic[j - 1] == pc;
    }
    m.swap(next);
  }
  return m[topic.size()] != 0;
}

bool IsWildcard(std::string_view p) { return p.find('*') != std::string_view::npos; }

// The contract's winner, as an index: the first of the best-ranked patterns.
int RefBestIndex(const std::vector<std::string_view> &patterns, std::string_view topic) {
  int best = -1;
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string_view p = patterns[i];
    if (!RefMatches(p, topic)) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const std::string_view b = patterns[static_cast<size_t>(best)];
    bool better;
    if (IsWildcard(p) != IsWildcard(b)) {
      better = !IsWildcard(p);  // exact beats wildcard
    } else if (p.size() != b.size()) {
      better = p.size() > b.size();  // longest wins
    } else {
      better = p < b;  // byte order breaks ties; duplicates keep the first
    }
    if (better) best = static_cast<int>(i);
  }
  return best;
}

void ProveMatchAgreesWithReference(const std::vector<std::string_view> &patterns,
                                   std::string_view topic) {
  for (std::string_view p : patterns) {
    const bool got = PatternMatches(p, topic);
    if (got != RefMatches(p, topic)) Fail("PatternMatches disagrees with the reference", topic, p);
    // An exact pattern matches its own topic only.
    if (!IsWildcard(p) && got != (p == topic))
      Fail("exact pattern matches another topic", topic, p);
  }
}

void ProvePrecedenceFollowsContract(const std::vector<std::string_view> &patterns,
                                    std::string_view topic) {
  const int got = BestPatternIndex(patterns.data(), patterns.size(), topic);
  const int want = RefBestIndex(patterns, topic);
  if (got != want) {
    Fail("BestPatternIndex picked another route", topic,
         got < 0 ? std::string_view("<none>") : patterns[static_cast<size_t>(got)]);
  }

  // The catalog's row order must not matter: reversed, the same pattern wins.
  std::vector<std::string_view> reversed(patterns.rbegin(), patterns.rend());
  const int rev = BestPatternIndex(reversed.data(), reversed.size(), topic);
  if ((rev < 0) != (got < 0) ||
      (got >= 0 && reversed[static_cast<size_t>(rev)] != patterns[static_cast<size_t>(got)])) {
    Fail("the winner depends on route order", topic,
         got < 0 ? std::string_view("<none>") : patterns[static_cast<size_t>(got)]);
  }

  // BestRoute is the same decision over Route objects.
  std::vector<Route> routes;
  routes.reserve(patterns.size());
  for (std::string_view p : patterns) {
    Route r;
    r.pattern = std::string(p);
    r.sink = "s";
    routes.push_back(std::move(r));
  }
  const Route *route = BestRoute(routes, topic);
  const Route *expected = got < 0 ? nullptr : &routes[static_cast<size_t>(got)];
  if (route != expected) Fail("BestRoute disagrees with BestPatternIndex", topic, "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view in(reinterpret_cast<const char *>(data), size);
  size_t nl = in.find('\n');
  const std::string_view topic = in.substr(0, nl);
  std::vector<std::string_view> patterns;
  while (nl != std::string_view::npos && patterns.size() < kMaxPatterns) {
    const size_t start = nl + 1;
    nl = in.find('\n', start);
    patterns.push_back(in.substr(start, nl == std::string_view::npos ? nl : nl - start));
  }
  ProveMatchAgreesWithReference(patterns, topic);
  ProvePrecedenceFollowsContract(patterns, topic);
  return 0;
}
