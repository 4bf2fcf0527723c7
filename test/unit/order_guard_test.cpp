// Per-key order across retries: an event waiting for a retry holds back every
// later event of the same route and key, and nothing else.
#include "core/order_guard.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>

namespace outbox {
namespace {

// Canonical UUIDv7 text for the n-th emitted event: byte order is emit order.
std::string Id(int n) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "01900000-0000-7000-8000-%012d", n);
  return buf;
}

constexpr int64_t kUntouched = -12345;

// MayDeliver without a batch; *until is reported through `until`.
bool May(const OrderGuard &g, const std::string &route, const std::string &key, int n,
         int64_t *until = nullptr) {
  int64_t u = kUntouched;
  const bool ok = g.MayDeliver(route, key, Id(n), nullptr, &u);
  if (until != nullptr) *until = u;
  return ok;
}

TEST(OrderGuard, NothingWaitingHoldsNothingBack) {
  OrderGuard g;
  EXPECT_TRUE(May(g, "orders.*", "k", 1));
  EXPECT_EQ(g.size(), 0u);
}

// An event whose retry time passed long ago and that was not claimed again
// may have been recorded by another publisher: the guard reports it, so the
// publisher reads the order state again instead of holding the key forever.
TEST(OrderGuard, AKeyHeldPastItsRetryTimeIsReportedOverdue) {
  OrderGuard g;
  EXPECT_FALSE(g.AnyWaitingUntilBefore(1000));
  g.Block("orders.*", "k", Id(1), 500);
  g.Block("orders.*", "other", Id(2), 2000);
  EXPECT_FALSE(g.AnyWaitingUntilBefore(500));  // not before its own time
  EXPECT_TRUE(g.AnyWaitingUntilBefore(501));
  g.Release("orders.*", "k", Id(1));
  EXPECT_FALSE(g.AnyWaitingUntilBefore(1999));
  EXPECT_TRUE(g.AnyWaitingUntilBefore(2001));
  g.Clear();
  EXPECT_FALSE(g.AnyWaitingUntilBefore(1 << 30));
}

// TAP 040 on PostgreSQL 18 under load: an event recorded by another
// publisher stayed in this guard, and the later events of its key, parked
// behind it and claimed again every cycle, kept the key's latest time fresh.
// The stale event's own time is what tells.
TEST(OrderGuard, AStaleEventIsOverdueWhileTheEventsParkedBehindItMoveOn) {
  OrderGuard g;
  g.Block("orders.*", "k", Id(1), 100);  // recorded elsewhere: never blocked again
  for (int64_t now = 200; now <= 2000; now += 100) {
    g.Block("orders.*", "k", Id(2), now);  // parked behind it, again and again
    g.Block("orders.*", "k", Id(3), now);
  }
  EXPECT_TRUE(g.AnyWaitingUntilBefore(1000));
  g.Release("orders.*", "k", Id(1));
  EXPECT_FALSE(g.AnyWaitingUntilBefore(1000));
}

TEST(OrderGuard, LaterEventOfSameRouteAndKeyIsHeldBehindWaitingEvent) {
  OrderGuard g;
  g.Block("orders.*", "customer-1", Id(1), 5000);
  int64_t until = 0;
  EXPECT_FALSE(May(g, "orders.*", "customer-1", 2, &until));
  EXPECT_EQ(until, 5000);
  EXPECT_FALSE(May(g, "orders.*", "customer-1", 99, &until));
  EXPECT_EQ(until, 5000);
}

TEST(OrderGuard, OtherKeyOnSameRouteIsNotHeld) {
  OrderGuard g;
  g.Block("orders.*", "customer-1", Id(1), 5000);
  EXPECT_TRUE(May(g, "orders.*", "customer-2", 2));
  EXPECT_TRUE(May(g, "orders.*", "", 2));
  EXPECT_TRUE(May(g, "orders.*", "customer-10", 2));
}

TEST(OrderGuard, SameKeyOnOtherRouteIsNotHeld) {
  OrderGuard g;
  g.Block("orders.*", "customer-1", Id(1), 5000);
  EXPECT_TRUE(May(g, "payments.*", "customer-1", 2));
  EXPECT_TRUE(May(g, "orders.created", "customer-1", 2));
}

TEST(OrderGuard, RouteAndKeyAreNotConfusedByConcatenation) {
  OrderGuard g;
  g.Block("ab", "c", Id(1), 5000);
  EXPECT_TRUE(May(g, "a", "bc", 2));
  EXPECT_TRUE(May(g, "abc", "", 2));
}

TEST(OrderGuard, EarliestWaitingEventItselfMayGo) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 5000);
  EXPECT_TRUE(May(g, "r", "k", 1));
  // Also when later events wait behind it.
  g.Block("r", "k", Id(2), 5000);
  g.Block("r", "k", Id(3), 5000);
  EXPECT_TRUE(May(g, "r", "k", 1));
  EXPECT_FALSE(May(g, "r", "k", 2));
  EXPECT_FALSE(May(g, "r", "k", 3));
}

TEST(OrderGuard, EarlierEventIsNotHeldByALaterWaitingOne) {
  // Order means later waits for earlier, never the reverse.
  OrderGuard g;
  g.Block("r", "k", Id(5), 5000);
  EXPECT_TRUE(May(g, "r", "k", 4));
  EXPECT_TRUE(May(g, "r", "k", 1));
}

TEST(OrderGuard, EmitOrderIsTheIdsByteOrder) {
  OrderGuard g;
  g.Block("r", "k", "0190a000-0000-7000-8000-000000000000", 5000);
  EXPECT_FALSE(g.MayDeliver("r", "k", "0190b000-0000-7000-8000-000000000000", nullptr, nullptr));
  EXPECT_TRUE(g.MayDeliver("r", "k", "01909fff-ffff-7fff-bfff-ffffffffffff", nullptr, nullptr));
}

TEST(OrderGuard, EventMayGoOnceEveryEarlierWaitingEventIsReleased) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 1000);
  g.Block("r", "k", Id(2), 2000);
  g.Release("r", "k", Id(1));
  EXPECT_FALSE(May(g, "r", "k", 3));  // 2 still waits
  EXPECT_TRUE(May(g, "r", "k", 2));
  g.Release("r", "k", Id(2));
  EXPECT_TRUE(May(g, "r", "k", 3));
  EXPECT_EQ(g.size(), 0u);
}

TEST(OrderGuard, ReleasingTheLaterEventDoesNotFreeTheKey) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 1000);
  g.Block("r", "k", Id(2), 1000);
  g.Release("r", "k", Id(2));
  EXPECT_FALSE(May(g, "r", "k", 3));
}

TEST(OrderGuard, ReleaseOfOtherRouteOrKeyOrUnknownEventChangesNothing) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 1000);
  g.Release("r", "other", Id(1));
  g.Release("other", "k", Id(1));
  g.Release("r", "k", Id(7));
  g.Release("nowhere", "nothing", Id(1));
  EXPECT_FALSE(May(g, "r", "k", 2));
  EXPECT_EQ(g.size(), 1u);
}

TEST(OrderGuard, BlockingTheSameEventTwiceNeedsOneRelease) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 1000);
  g.Block("r", "k", Id(1), 3000);  // failed again, later retry time
  int64_t until = 0;
  EXPECT_FALSE(May(g, "r", "k", 2, &until));
  EXPECT_EQ(until, 3000);
  g.Release("r", "k", Id(1));
  EXPECT_TRUE(May(g, "r", "k", 2));
}

TEST(OrderGuard, InBatchAdmitsLaterEventWhenEveryEarlierWaitingOneIsAdmitted) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 1000);
  g.Block("r", "k", Id(2), 1000);
  int64_t until = kUntouched;

  std::set<std::string> batch = {Id(1)};
  EXPECT_FALSE(g.MayDeliver("r", "k", Id(3), &batch, &until));
  EXPECT_EQ(until, 1000);

  batch = {Id(2)};
  EXPECT_FALSE(g.MayDeliver("r", "k", Id(3), &batch, &until));

  batch = {Id(1), Id(2)};
  EXPECT_TRUE(g.MayDeliver("r", "k", Id(3), &batch, &until));
  EXPECT_TRUE(g.MayDeliver("r", "k", Id(2), &batch, &until));

  // Events of other keys in the batch do not count.
  g.Block("r", "k2", Id(4), 1000);
  batch = {Id(1), Id(2)};
  EXPECT_FALSE(g.MayDeliver("r", "k2", Id(5), &batch, &until));
  batch.insert(Id(4));
  EXPECT_TRUE(g.MayDeliver("r", "k2", Id(5), &batch, &until));
}

TEST(OrderGuard, EmptyBatchAdmitsNothingBehindAWaitingEvent) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 1000);
  const std::set<std::string> empty;
  int64_t until = 0;
  EXPECT_FALSE(g.MayDeliver("r", "k", Id(2), &empty, &until));
  EXPECT_EQ(until, 1000);
}

TEST(OrderGuard, UntilIsTheLatestTimeAnyWaitingEventWaitsFor) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 100);
  g.Block("r", "k", Id(2), 300);
  g.Block("r", "k", Id(3), 200);
  int64_t until = 0;
  EXPECT_FALSE(May(g, "r", "k", 4, &until));
  EXPECT_EQ(until, 300);
  // Other keys keep their own time.
  g.Block("r", "k2", Id(5), 50);
  EXPECT_FALSE(May(g, "r", "k2", 6, &until));
  EXPECT_EQ(until, 50);
}

// An event awaiting a late answer is parked for the sink's whole timeout,
// the next one of its key behind it for a second at a time. Once the answer
// is in, a third one waits as long as the second, not for the first's
// timeout (else the key stalls for it although nothing holds it back).
TEST(OrderGuard, AReleasedEventNoLongerSetsHowLongLaterOnesWait) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 10000);
  g.Block("r", "k", Id(2), 1000);
  g.Release("r", "k", Id(1));
  int64_t until = 0;
  EXPECT_FALSE(May(g, "r", "k", 3, &until));
  EXPECT_EQ(until, 1000);
}

TEST(OrderGuard, AnEventBlockedAgainForLessTimeHoldsLaterOnesOnlyThatLong) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 3000);
  g.Block("r", "k", Id(2), 2000);
  g.Block("r", "k", Id(1), 1000);  // the latest decision about it
  int64_t until = 0;
  EXPECT_FALSE(May(g, "r", "k", 3, &until));
  EXPECT_EQ(until, 2000) << "the second one's time is now the latest";
  g.Block("r", "k", Id(2), 500);
  EXPECT_FALSE(May(g, "r", "k", 3, &until));
  EXPECT_EQ(until, 1000);
}

TEST(OrderGuard, ReleasingAnEventThatDoesNotHoldTheLatestTimeKeepsIt) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 3000);
  g.Block("r", "k", Id(2), 1000);
  g.Release("r", "k", Id(2));
  g.Release("r", "k", Id(7));  // never waited: nothing changes
  int64_t until = 0;
  EXPECT_FALSE(May(g, "r", "k", 3, &until));
  EXPECT_EQ(until, 3000);
  g.Block("r", "k", Id(4), 5000);  // a later one parked further out counts too
  EXPECT_FALSE(May(g, "r", "k", 3, &until));
  EXPECT_EQ(until, 5000);
}

TEST(OrderGuard, UntilIsOnlyWrittenWhenTheEventIsHeld) {
  OrderGuard g;
  g.Block("r", "k", Id(5), 100);
  int64_t until = kUntouched;
  EXPECT_TRUE(May(g, "r", "k", 1, &until));
  EXPECT_EQ(until, kUntouched);
}

TEST(OrderGuard, SizeCountsRouteKeyPairsAndClearForgetsThem) {
  OrderGuard g;
  g.Block("r", "k", Id(1), 100);
  g.Block("r", "k", Id(2), 100);
  g.Block("r", "k2", Id(3), 100);
  g.Block("r2", "k", Id(4), 100);
  EXPECT_EQ(g.size(), 3u);
  g.Clear();
  EXPECT_EQ(g.size(), 0u);
  EXPECT_TRUE(May(g, "r", "k", 9));
  EXPECT_TRUE(May(g, "r", "k2", 9));
  EXPECT_TRUE(May(g, "r2", "k", 9));
}

TEST(OrderGuard, IdsAreKeptAsTheirSixteenBytesInEmitOrder) {
  const std::string text = "0190f5f0-1a2b-7c3d-8e4f-a0b1c2d3e4f5";
  EXPECT_EQ(OrderGuard::TextOf(OrderGuard::IdOf(text)), text);
  EXPECT_LT(OrderGuard::IdOf(Id(9)), OrderGuard::IdOf(Id(10)));
  // Not canonical: a stable stand-in of its own, never mistaken for another.
  EXPECT_EQ(OrderGuard::IdOf("not-an-id"), OrderGuard::IdOf("not-an-id"));
  EXPECT_NE(OrderGuard::IdOf("not-an-id"), OrderGuard::IdOf("not-an-iD"));
}

TEST(OrderGuard, KeysOfAnySizeAndASecretHashKeepTheRules) {
  OrderGuard g;
  g.SetHashKey(HashKey{0x1234, 0x5678});
  const std::string big(4096, 'x');
  g.Block("orders.*", big, Id(1), 7000);
  int64_t until = 0;
  EXPECT_FALSE(May(g, "orders.*", big, 2, &until));
  EXPECT_EQ(until, 7000);
  EXPECT_TRUE(May(g, "orders.*", big.substr(1), 2)) << "a different key";
  EXPECT_TRUE(May(g, "orders.*", big + "x", 2)) << "a different key";
  g.Release("orders.*", big, Id(1));
  EXPECT_TRUE(May(g, "orders.*", big, 2));
  EXPECT_EQ(g.size(), 0u);
}

TEST(OrderGuard, ManyWaitingEventsOfHugeKeysKeepNoKeyText) {
  // 2,000 keys of 4 kB, 5 waiting events each: 40 MB of key text that the
  // guard must not hold. Its entries are fixed-size (hash, 16-byte ids), so
  // this only checks that every key still blocks exactly its own events.
  OrderGuard g;
  for (int k = 0; k < 2000; ++k) {
    const std::string key = std::string(4090, 'k') + std::to_string(k);
    for (int e = 0; e < 5; ++e) g.Block("orders.*", key, Id(k * 10 + e), 100 + k);
  }
  EXPECT_EQ(g.size(), 2000u);
  int64_t until = 0;
  EXPECT_FALSE(May(g, "orders.*", std::string(4090, 'k') + "1999", 1999 * 10 + 9, &until));
  EXPECT_EQ(until, 100 + 1999);
  EXPECT_TRUE(May(g, "orders.*", std::string(4090, 'k') + "2000", 1));
}

// A poison event parks every later event of its key: each is parked until
// the latest time any of them waits for, so a key's long tail (TAP 139 saw
// 3,821 events of one key) shares one time. Once the head goes, the tail
// drains in id order, each delivered event released. Every one of them
// holds the latest time: were it found again by walking the rest of the
// key at each release, draining n events would cost n*n/2 steps in the
// publisher's cycle, where parking them cost n log n.
TEST(OrderGuard, DrainingAKeysLongTailCostsNoMoreThanParkingIt) {
  OrderGuard g;
  constexpr int kTail = 10000;
  const auto started = std::chrono::steady_clock::now();
  g.Block("r", "k", Id(0), 5000);                                   // the head: retried, then dead
  for (int n = 1; n <= kTail; ++n) g.Block("r", "k", Id(n), 5000);  // parked behind it
  const auto parked = std::chrono::steady_clock::now();
  g.Release("r", "k", Id(0));
  for (int n = 1; n <= kTail; ++n) g.Release("r", "k", Id(n));  // delivered in id order
  const auto drained = std::chrono::steady_clock::now();
  EXPECT_EQ(g.size(), 0u);
  const auto park_us = std::chrono::duration_cast<std::chrono::microseconds>(parked - started);
  const auto drain_us = std::chrono::duration_cast<std::chrono::microseconds>(drained - parked);
  EXPECT_LE(drain_us.count(), 10 * park_us.count() + 50000)
      << "parking " << kTail << " events took " << park_us.count() << " us, draining them "
      << drain_us.count() << " us";
}

// A key's tail parked in two cycles (at 1000, then at 2000), all due now; a
// claim takes them, the sink cuts its call short, and the rest of the chain
// is due with its first event not sent (Verdicts::Judge's cut_heads:
// min(now, EarliestUntil), here 1000). Each event parked at 2000 and blocked
// again at 1000 held the latest time, shared with the others of its cycle:
// blocking them again must not walk the whole key each time.
TEST(OrderGuard, BlockingAKeysTailAgainForLessCostsNoMoreThanParkingIt) {
  OrderGuard g;
  constexpr int kTail = 10000;
  const auto started = std::chrono::steady_clock::now();
  for (int n = 1; n <= kTail; ++n) g.Block("r", "k", Id(n), n <= kTail / 2 ? 1000 : 2000);
  const auto parked = std::chrono::steady_clock::now();
  for (int n = 1; n <= kTail; ++n) g.Block("r", "k", Id(n), 1000);  // the cut chain's time
  const auto again = std::chrono::steady_clock::now();
  int64_t until = 0;
  EXPECT_FALSE(May(g, "r", "k", kTail + 1, &until));
  EXPECT_EQ(until, 1000);
  const auto park_us = std::chrono::duration_cast<std::chrono::microseconds>(parked - started);
  const auto again_us = std::chrono::duration_cast<std::chrono::microseconds>(again - parked);
  EXPECT_LE(again_us.count(), 10 * park_us.count() + 50000)
      << "parking " << kTail << " events took " << park_us.count() << " us, blocking them again "
      << again_us.count() << " us";
}
}  // namespace
}  // namespace outbox
