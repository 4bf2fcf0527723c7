// Late answers on their own: a group its sink had not answered by the ack
// wait is parked with its keys held back, its answered part judged at once,
// and judged in full once every answer is in; a changed sink's producer is
// kept for it; a sink answering nothing is held. On the parts a Dispatcher
// wires together, with pipelined fake sinks.
#include "core/late_answers.hpp"
#include "dispatch_support.hpp"
#include "fake_sink.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;

constexpr int64_t kNow = kPartsNow;
// FakeSink's SettleLimitMs (10 s) and the margin, from kNow.
constexpr int64_t kParkedUntil = kNow + (10000 + LateAnswers::kLateMarginMs) * 1000;

class LateAnswersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_brokers.clear();
    parts_.Define("kafka");
    Broker().pipelined = true;
  }
  void TearDown() override { parts_.late.Drop(); }

  FakeBroker &Broker() { return *BrokerNamed("kafka"); }

  // Send the batch (all of it, one group) to sink "kafka", gather what it
  // answers at once, and hand the group to the late answers.
  void SendLate(PartsBatch *batch) {
    groups_.push_back(std::make_unique<SinkGroup>());
    SinkGroup &group = *groups_.back();
    group.sink_name = "kafka";
    group.members = batch->All();
    for (const EventRow &row : batch->rows) {
      group.messages.push_back(MessageOf(row, parts_.routes[0], 0, ""));
    }
    group.results.resize(batch->rows.size());
    group.sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
    group.sent_ms = SteadyMs();
    group.sent_unix_us = UnixNowUs();
    group.sink_ticket = group.sink->Send(group.messages.data(), group.messages.size(),
                                         group.results.data(), nullptr);
    (void)group.sink->CollectFor(group.sink_ticket, 0, nullptr);
    parts_.late.Take(&group, batch->rows.data(), batch->route_of.data(), batch->out.data(),
                     settings_, nullptr);
  }
  // Event 1 of "orders.a" (keyed when `key` is given, with `attempts`)
  // sent to a sink that answers nothing yet, and handed to the late answers.
  void SendUnanswered(std::optional<std::string> key = std::nullopt, int attempts = 0) {
    Broker().slow = true;
    batch_.Add(1, "orders.a", std::move(key), attempts);
    SendLate(&batch_);
  }
  // Everything Settle judged, now.
  std::vector<LateOutcome> Settle() {
    parts_.late.ClearOutcomes();
    parts_.late.Settle(settings_);
    std::vector<LateOutcome> outcomes;
    LateOutcome o;
    while (parts_.late.NextOutcome(&o)) outcomes.push_back(o);
    return outcomes;
  }
  bool HeldBack(int n, const std::string &key) {
    int64_t until = 0;
    return !parts_.guard.MayDeliver("orders.*", key, Id(n), nullptr, &until);
  }

  DispatchParts parts_;
  DispatchSettings settings_ = PartsSettings();
  PartsBatch batch_;
  std::vector<std::unique_ptr<SinkGroup>> groups_;
};

TEST_F(LateAnswersTest, AGroupNothingOfWhichWasAnsweredIsParkedWithItsKeysHeldBack) {
  Broker().slow = true;
  PartsBatch batch;
  batch.Add(1, "orders.a", "k");
  batch.Add(2, "orders.b");
  SendLate(&batch);
  for (const RowOutcome &out : batch.out) {
    EXPECT_TRUE(Is(out, Outcome::kPark));
    EXPECT_EQ(out.attempts, 0);
    EXPECT_EQ(out.next_attempt_us, kParkedUntil);
    EXPECT_STREQ(out.error, "waiting for sink \"kafka\" to answer");
  }
  EXPECT_EQ(parts_.late.Ids(), (std::vector<std::string>{Id(1), Id(2)}));
  EXPECT_EQ(parts_.late.keys().count(RouteKey("orders.*", "k")), 1u);
  EXPECT_TRUE(HeldBack(3, "k"));
  EXPECT_TRUE(parts_.late.SinkHasLate("kafka"));
  EXPECT_TRUE(parts_.late.SinkHasWholeLate("kafka"));
  EXPECT_TRUE(parts_.sinks["kafka"].slow);
  EXPECT_TRUE(Contains(parts_.TakeLogs(), "sink \"kafka\" has not answered within"));
  EXPECT_EQ(groups_.back()->sink, nullptr);  // the group is the late answers' now
}

TEST_F(LateAnswersTest, WhatTheSinkAnsweredIsJudgedAtOnceAndItsUnansweredTopicsBecomeSuspect) {
  Broker().stuck_topics = {"orders.b"};
  PartsBatch batch;
  batch.Add(1, "orders.a");
  batch.Add(2, "orders.b");
  SendLate(&batch);
  EXPECT_TRUE(Is(batch.out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(batch.out[1], Outcome::kPark));
  EXPECT_EQ(parts_.late.Ids(), std::vector<std::string>{Id(2)});
  EXPECT_FALSE(parts_.late.SinkHasWholeLate("kafka"));
  EXPECT_FALSE(parts_.sinks["kafka"].slow);
  EXPECT_TRUE(parts_.sinks.IsSuspect("kafka", "orders.b", SteadyMs()));
  EXPECT_FALSE(parts_.sinks.IsSuspect("kafka", "orders.a", SteadyMs()));
  EXPECT_TRUE(Contains(parts_.TakeLogs(), "answers, but not for topic(s) \"orders.b\""));
}

TEST_F(LateAnswersTest, AGroupIsJudgedOnceEveryAnswerIsInAndThenForgotten) {
  SendUnanswered("k", 1);
  EXPECT_FALSE(parts_.late.Arrived());
  EXPECT_TRUE(Settle().empty());  // nothing complete yet
  Broker().slow = false;
  EXPECT_TRUE(parts_.late.Arrived());
  const std::vector<LateOutcome> outcomes = Settle();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].id, Id(1));
  EXPECT_EQ(outcomes[0].attempts, 1);
  EXPECT_EQ(outcomes[0].parked_until_us, kParkedUntil);
  EXPECT_NE(outcomes[0].answered_at_us, 0);
  EXPECT_TRUE(Is(outcomes[0].outcome, Outcome::kPublished));
  EXPECT_TRUE(parts_.late.empty());
  EXPECT_TRUE(parts_.late.keys().empty());
  EXPECT_FALSE(HeldBack(2, "k"));
  EXPECT_NE(parts_.sinks["kafka"].last_answer_ms, 0);
}

TEST_F(LateAnswersTest, ADeliveredEventIsHandedOutAtOnceWhileItsGroupAwaitsAStuckTopic) {
  Broker().slow = true;
  PartsBatch batch;
  batch.Add(1, "orders.a", "ka");
  batch.Add(2, "orders.b", "kb");
  batch.Add(3, "orders.a", "kb");  // same key as the stuck one: stays held
  SendLate(&batch);
  EXPECT_TRUE(parts_.late.keys().count(RouteKey("orders.*", "ka")) == 1);
  // The broker answers again, but not for orders.b (a topic it lacks).
  Broker().slow = false;
  Broker().stuck_topics = {"orders.b"};
  EXPECT_TRUE(parts_.late.Arrived());
  std::vector<LateOutcome> outcomes = Settle();
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].id, Id(1));
  EXPECT_TRUE(Is(outcomes[0].outcome, Outcome::kPublished));
  EXPECT_NE(outcomes[0].answered_at_us, 0);
  EXPECT_EQ(outcomes[1].id, Id(3));
  EXPECT_TRUE(Is(outcomes[1].outcome, Outcome::kPublished));
  EXPECT_FALSE(HeldBack(4, "ka"));  // its key goes free
  EXPECT_EQ(parts_.late.keys().count(RouteKey("orders.*", "ka")), 0u);
  EXPECT_TRUE(HeldBack(5, "kb"));  // event 2 of kb still awaits its answer
  EXPECT_EQ(parts_.late.keys().count(RouteKey("orders.*", "kb")), 1u);
  EXPECT_EQ(parts_.late.Ids(), std::vector<std::string>{Id(2)});
  EXPECT_FALSE(parts_.late.Arrived());  // nothing new: no busy loop
  EXPECT_TRUE(Settle().empty());
  // Once the group is complete, only event 2 is judged into an outcome.
  Broker().stuck_topics.clear();
  outcomes = Settle();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].id, Id(2));
  EXPECT_TRUE(Is(outcomes[0].outcome, Outcome::kPublished));
  EXPECT_TRUE(parts_.late.empty());
  EXPECT_TRUE(parts_.late.keys().empty());
  EXPECT_FALSE(HeldBack(5, "kb"));
}

TEST_F(LateAnswersTest, AnEventTheSinkDidNotSendIsJudgedAtOnceNotKeptLate) {
  // The sink cut its call short: events 2 and 3 were never sent, while
  // event 1 awaits its answer. Kept late, they would wait parked for the
  // sink's whole settle time, and be sent again when it passed while their
  // late verdict still held their keys.
  Broker().stuck_ids = {Id(1)};
  Broker().cut_off_ids = {Id(2), Id(3)};
  PartsBatch batch;
  batch.Add(1, "orders.a", "k");
  batch.Add(2, "orders.a", "k");
  batch.Add(3, "orders.a", "j");
  SendLate(&batch);
  EXPECT_EQ(parts_.late.Ids(), std::vector<std::string>{Id(1)});
  EXPECT_EQ(batch.out[0].next_attempt_us, kParkedUntil);
  for (size_t i : {1, 2}) {
    EXPECT_TRUE(Is(batch.out[i], Outcome::kPark));
    EXPECT_EQ(batch.out[i].attempts, 0);
    EXPECT_EQ(batch.out[i].next_attempt_us, kNow);  // due at once
  }
  // Each holds its key back: the later events of "k" and "j" wait.
  EXPECT_TRUE(HeldBack(4, "k"));
  EXPECT_TRUE(HeldBack(5, "j"));
  // Event 1's answer comes: only its outcome is handed out.
  Broker().stuck_ids.clear();
  const std::vector<LateOutcome> outcomes = Settle();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].id, Id(1));
  EXPECT_TRUE(Is(outcomes[0].outcome, Outcome::kPublished));
}

TEST_F(LateAnswersTest, AnEventWhoseRouteWentIsPublishedIfTheBrokerTookItAndElseDueNow) {
  Broker().slow = true;
  Broker().script = [](const OutMessage &m, int) {
    return m.id == Id(2) ? Retriable() : Delivered();
  };
  PartsBatch batch;
  batch.Add(1, "orders.a");
  batch.Add(2, "orders.b");
  SendLate(&batch);
  parts_.routes.clear();
  Broker().slow = false;
  const std::vector<LateOutcome> outcomes = Settle();
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_TRUE(Is(outcomes[0].outcome, Outcome::kPublished));
  EXPECT_TRUE(Is(outcomes[1].outcome, Outcome::kPark));
  EXPECT_EQ(outcomes[1].outcome.next_attempt_us, kNow);
  EXPECT_STREQ(outcomes[1].outcome.error, "its route changed while its sink's answer was awaited");
}

TEST_F(LateAnswersTest, AChangedSinksProducerIsKeptUntilItsLateAnswersAreIn) {
  SendUnanswered();
  parts_.Define("kafka", "k2:9092");  // the hook hands the producer to the late answers
  EXPECT_EQ(Broker().destroyed, 0);
  EXPECT_FALSE(parts_.late.SinkHasLate("kafka"));  // no longer the new sink's
  EXPECT_FALSE(parts_.late.SinkHeld("kafka"));
  Broker().slow = false;
  const std::vector<LateOutcome> outcomes = Settle();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_TRUE(Is(outcomes[0].outcome, Outcome::kPublished));
  EXPECT_EQ(Broker().destroyed, 1);
}

TEST_F(LateAnswersTest, ASinkIsHeldAfterTwoUnansweredGroupsOrAThousandAwaitedEvents) {
  Broker().slow = true;
  PartsBatch first, second;
  first.Add(1, "orders.a");
  second.Add(2, "orders.a");
  SendLate(&first);
  EXPECT_FALSE(parts_.late.SinkHeld("kafka"));  // the next group goes, as a probe
  SendLate(&second);
  EXPECT_TRUE(parts_.late.SinkHeld("kafka"));
  EXPECT_FALSE(parts_.late.SinkHeld("other"));
  parts_.late.Drop();

  Broker().slow = false;
  Broker().stuck_topics = {"orders.b"};
  PartsBatch many;
  many.Add(1, "orders.a");  // answered: the group is its topic's trouble
  for (int n = 2; n <= static_cast<int>(LateAnswers::kHeldAfterLateEvents); ++n) {
    many.Add(n, "orders.b");
  }
  SendLate(&many);
  EXPECT_FALSE(parts_.late.SinkHeld("kafka"));  // one short
  PartsBatch more;
  more.Add(5000, "orders.b");
  SendLate(&more);
  EXPECT_TRUE(parts_.late.SinkHeld("kafka"));
}

TEST_F(LateAnswersTest, UnansweredGroupsOfTopicsAlreadySuspectDoNotHoldTheSink) {
  // orders.b is suspect on the sink (a partition without a leader, found
  // while the sink answered others). Its events, sent alone while the
  // sink's other topics are quiet, get no answer: that says nothing of the
  // sink, whose other topics must go on when they come again.
  parts_.sinks.SetSuspect("kafka", "orders.b", SteadyMs() + 60000);
  Broker().slow = true;
  PartsBatch first, second;
  first.Add(1, "orders.b");
  second.Add(2, "orders.b");
  SendLate(&first);
  SendLate(&second);
  EXPECT_FALSE(parts_.late.SinkHeld("kafka"));
  // A group holding another topic too still counts.
  PartsBatch third;
  third.Add(3, "orders.a");
  third.Add(4, "orders.b");
  SendLate(&third);
  PartsBatch fourth;
  fourth.Add(5, "orders.a");
  SendLate(&fourth);
  EXPECT_TRUE(parts_.late.SinkHeld("kafka"));
}

TEST_F(LateAnswersTest, AnAnswerFromTheSinkMakesItsUnansweredGroupsItsTopicsTrouble) {
  SendUnanswered();
  parts_.TakeLogs();
  parts_.late.SinkAnswers(&parts_.sinks["kafka"], "kafka");
  EXPECT_FALSE(parts_.late.SinkHasWholeLate("kafka"));
  EXPECT_TRUE(parts_.sinks.IsSuspect("kafka", "orders.a", SteadyMs()));
  EXPECT_FALSE(parts_.sinks["kafka"].slow);
  EXPECT_TRUE(Contains(parts_.TakeLogs(), "sink \"kafka\" answers within outbox.ack_wait again"));
}

TEST_F(LateAnswersTest, DroppingLateGroupsAbandonsTheirSendsAndForgetsTheirKeys) {
  SendUnanswered("k");
  parts_.TakeLogs();
  parts_.late.Drop();
  EXPECT_EQ(Broker().abandoned, 1);
  EXPECT_TRUE(parts_.late.empty());
  EXPECT_TRUE(parts_.late.keys().empty());
  EXPECT_TRUE(Contains(parts_.TakeLogs(), "1 batch(es) awaiting late answers given up"));
}

TEST_F(LateAnswersTest, LateGroupsHoldTheirKeysAgainAfterTheOrderStateWasCleared) {
  SendUnanswered("k");
  parts_.guard.Clear();
  EXPECT_FALSE(HeldBack(2, "k"));
  parts_.late.HoldKeys();
  EXPECT_TRUE(HeldBack(2, "k"));
}

}  // namespace
}  // namespace outbox
