// Which route an event's topic takes. PostgreSQL-free: the publisher resolves
// routes from a cached copy of outbox.routes, and outbox.route_for() shows
// users the same answer.
//
// Precedence (contract): an exact pattern beats any wildcard; among wildcard
// patterns the longest wins; equal lengths are broken by the smaller pattern
// in byte order, so the choice never depends on catalog order.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace outbox {

struct Route {
  std::string pattern;
  std::string sink;
  std::string target;  // empty: deliver to the event's topic
  bool has_target = false;
};

// '*' matches any run of characters, including none.
bool PatternMatches(std::string_view pattern, std::string_view topic);

// Index of the winning pattern among n patterns, or -1 when none matches.
// Takes plain views so PostgreSQL-facing code can call it without building
// containers.
int BestPatternIndex(const std::string_view *patterns, size_t n, std::string_view topic);

// The pattern as a LIKE pattern (backslash escapes) that matches the same
// topics: '*' becomes '%', and '%', '_' and '\' are escaped. For the claims,
// which leave in place the events no route takes.
std::string LikePatternOf(std::string_view pattern);

// The winning route for topic, or nullptr when none matches.
const Route *BestRoute(const std::vector<Route> &routes, std::string_view topic);

}  // namespace outbox
