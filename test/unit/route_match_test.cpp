// Which route an event's topic takes: glob matching and the precedence
// contract (exact > longest wildcard > smaller pattern in byte order).
#include "core/route_match.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox {
namespace {

Route R(std::string pattern, std::string sink = "s") {
  Route r;
  r.pattern = std::move(pattern);
  r.sink = std::move(sink);
  return r;
}

// The winning pattern, or "<none>".
std::string Winner(const std::vector<Route> &routes, std::string_view topic) {
  const Route *r = BestRoute(routes, topic);
  return r == nullptr ? "<none>" : r->pattern;
}

// BestPatternIndex over the patterns of routes, as a pattern ("<none>" for -1).
std::string IndexWinner(const std::vector<Route> &routes, std::string_view topic) {
  std::vector<std::string_view> patterns;
  for (const Route &r : routes) patterns.push_back(r.pattern);
  const int i = BestPatternIndex(patterns.data(), patterns.size(), topic);
  if (i < 0) return "<none>";
  EXPECT_LT(static_cast<size_t>(i), patterns.size());
  return std::string(patterns[static_cast<size_t>(i)]);
}

// Runs BestRoute and BestPatternIndex over routes in the given order and in
// reverse order.
void ExpectWinnerInAnyOrder(std::vector<Route> routes, std::string_view topic,
                            const std::string &expected) {
  EXPECT_EQ(Winner(routes, topic), expected) << "forward order, topic " << topic;
  EXPECT_EQ(IndexWinner(routes, topic), expected) << "forward order, topic " << topic;
  std::reverse(routes.begin(), routes.end());
  EXPECT_EQ(Winner(routes, topic), expected) << "reverse order, topic " << topic;
  EXPECT_EQ(IndexWinner(routes, topic), expected) << "reverse order, topic " << topic;
}

TEST(RouteMatch, ExactPatternMatchesOnlyTheSameTopic) {
  EXPECT_TRUE(PatternMatches("orders.created", "orders.created"));
  EXPECT_FALSE(PatternMatches("orders.created", "orders.create"));
  EXPECT_FALSE(PatternMatches("orders.created", "orders.createdd"));
  EXPECT_FALSE(PatternMatches("orders.created", "Orders.created"));
  EXPECT_FALSE(PatternMatches("orders", ""));
}

TEST(RouteMatch, StarMatchesAnyRunIncludingEmpty) {
  EXPECT_TRUE(PatternMatches("*", "orders"));
  EXPECT_TRUE(PatternMatches("*", ""));
  EXPECT_TRUE(PatternMatches("orders.*", "orders.created"));
  EXPECT_TRUE(PatternMatches("orders.*", "orders."));  // empty run
  EXPECT_TRUE(PatternMatches("orders.*", "orders.a.b.c"));
  EXPECT_TRUE(PatternMatches("orders*", "orders"));
  EXPECT_TRUE(PatternMatches("*orders", "orders"));
  EXPECT_TRUE(PatternMatches("ord*ers", "orders"));
  EXPECT_TRUE(PatternMatches("o*s", "orders"));
}

TEST(RouteMatch, PatternIsAnchoredAtBothEnds) {
  EXPECT_FALSE(PatternMatches("orders", "my.orders"));
  EXPECT_FALSE(PatternMatches("orders", "orders.created"));
  EXPECT_FALSE(PatternMatches("orders.*", "eu.orders.created"));
  EXPECT_FALSE(PatternMatches("*.created", "orders.created.v2"));
  EXPECT_FALSE(PatternMatches("orders.*", "orders"));  // the '.' is literal
  EXPECT_FALSE(PatternMatches("o*s", "orders.x"));
}

TEST(RouteMatch, DotAndOtherCharactersAreLiteral) {
  EXPECT_FALSE(PatternMatches("orders.created", "ordersXcreated"));
  EXPECT_FALSE(PatternMatches("a.*", "ab"));
}

TEST(RouteMatch, MultipleStarsEachMatchAnyRun) {
  EXPECT_TRUE(PatternMatches("a*b*c", "abc"));
  EXPECT_TRUE(PatternMatches("a*b*c", "aXXbYYc"));
  EXPECT_TRUE(PatternMatches("a*b*c", "a-b-b-c"));
  EXPECT_FALSE(PatternMatches("a*b*c", "acb"));
  EXPECT_FALSE(PatternMatches("a*b*c", "abcd"));
  EXPECT_TRUE(PatternMatches("*.*.*", "eu.orders.created"));
  EXPECT_TRUE(PatternMatches("*.*.*", ".."));
  EXPECT_FALSE(PatternMatches("*.*.*", "eu.orders"));
  EXPECT_TRUE(PatternMatches("**", "x"));
  EXPECT_TRUE(PatternMatches("*orders*", "eu.orders.created"));
}

TEST(RouteMatch, StarBacktracksWhenTheFirstCandidateFails) {
  EXPECT_TRUE(PatternMatches("*ab", "aab"));
  EXPECT_TRUE(PatternMatches("a*ab", "aaab"));
  EXPECT_TRUE(PatternMatches("*.created", "a.created.b.created"));
  EXPECT_TRUE(PatternMatches("*a*b", "xaxxaxb"));
  EXPECT_TRUE(PatternMatches("*aab", "aaaab"));
  EXPECT_FALSE(PatternMatches("*aab", "aaaaba"));
}

TEST(RouteMatch, PathologicalPatternFailsQuickly) {
  const std::string topic(100000, 'a');
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(PatternMatches("*a*a*a*a*a*a*b", topic));
  EXPECT_FALSE(PatternMatches("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", topic));
  EXPECT_TRUE(PatternMatches("*a*a*a*a*a*a*b", topic + "b"));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(2));
}

TEST(RouteMatch, NoMatchingRouteGivesNullptr) {
  EXPECT_EQ(BestRoute({}, "orders"), nullptr);
  const std::vector<Route> routes = {R("payments.*"), R("orders"), R("*.deleted")};
  EXPECT_EQ(BestRoute(routes, "orders.created"), nullptr);
}

TEST(RouteMatch, WinnerIsTheRouteElementItself) {
  std::vector<Route> routes = {R("orders.*", "kafka"), R("*", "redis")};
  routes[0].target = "orders-out";
  routes[0].has_target = true;
  const Route *r = BestRoute(routes, "orders.created");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r, &routes[0]);
  EXPECT_EQ(r->sink, "kafka");
  EXPECT_EQ(r->target, "orders-out");
  EXPECT_TRUE(r->has_target);
}

TEST(RouteMatch, ExactBeatsWildcardEvenWhenTheWildcardIsLonger) {
  // "orders.created*" is longer than the exact pattern and also matches.
  ExpectWinnerInAnyOrder({R("orders.created"), R("orders.created*"), R("*"), R("orders.*")},
                         "orders.created", "orders.created");
}

TEST(RouteMatch, LongestWildcardWins) {
  ExpectWinnerInAnyOrder({R("*"), R("orders.*"), R("orders.cr*"), R("*.created")}, "orders.created",
                         "orders.cr*");
  ExpectWinnerInAnyOrder({R("*"), R("orders.*"), R("*.created")}, "orders.created", "*.created");
  // A longer wildcard that does not match does not count.
  ExpectWinnerInAnyOrder({R("*"), R("orders.deleted.*")}, "orders.created", "*");
}

TEST(RouteMatch, EqualLengthWildcardsAreBrokenBySmallerByteOrder) {
  // Both length 4; '*' (0x2a) sorts before 'o'.
  ExpectWinnerInAnyOrder({R("ord*"), R("*ted")}, "orders.created", "*ted");
  ExpectWinnerInAnyOrder({R("orders.C*"), R("orders.*d")}, "orders.Created", "orders.*d");
  // Upper case sorts before lower case in byte order.
  ExpectWinnerInAnyOrder({R("*d*"), R("*D*")}, "orders.Deleted", "*D*");
  ExpectWinnerInAnyOrder({R("a*c"), R("ab*")}, "abc", "a*c");
  ExpectWinnerInAnyOrder({R("*b*"), R("a**"), R("**c")}, "abc", "**c");
}

TEST(RouteMatch, BestPatternIndexReturnsMinusOneWhenNothingMatches) {
  const std::string_view none[] = {"payments.*", "orders", "*.deleted"};
  EXPECT_EQ(BestPatternIndex(none, 3, "orders.created"), -1);
  EXPECT_EQ(BestPatternIndex(none, 0, "orders"), -1);  // n limits the search
}

TEST(RouteMatch, BestPatternIndexGivesTheIndexOfTheWinner) {
  const std::string_view patterns[] = {"*", "orders.created", "orders.*", "orders.created*"};
  EXPECT_EQ(BestPatternIndex(patterns, 4, "orders.created"), 1);
  EXPECT_EQ(BestPatternIndex(patterns, 4, "orders.created.v2"), 3);
  EXPECT_EQ(BestPatternIndex(patterns, 4, "orders.deleted"), 2);
  EXPECT_EQ(BestPatternIndex(patterns, 4, "payments"), 0);
  EXPECT_EQ(BestPatternIndex(patterns, 1, "orders.created"), 0);
}

TEST(RouteMatch, PrecedenceDoesNotDependOnCatalogOrder) {
  std::vector<Route> routes = {R("*"),          R("orders.*"),   R("*.created"), R("orders.c*"),
                               R("*s.created"), R("o*.created"), R("orders*"),   R("payments.*")};
  std::sort(routes.begin(), routes.end(),
            [](const Route &a, const Route &b) { return a.pattern < b.pattern; });
  // Longest matching wildcards are "*s.created" and "o*.created" (10 each);
  // '*' sorts first.
  do {
    ASSERT_EQ(Winner(routes, "orders.created"), "*s.created");
    // BestPatternIndex applies the same precedence.
    ASSERT_EQ(IndexWinner(routes, "orders.created"), "*s.created");
    ASSERT_EQ(IndexWinner(routes, "payments.refunded"), "payments.*");
  } while (std::next_permutation(routes.begin(), routes.end(), [](const Route &a, const Route &b) {
    return a.pattern < b.pattern;
  }));
}

}  // namespace
}  // namespace outbox
