// Exponential backoff with full jitter: the delay before a retry stays in
// [min, max], its ceiling doubles per attempt, and the jitter spans the whole
// range from min to the ceiling.
#include "core/backoff.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace outbox {
namespace {

// The largest double below 1: the top of BackoffMs's unit_random range.
const double kAlmostOne = std::nextafter(1.0, 0.0);

const std::vector<double> kRandoms = {0.0, 1e-12, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999999, kAlmostOne};

TEST(Backoff, NeverBelowMinimumNorAboveMaximum) {
  struct Range {
    int64_t min_ms, max_ms;
  };
  const std::vector<Range> ranges = {{100, 60000}, {1, 1},       {1, 2},
                                     {250, 1000},  {1000, 1000}, {7, 86400000}};
  for (const Range &r : ranges) {
    for (int attempt = 1; attempt <= 80; ++attempt) {
      for (double u : kRandoms) {
        const int64_t ms = BackoffMs(attempt, r.min_ms, r.max_ms, u);
        EXPECT_GE(ms, r.min_ms) << "attempt " << attempt << " random " << u;
        EXPECT_LE(ms, r.max_ms) << "attempt " << attempt << " random " << u;
      }
    }
  }
}

TEST(Backoff, FirstRetryWaitsTheMinimum) {
  for (double u : kRandoms) EXPECT_EQ(BackoffMs(1, 100, 60000, u), 100) << "random " << u;
}

TEST(Backoff, CeilingDoublesWithEachAttemptUntilTheMaximum) {
  // With the largest random value the delay is the ceiling itself.
  EXPECT_EQ(BackoffMs(1, 100, 60000, kAlmostOne), 100);
  EXPECT_EQ(BackoffMs(2, 100, 60000, kAlmostOne), 200);
  EXPECT_EQ(BackoffMs(3, 100, 60000, kAlmostOne), 400);
  EXPECT_EQ(BackoffMs(4, 100, 60000, kAlmostOne), 800);
  EXPECT_EQ(BackoffMs(10, 100, 60000, kAlmostOne), 51200);
  EXPECT_EQ(BackoffMs(11, 100, 60000, kAlmostOne), 60000);  // 102400 capped
  EXPECT_EQ(BackoffMs(30, 100, 60000, kAlmostOne), 60000);
}

TEST(Backoff, DelayNeverShrinksAsAttemptsGrow) {
  for (double u : kRandoms) {
    int64_t previous = 0;
    for (int attempt = 1; attempt <= 70; ++attempt) {
      const int64_t ms = BackoffMs(attempt, 100, 60000, u);
      EXPECT_GE(ms, previous) << "attempt " << attempt << " random " << u;
      previous = ms;
    }
  }
}

TEST(Backoff, FullJitterSpansMinimumToCeiling) {
  // Attempt 4: ceiling 100 * 2^3 = 800.
  EXPECT_EQ(BackoffMs(4, 100, 60000, 0.0), 100);
  EXPECT_EQ(BackoffMs(4, 100, 60000, kAlmostOne), 800);
  const int64_t mid = BackoffMs(4, 100, 60000, 0.5);
  EXPECT_GE(mid, 440);
  EXPECT_LE(mid, 460);

  // Random draws cover the whole range, both ends included, and nothing else.
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int64_t lowest = INT64_MAX, highest = 0;
  std::vector<int> buckets(8, 0);  // [100, 800] in eighths
  for (int i = 0; i < 20000; ++i) {
    const int64_t ms = BackoffMs(4, 100, 60000, unit(rng));
    ASSERT_GE(ms, 100);
    ASSERT_LE(ms, 800);
    lowest = std::min(lowest, ms);
    highest = std::max(highest, ms);
    ++buckets[static_cast<size_t>(std::min<int64_t>((ms - 100) * 8 / 701, 7))];
  }
  EXPECT_LE(lowest, 101);
  EXPECT_GE(highest, 799);
  for (size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_GT(buckets[b], 2000) << "jitter is not uniform: bucket " << b;
  }
}

TEST(Backoff, JitterGrowsWithTheRandomValue) {
  int64_t previous = 0;
  for (int i = 0; i < 1000; ++i) {
    const int64_t ms = BackoffMs(6, 100, 60000, i / 1000.0);
    EXPECT_GE(ms, previous) << "random " << i / 1000.0;
    previous = ms;
  }
}

TEST(Backoff, MaximumBelowMinimumCountsAsMinimum) {
  for (int attempt : {1, 2, 5, 50}) {
    for (double u : kRandoms) {
      EXPECT_EQ(BackoffMs(attempt, 500, 100, u), 500) << "attempt " << attempt << " random " << u;
    }
  }
}

TEST(Backoff, MinimumEqualToMaximumIsAFixedDelay) {
  for (int attempt : {1, 2, 3, 64, INT_MAX}) {
    for (double u : kRandoms) EXPECT_EQ(BackoffMs(attempt, 750, 750, u), 750);
  }
}

TEST(Backoff, HugeAttemptNumbersDoNotOverflow) {
  for (int attempt : {31, 32, 62, 63, 64, 65, 1000, INT_MAX - 1, INT_MAX}) {
    for (double u : kRandoms) {
      const int64_t ms = BackoffMs(attempt, 100, 60000, u);
      EXPECT_GE(ms, 100) << "attempt " << attempt;
      EXPECT_LE(ms, 60000) << "attempt " << attempt;
    }
    EXPECT_EQ(BackoffMs(attempt, 100, 60000, kAlmostOne), 60000) << "attempt " << attempt;
    // Bounds near the top of int64_t: no signed overflow (UBSan checks), and
    // the result stays within them.
    for (double u : kRandoms) {
      const int64_t big = BackoffMs(attempt, INT64_MAX / 2, INT64_MAX, u);
      EXPECT_GE(big, INT64_MAX / 2) << "attempt " << attempt;
      EXPECT_LE(big, INT64_MAX) << "attempt " << attempt;
      const int64_t wide = BackoffMs(attempt, 1, INT64_MAX, u);
      EXPECT_GE(wide, 1) << "attempt " << attempt;
      const int64_t top = BackoffMs(attempt, INT64_MAX, INT64_MAX, u);
      EXPECT_EQ(top, INT64_MAX) << "attempt " << attempt;
    }
  }
}

TEST(Backoff, OutOfRangeInputsStayWithinBounds) {
  // Defensive: a random value outside [0, 1) or an attempt below 1 must not
  // leave [min, max].
  for (int attempt : {INT_MIN, -1, 0, 1, 5}) {
    for (double u : {-1.0, -0.0, 1.0, 2.0}) {
      const int64_t ms = BackoffMs(attempt, 100, 60000, u);
      EXPECT_GE(ms, 100) << "attempt " << attempt << " random " << u;
      EXPECT_LE(ms, 60000) << "attempt " << attempt << " random " << u;
    }
  }
}

}  // namespace
}  // namespace outbox
