#include "core/route_match.hpp"

namespace outbox {

bool PatternMatches(std::string_view pattern, std::string_view topic) {
  // Iterative glob with single backtrack point: linear in practice, and never
  // exponential on patterns with many stars.
  size_t p = 0, t = 0;
  size_t star = std::string_view::npos, star_t = 0;
  while (t < topic.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_t = t;
    } else if (p < pattern.size() && pattern[p] == topic[t]) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {
bool IsWildcard(std::string_view pattern) { return pattern.find('*') != std::string_view::npos; }

// True when pattern a should win over pattern b (both match the topic).
bool Beats(std::string_view a, std::string_view b) {
  const bool a_exact = !IsWildcard(a);
  const bool b_exact = !IsWildcard(b);
  if (a_exact != b_exact) return a_exact;
  if (a.size() != b.size()) return a.size() > b.size();
  return a < b;
}
}  // namespace

int BestPatternIndex(const std::string_view *patterns, size_t n, std::string_view topic) {
  int best = -1;
  for (size_t i = 0; i < n; ++i) {
    if (!PatternMatches(patterns[i], topic)) continue;
    if (best < 0 || Beats(patterns[i], patterns[best])) best = static_cast<int>(i);
  }
  return best;
}

std::string LikePatternOf(std::string_view pattern) {
  std::string like;
  like.reserve(pattern.size() + 4);
  for (const char c : pattern) {
    if (c == '*') {
      like += '%';
    } else {
      if (c == '%' || c == '_' || c == '\\') like += '\\';
      like += c;
    }
  }
  return like;
}

const Route *BestRoute(const std::vector<Route> &routes, std::string_view topic) {
  std::vector<std::string_view> patterns;
  patterns.reserve(routes.size());
  for (const Route &r : routes) patterns.emplace_back(r.pattern);
  const int best = BestPatternIndex(patterns.data(), patterns.size(), topic);
  return best < 0 ? nullptr : &routes[static_cast<size_t>(best)];
}

}  // namespace outbox
