// The ready claims' floor (core/claim_floor.hpp): where a ready claim starts,
// where the floor may go, and every reset that starts the claims from the
// beginning again. A publish cycle is driven as publisher/claim.cpp drives
// it: the resets, BeginCycle, the look-back for passed transactions, the
// window's claims, WindowEnded, the batches' outcomes, then Committed or
// Aborted.
#include "core/claim_floor.hpp"

#include <gtest/gtest.h>

#include <cstdint>

#include "core/partition_calendar.hpp"

namespace outbox {
namespace {

constexpr int64_t kSecond = ClaimFloor::kUsPerSecond;
// 2026-01-01 00:00:00 UTC as a PostgreSQL timestamp.
constexpr int64_t kT0 = int64_t{820454400} * kSecond;

// An event id emitted at `t` (a UUIDv7 with `rest` in its other bits).
IdPosition IdAt(int64_t t, uint64_t rest = 0x7000800000000001ULL) {
  IdPosition id = IdFloorAt(t);
  id.high |= 0x7000;  // version 7, counter 0
  id.low = rest;
  return id;
}

// A floor that has been running for a while, with its first full scan done
// at kT0 (a fresh one starts with one).
class ClaimFloorTest : public ::testing::Test {
 protected:
  void SetUp() override { ShortCycle(kT0); }

  // A cycle begins at `now` with no emitter open: its bound is a second back.
  void Begin(int64_t now) { floor_.BeginCycle(now, ClaimFloor::SafeBound(now, 0)); }
  void EndWindowAndCommit() {
    floor_.WindowEnded();
    floor_.Committed();
  }
  // One cycle at `now` whose single ready claim comes back short; the floor
  // goes up to the bound at the commit.
  void ShortCycle(int64_t now) {
    Begin(now);
    floor_.ReadyClaimCameBackShort();
    EndWindowAndCommit();
  }
  // One cycle at `now`, bounded by `bound`, whose single ready claim comes
  // back full at `last`: its next claim would start after `last`. Returns
  // where the floor went at the commit.
  IdPosition FullCycle(int64_t now, const IdPosition &bound, const IdPosition &last) {
    floor_.BeginCycle(now, bound);
    floor_.ReadyClaimCameBackFull(last);
    EXPECT_EQ(floor_.ClaimFrom(), After(last));
    EndWindowAndCommit();
    return floor_.Remembered();
  }

  // `report` (KeySlotsAre, ResetCountIs) with a new count starts the claims
  // from the beginning; with the same count again, it keeps the floor.
  void ExpectResetWhenTheCountChanges(bool (ClaimFloor::*report)(uint64_t)) {
    EXPECT_TRUE((floor_.*report)(1));
    EXPECT_TRUE(floor_.Remembered().IsBeginning());
    ShortCycle(kT0 + 2 * kSecond);
    EXPECT_FALSE((floor_.*report)(1));
    EXPECT_FALSE(floor_.Remembered().IsBeginning());
    EXPECT_TRUE((floor_.*report)(2));
    EXPECT_TRUE(floor_.Remembered().IsBeginning());
  }

  ClaimFloor floor_;
};

TEST(IdPosition, ComparesAsPostgresComparesUuids) {
  const uint8_t a[16] = {0x01, 0x9b, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 0xff};
  const uint8_t b[16] = {0x01, 0x9b, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 1, 0x00};
  const uint8_t c[16] = {0x01, 0x9c, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_LT(IdPositionFromBytes(a), IdPositionFromBytes(b));
  EXPECT_LT(IdPositionFromBytes(b), IdPositionFromBytes(c));
  EXPECT_FALSE(IdPositionFromBytes(c) < IdPositionFromBytes(c));
  uint8_t back[16] = {0};
  IdPositionToBytes(IdPositionFromBytes(b), back);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(back[i], b[i]) << "byte " << i;
}

TEST(IdPosition, IdFloorAtIsTheLowestIdOfItsMillisecond) {
  const IdPosition floor = IdFloorAt(kT0 + 1234);  // 1.234 ms: millisecond 1
  const int64_t unix_ms = (kT0 / 1000) + kPgEpochUnixSeconds * 1000 + 1;
  EXPECT_EQ(floor.high, static_cast<uint64_t>(unix_ms) << 16);
  EXPECT_EQ(floor.low, 0u);
  EXPECT_LT(floor, IdAt(kT0 + 1234));
  EXPECT_LT(IdAt(kT0), floor);
  EXPECT_EQ(IdTime(floor), kT0 + 1000);
  EXPECT_EQ(IdTime(IdAt(kT0 + 1234)), kT0 + 1000);
}

TEST(IdPosition, TimesBefore1970HaveNoFloor) {
  EXPECT_TRUE(IdFloorAt(-kPgEpochUnixSeconds * kSecond).IsBeginning());
  EXPECT_TRUE(IdFloorAt(-kPgEpochUnixSeconds * kSecond - 5 * kSecond).IsBeginning());
  EXPECT_FALSE(IdFloorAt(-kPgEpochUnixSeconds * kSecond + 1000).IsBeginning());
}

TEST(IdPosition, AfterIsTheNextIdCarryingIntoTheHighHalf) {
  EXPECT_EQ(After(IdPosition{5, 7}), (IdPosition{5, 8}));
  EXPECT_EQ(After(IdPosition{5, ~uint64_t{0}}), (IdPosition{6, 0}));
  EXPECT_TRUE(After(IdPosition::End()).IsBeginning());
}

TEST(ClaimFloorBound, KeepsASecondForClockSteps) {
  EXPECT_EQ(ClaimFloor::SafeBound(kT0, 0), IdFloorAt(kT0 - kSecond));
  // An emitter that started after that second does not lower it.
  EXPECT_EQ(ClaimFloor::SafeBound(kT0, kT0 - kSecond / 2), IdFloorAt(kT0 - kSecond));
}

TEST(ClaimFloorBound, StopsAtAHolderWithinTheGrace) {
  // Open for less than the grace: the emit horizon does not pass it, and
  // reports its first emit as the oldest.
  const int64_t first_emit = kT0 - kSecond / 2;
  EXPECT_GE(first_emit, ClaimFloor::PassHoldersBefore(kT0));
  EXPECT_FALSE(IdFloorAt(first_emit) < ClaimFloor::SafeBound(kT0, first_emit));
}

TEST(ClaimFloorBound, StopsAtAPassedHolderThatIsCommitting) {
  // Committing, a passed transaction counts in the horizon again until its
  // commit is visible.
  const int64_t first_emit = kT0 - 5 * kSecond;
  EXPECT_EQ(ClaimFloor::SafeBound(kT0, first_emit), IdFloorAt(first_emit));
}

TEST(ClaimFloorBound, FloorPassesAHolderOpenLongerThanTheGrace) {
  const int64_t first_emit = kT0 - 3 * kSecond / 2;
  // Passed: the horizon leaves it out (no other emitter), and the bound goes
  // above its first emit.
  EXPECT_EQ(ClaimFloor::PassHoldersBefore(kT0), kT0 - ClaimFloor::kPassHoldersAfterUs);
  EXPECT_LT(first_emit, ClaimFloor::PassHoldersBefore(kT0));
  EXPECT_LT(IdFloorAt(first_emit), ClaimFloor::SafeBound(kT0, 0));
}

// A prepared transaction of unknown emits (prepared before the server
// started) counts from its COMMIT PREPARED on as having emitted before 1970:
// the bound, and its look-back, are the beginning.
TEST(ClaimFloorBound, AnEmitBefore1970BoundsAndLooksBackToTheBeginning) {
  constexpr int64_t kBeforeEverything = INT64_MIN;
  EXPECT_TRUE(ClaimFloor::SafeBound(kT0, kBeforeEverything).IsBeginning());
  ClaimFloor floor;
  floor.BeginCycle(kT0, ClaimFloor::SafeBound(kT0, 0));
  floor.ReadyClaimCameBackShort();
  floor.WindowEnded();
  floor.Committed();
  floor.BeginCycle(kT0 + kSecond, ClaimFloor::SafeBound(kT0 + kSecond, 0));
  ASSERT_FALSE(floor.FullScanNext());
  EXPECT_TRUE(floor.HolderCommitted(kBeforeEverything));
  EXPECT_TRUE(floor.FullScanNext());
}

TEST(ClaimFloorBound, ReadyClaimsLookAnHourAroundTheirIds) {
  int64_t low = 0;
  int64_t high = 0;
  ASSERT_TRUE(ClaimFloor::CreatedAtRange(IdFloorAt(kT0 - 5 * kSecond), kT0, &low, &high));
  EXPECT_EQ(low, kT0 - 5 * kSecond - 3600 * kSecond);
  EXPECT_EQ(high, kT0 + 3600 * kSecond);
}

TEST(ClaimFloorBound, FullScanHasNoCreatedAtRange) {
  int64_t low = 1;
  int64_t high = 2;
  EXPECT_FALSE(ClaimFloor::CreatedAtRange(IdPosition::Beginning(), kT0, &low, &high));
  EXPECT_EQ(low, 1);
  EXPECT_EQ(high, 2);
}

TEST(ClaimFloorFresh, StartsWithAFullScan) {
  ClaimFloor floor;
  EXPECT_TRUE(floor.Remembered().IsBeginning());
  floor.BeginCycle(kT0, ClaimFloor::SafeBound(kT0, 0));
  EXPECT_TRUE(floor.FullScanNext());
  EXPECT_TRUE(floor.ClaimFrom().IsBeginning());
}

TEST_F(ClaimFloorTest, ShortClaimMovesTheFloorToTheBoundAtTheCommit) {
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(kT0 - kSecond));
  const int64_t now = kT0 + 2 * kSecond;
  Begin(now);
  EXPECT_FALSE(floor_.FullScanNext());
  EXPECT_EQ(floor_.ClaimFrom(), IdFloorAt(kT0 - kSecond));
  floor_.ReadyClaimCameBackShort();
  floor_.WindowEnded();
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(kT0 - kSecond)) << "moved before the commit";
  floor_.Committed();
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(now - kSecond));
}

TEST_F(ClaimFloorTest, FullClaimStopsTheFloorAtItsLastRowAndTheNextClaimStartsAfterIt) {
  const int64_t now = kT0 + 2 * kSecond;
  const IdPosition last = IdAt(kT0 - kSecond / 2);  // below the bound
  EXPECT_EQ(FullCycle(now, ClaimFloor::SafeBound(now, 0), last), last);
}

TEST_F(ClaimFloorTest, FloorNeverPassesTheSafeBound) {
  const int64_t now = kT0 + 2 * kSecond;
  const IdPosition bound = ClaimFloor::SafeBound(now, kT0 - kSecond / 2);
  // The first claim has no ceiling: its last row may lie above the bound.
  EXPECT_EQ(FullCycle(now, bound, IdAt(now - kSecond / 10)), bound);
}

TEST_F(ClaimFloorTest, LastClaimOfTheWindowDecidesWhereTheFloorGoes) {
  const int64_t now = kT0 + 5 * kSecond;
  Begin(now);
  const IdPosition first_last = IdAt(kT0);
  floor_.ReadyClaimCameBackFull(first_last);
  const IdPosition second_last = IdAt(kT0 + kSecond);
  floor_.ReadyClaimCameBackFull(second_last);
  EXPECT_EQ(floor_.ClaimFrom(), After(second_last));
  floor_.ReadyClaimCameBackShort();  // the third reached the bound
  EndWindowAndCommit();
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(now - kSecond));
}

TEST_F(ClaimFloorTest, CycleWithoutAReadyClaimLeavesTheFloor) {
  const IdPosition before = floor_.Remembered();
  const int64_t now = kT0 + 2 * kSecond;
  Begin(now);
  floor_.WindowEnded();  // its batch filled with due retries
  floor_.Committed();
  EXPECT_EQ(floor_.Remembered(), before);
}

TEST_F(ClaimFloorTest, AbortedCycleLeavesTheFloorWhereTheLastCommitPutIt) {
  const IdPosition before = floor_.Remembered();
  const int64_t now = kT0 + 2 * kSecond;
  Begin(now);
  floor_.ReadyClaimCameBackShort();
  floor_.WindowEnded();
  floor_.Aborted();
  EXPECT_EQ(floor_.Remembered(), before);
  floor_.Committed();  // a later commit with nothing pending moves nothing
  EXPECT_EQ(floor_.Remembered(), before);
}

TEST_F(ClaimFloorTest, AbortBeforeTheWindowEndedKeepsNothingOfTheCycle) {
  const IdPosition before = floor_.Remembered();
  const int64_t now = kT0 + 2 * kSecond;
  Begin(now);
  floor_.ReadyClaimCameBackFull(IdAt(kT0));
  floor_.Aborted();
  // The next cycle starts where the last commit left it, not after the row.
  Begin(now);
  EXPECT_EQ(floor_.ClaimFrom(), before);
}

TEST_F(ClaimFloorTest, EventLeftInPlaceStartsFromTheBeginning) {
  const int64_t now = kT0 + 2 * kSecond;
  Begin(now);
  floor_.ReadyClaimCameBackShort();
  floor_.WindowEnded();
  floor_.EventLeftInPlace();
  floor_.Committed();
  EXPECT_TRUE(floor_.Remembered().IsBeginning());
}

TEST_F(ClaimFloorTest, TopicsTakenAgainStartFromTheBeginning) {
  floor_.TopicsTakenAgain();
  EXPECT_TRUE(floor_.Remembered().IsBeginning());
  const int64_t now = kT0 + 2 * kSecond;
  Begin(now);
  EXPECT_TRUE(floor_.FullScanNext());
}

TEST_F(ClaimFloorTest, GainedKeySlotsStartFromTheBeginning) {
  ExpectResetWhenTheCountChanges(&ClaimFloor::KeySlotsAre);
}

TEST_F(ClaimFloorTest, ResetsOfTheDatabaseStartFromTheBeginning) {
  ExpectResetWhenTheCountChanges(&ClaimFloor::ResetCountIs);
}

TEST_F(ClaimFloorTest, ResetHoldsUntilAReadyClaimRuns) {
  floor_.ResetCountIs(1);
  // A cycle whose batch filled with due retries claims nothing ready.
  const int64_t now = kT0 + 2 * kSecond;
  Begin(now);
  EndWindowAndCommit();
  EXPECT_TRUE(floor_.Remembered().IsBeginning());
  Begin(now);
  EXPECT_TRUE(floor_.FullScanNext());
}

TEST_F(ClaimFloorTest, RouteChangeBetweenCyclesStartsTheNextFromTheBeginning) {
  floor_.RoutesChanged();
  const int64_t now = kT0 + 2 * kSecond;
  Begin(now);
  EXPECT_TRUE(floor_.FullScanNext());
  EXPECT_FALSE(floor_.RoutesChangedInCycle());
  floor_.ReadyClaimCameBackShort();
  EndWindowAndCommit();
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(now - kSecond));
}

TEST_F(ClaimFloorTest, RouteChangeDuringAWindowRestartsAtItsCommit) {
  const int64_t now = kT0 + 2 * kSecond;
  Begin(now);
  floor_.RoutesChanged();  // the first batch's configuration check reloaded them
  EXPECT_TRUE(floor_.RoutesChangedInCycle());
  floor_.ReadyClaimCameBackFull(IdAt(kT0));
  EndWindowAndCommit();
  EXPECT_TRUE(floor_.Remembered().IsBeginning());
  // Consumed by that commit: the cycle after moves on.
  Begin(now);
  EXPECT_FALSE(floor_.RoutesChangedInCycle());
}

TEST_F(ClaimFloorTest, RouteChangeInAnAbortedCycleRestartsTheNext) {
  const int64_t now = kT0 + 2 * kSecond;
  Begin(now);
  floor_.RoutesChanged();
  floor_.Aborted();
  Begin(now);
  EXPECT_TRUE(floor_.FullScanNext());
}

TEST_F(ClaimFloorTest, FullScanEveryTenSeconds) {
  ShortCycle(kT0 + 9 * kSecond);
  EXPECT_FALSE(floor_.Remembered().IsBeginning());
  const int64_t now = kT0 + ClaimFloor::kFullScanIntervalUs;
  Begin(now);
  EXPECT_TRUE(floor_.FullScanNext());
  floor_.ReadyClaimCameBackShort();
  EndWindowAndCommit();
  // Counted from that scan.
  ShortCycle(now + 9 * kSecond);
  EXPECT_FALSE(floor_.Remembered().IsBeginning());
}

TEST_F(ClaimFloorTest, FullScanIntervalGrowsToAHundredTimesItsDuration) {
  floor_.FullScanTook(kSecond / 2);  // 50 s between full scans
  Begin(kT0 + 30 * kSecond);
  EXPECT_FALSE(floor_.FullScanNext());
  floor_.Aborted();
  Begin(kT0 + 50 * kSecond);
  EXPECT_TRUE(floor_.FullScanNext());
}

TEST_F(ClaimFloorTest, FullScanIntervalNeverShrinksBelowTenSeconds) {
  floor_.FullScanTook(1000);  // 1 ms
  Begin(kT0 + 9 * kSecond);
  EXPECT_FALSE(floor_.FullScanNext());
}

// A floor at kT0 + 4 s (a cycle at kT0 + 5 s committed), and the cycle that
// begins at kNow, whose claims start there.
class PassedHolderTest : public ClaimFloorTest {
 protected:
  static constexpr int64_t kNow = kT0 + 8 * kSecond;

  void SetUp() override {
    ClaimFloorTest::SetUp();
    ShortCycle(kT0 + 5 * kSecond);
    Begin(kNow);
    started_ = floor_.ClaimFrom();
  }

  IdPosition started_;
};

TEST_F(PassedHolderTest, CommitOfAPassedHolderLooksBackOnce) {
  // The floor had passed a holder that first emitted at `first_emit`; its
  // commit is reported before this cycle's first claim, which starts from
  // that first emit.
  const int64_t first_emit = kT0 + kSecond;
  ASSERT_LT(IdFloorAt(first_emit), started_);
  EXPECT_TRUE(floor_.HolderCommitted(first_emit));
  EXPECT_EQ(floor_.ClaimFrom(), IdFloorAt(first_emit));
  floor_.ReadyClaimCameBackShort();
  EndWindowAndCommit();
  // That cycle's floor stays at the first emit (the commit may not have
  // been visible to it); the next cycle, with no report, moves on.
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(first_emit));
  ShortCycle(kNow + kSecond);
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(kNow));
}

TEST_F(PassedHolderTest, CommitDuringAClaimClaimsAgainFromItsFirstEmit) {
  const int64_t first_emit = kT0 + 2 * kSecond;
  EXPECT_TRUE(floor_.HolderCommitted(first_emit));  // reported after the claim
  EXPECT_EQ(floor_.ClaimFrom(), IdFloorAt(first_emit));
  EXPECT_LT(floor_.ClaimFrom(), started_);
  // For good: the remembered floor went down too, and an abort keeps it.
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(first_emit));
  floor_.Aborted();
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(first_emit));
}

TEST_F(PassedHolderTest, HolderThatFirstEmittedAboveTheClaimIsNotClaimedAgain) {
  const int64_t first_emit = kT0 + 6 * kSecond;  // above where the claim started
  EXPECT_FALSE(floor_.HolderCommitted(first_emit));
  EXPECT_EQ(floor_.ClaimFrom(), started_);
  EXPECT_EQ(floor_.Remembered(), started_);
  // But the floor this cycle leaves stays at or below that first emit.
  floor_.ReadyClaimCameBackShort();
  EndWindowAndCommit();
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(first_emit));
}

TEST_F(PassedHolderTest, HolderCapLastsOneCycle) {
  EXPECT_FALSE(floor_.HolderCommitted(kT0 + 6 * kSecond));
  EndWindowAndCommit();  // no ready claim: nothing pending, the cap unused
  EXPECT_EQ(floor_.Remembered(), started_);
  ShortCycle(kNow + kSecond);
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(kNow));
}

TEST_F(PassedHolderTest, EarliestOfSeveralHolderCommitsCapsTheFloor) {
  EXPECT_FALSE(floor_.HolderCommitted(kT0 + 6 * kSecond));
  floor_.ReadyClaimCameBackFull(IdAt(kT0 + 6 * kSecond + 500000));
  EXPECT_FALSE(floor_.HolderCommitted(kT0 + 7 * kSecond));
  EndWindowAndCommit();
  EXPECT_EQ(floor_.Remembered(), IdFloorAt(kT0 + 6 * kSecond));
}

}  // namespace
}  // namespace outbox
