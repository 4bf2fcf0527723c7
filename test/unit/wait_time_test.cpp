#include "core/wait_time.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace outbox {
namespace {

TEST(WaitTime, AMomentLessThanAMillisecondAwayIsAWaitOfOne) {
  EXPECT_EQ(WaitMsUntil(1'000'001, 1'000'000), 1);
  EXPECT_EQ(WaitMsUntil(1'000'999, 1'000'000), 1);
}

TEST(WaitTime, WholeMillisecondsAreExactAndPartsRoundUp) {
  EXPECT_EQ(WaitMsUntil(1'005'000, 1'000'000), 5);
  EXPECT_EQ(WaitMsUntil(1'005'001, 1'000'000), 6);
}

TEST(WaitTime, OnlyAMomentDueOrPastIsAWaitOfZero) {
  EXPECT_EQ(WaitMsUntil(1'000'000, 1'000'000), 0);
  EXPECT_EQ(WaitMsUntil(999'000, 1'000'000), 0);
  EXPECT_EQ(WaitMsUntil(std::numeric_limits<int64_t>::min(), 0), 0);
}

TEST(WaitTime, TheWholeRangeDoesNotOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(WaitMsUntil(kMax, kMin), static_cast<int64_t>(UINT64_MAX / 1000 + 1));
  EXPECT_GT(WaitMsUntil(kMax, 0), 0);
}

}  // namespace
}  // namespace outbox
