// Key slots are shared out among live publishers evenly, the same way by
// every process, and a publisher starting or stopping moves only its share.
#include "core/key_slots.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace outbox {
namespace {

std::vector<int> Assign(const std::vector<bool> &live) {
  bool flags[64] = {false};
  for (size_t i = 0; i < live.size(); ++i) flags[i] = live[i];
  std::vector<int> owner(kKeySlots);
  for (int s = 0; s < kKeySlots; ++s) {
    owner[s] = PreferredOwner(s, flags, static_cast<int>(live.size()));
  }
  return owner;
}

TEST(KeySlots, OnePublisherOwnsEverySlot) {
  for (int owner : Assign({true})) EXPECT_EQ(owner, 0);
}

TEST(KeySlots, NoLivePublisherOwnsNothing) {
  for (int owner : Assign({false, false, false})) EXPECT_EQ(owner, -1);
}

TEST(KeySlots, OnlyLivePublishersOwnSlots) {
  for (int owner : Assign({false, true, false, true})) EXPECT_TRUE(owner == 1 || owner == 3);
}

TEST(KeySlots, FourPublishersShareRoughlyEvenly) {
  std::vector<int> count(4, 0);
  for (int owner : Assign({true, true, true, true})) count[owner]++;
  for (int c : count) {
    EXPECT_GT(c, kKeySlots / 4 * 3 / 4) << "a publisher got far less than its share";
    EXPECT_LT(c, kKeySlots / 4 * 5 / 4) << "a publisher got far more than its share";
  }
}

TEST(KeySlots, SixtyFourPublishersEachOwnSome) {
  std::vector<int> count(64, 0);
  for (int owner : Assign(std::vector<bool>(64, true))) count[owner]++;
  for (int c : count) EXPECT_GT(c, 0);
}

TEST(KeySlots, AStoppingPublisherMovesOnlyItsOwnSlots) {
  const std::vector<int> before = Assign({true, true, true, true});
  const std::vector<int> after = Assign({true, true, false, true});
  for (int s = 0; s < kKeySlots; ++s) {
    if (before[s] != 2) {
      EXPECT_EQ(after[s], before[s]) << "slot " << s << " moved needlessly";
    }
    EXPECT_NE(after[s], 2);
  }
}

TEST(KeySlots, AStartingPublisherTakesSlotsOnlyForItself) {
  const std::vector<int> before = Assign({true, true, false, true});
  const std::vector<int> after = Assign({true, true, true, true});
  int taken = 0;
  for (int s = 0; s < kKeySlots; ++s) {
    if (after[s] != before[s]) {
      EXPECT_EQ(after[s], 2) << "slot " << s << " moved between two old publishers";
      ++taken;
    }
  }
  EXPECT_GT(taken, kKeySlots / 8);
}

TEST(KeySlots, SameAnswerEveryTime) {
  EXPECT_EQ(Assign({true, true, true}), Assign({true, true, true}));
}

}  // namespace
}  // namespace outbox
