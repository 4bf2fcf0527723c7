// Verdicts on their own: what one group's answers make of each row
// (published, retried, dead, parked behind its key), and of the sink (down,
// available again), on the parts a Dispatcher wires together.
#include "core/verdict.hpp"
#include "dispatch_support.hpp"
#include "fake_sink.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;

constexpr int64_t kNow = kPartsNow;

class VerdictTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_brokers.clear();
    g_interrupted = false;
    parts_.Define("kafka");
  }
  void TearDown() override { g_interrupted = false; }

  // Judge the whole batch as one group of sink_name_ with these answers.
  void Judge(const std::vector<Delivery> &results, Sink *solo_sink = nullptr, bool partial = false,
             bool retired = false) {
    members_ = batch_.All();
    results_ = results;
    Judging j;
    j.rows = batch_.rows.data();
    j.route_of = batch_.route_of.data();
    j.members = &members_;
    j.results = &results_;
    j.settings = &settings_;
    j.out = batch_.out.data();
    j.sink_name = &sink_name_;
    j.solo_sink = solo_sink;
    j.partial = partial;
    j.retired = retired;
    j.alone = alone_;
    j.answered_others = answered_others_;
    parts_.verdicts.Judge(j, &Interrupted);
  }
  // Whether event n of key k on "orders.*" would be held back now.
  bool HeldBack(int n, const std::string &key) {
    int64_t until = 0;
    return !parts_.guard.MayDeliver("orders.*", key, Id(n), nullptr, &until);
  }

  DispatchParts parts_;
  PartsBatch batch_;
  DispatchSettings settings_ = PartsSettings();
  std::string sink_name_ = "kafka";
  std::vector<size_t> members_;
  std::vector<Delivery> results_;
  bool alone_ = false;            // Judging::alone
  bool answered_others_ = false;  // Judging::answered_others
};

TEST_F(VerdictTest, ADeliveredEventIsPublishedWithoutAnAttemptAndReleasesItsKey) {
  batch_.Add(1, "orders.a", "k");
  parts_.guard.Block("orders.*", "k", Id(1), kNow + 1000);
  Judge({Delivered()});
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPublished));
  EXPECT_EQ(batch_.out[0].attempts, 0);
  EXPECT_FALSE(HeldBack(2, "k"));
}

TEST_F(VerdictTest, AFailedAttemptIsRetriedWithinTheBackoffAndHoldsItsKeyBack) {
  batch_.Add(1, "orders.a", "k", 1);
  parts_.verdicts.Attempted(batch_.rows[0], parts_.routes[0], Retriable("timeout"), settings_,
                            &batch_.out[0]);
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kRetry));
  EXPECT_EQ(batch_.out[0].attempts, 2);
  EXPECT_GE(batch_.out[0].next_attempt_us, kNow + 100 * 1000);  // attempt 2: 100..200 ms
  EXPECT_LE(batch_.out[0].next_attempt_us, kNow + 200 * 1000);
  EXPECT_STREQ(batch_.out[0].error, "timeout");
  EXPECT_TRUE(HeldBack(2, "k"));
}

TEST_F(VerdictTest, ALateRefusalAmongOthersWaitsWithoutAnAttemptAndTheSinkWaitsInFull) {
  batch_.Add(1, "orders.a", "k", 1);
  batch_.Add(2, "orders.b");
  Judge({Rejected("too large"), Delivered()});  // no sink to retry it alone with
  EXPECT_TRUE(Is(batch_.out[1], Outcome::kPublished));
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark));
  EXPECT_EQ(batch_.out[0].attempts, 1);
  EXPECT_EQ(batch_.out[0].next_attempt_us, kNow + 100 * 1000);
  EXPECT_STREQ(batch_.out[0].error, "too large (sent with others: retried alone)");
  EXPECT_TRUE(parts_.sinks["kafka"].wait_in_full);
  EXPECT_TRUE(HeldBack(3, "k"));
}

TEST_F(VerdictTest, TheLastAllowedAttemptIsDeadWithAWarningAndFreesItsKey) {
  batch_.Add(1, "orders.a", "k", 2);
  parts_.guard.Block("orders.*", "k", Id(1), kNow + 1000);
  parts_.verdicts.Attempted(batch_.rows[0], parts_.routes[0], Rejected("poison"), settings_,
                            &batch_.out[0]);
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kDead));
  EXPECT_EQ(batch_.out[0].attempts, 3);
  EXPECT_FALSE(HeldBack(2, "k"));
  EXPECT_TRUE(Contains(parts_.TakeLogs(),
                       "event " + Id(1) + " (topic \"orders.a\") is dead after 3 attempts"));
}

TEST_F(VerdictTest, OnlyTransientFailuresMakeTheSinkDownAndParkItsEventsWithoutAttempts) {
  batch_.Add(1, "orders.a", "k");
  batch_.Add(2, "orders.b");
  Judge({Retriable("connection refused"), Retriable("connection refused")});
  const SinkState &state = parts_.sinks["kafka"];
  EXPECT_TRUE(state.down);
  EXPECT_EQ(state.failures, 1);
  EXPECT_EQ(state.last_error, "connection refused");
  EXPECT_GE(state.retry_at_us, kNow + 100 * 1000);
  EXPECT_LE(state.retry_at_us, kNow + 1000 * 1000);
  for (const RowOutcome &out : batch_.out) {
    EXPECT_TRUE(Is(out, Outcome::kPark));
    EXPECT_EQ(out.attempts, 0);
    EXPECT_EQ(out.next_attempt_us, state.retry_at_us);
  }
  EXPECT_TRUE(HeldBack(3, "k"));
  EXPECT_EQ(parts_.sinks.behind_down().size(), 2u);
  EXPECT_TRUE(Contains(parts_.TakeLogs(), "sink \"kafka\" is unavailable (connection refused)"));
  Judge({Retriable(), Retriable()});  // still down: said once
  EXPECT_EQ(parts_.sinks["kafka"].failures, 2);
  EXPECT_EQ(parts_.TakeLogs(), "");
}

TEST_F(VerdictTest, AnAnswerAfterAnOutageBringsTheSinkBackAndFreesItsTopics) {
  batch_.Add(1, "orders.a");
  Judge({Retriable()});
  parts_.TakeLogs();
  Judge({Delivered()});
  EXPECT_FALSE(parts_.sinks["kafka"].down);
  EXPECT_EQ(parts_.sinks["kafka"].failures, 0);
  EXPECT_TRUE(parts_.sinks.behind_down().empty());
  EXPECT_TRUE(Contains(parts_.TakeLogs(), "sink \"kafka\" is available again"));
}

TEST_F(VerdictTest, TransientFailuresOfAPartialGroupParkWithoutAttemptsAndLeaveTheSinkUp) {
  batch_.Add(1, "orders.a", "k");
  Judge({Retriable("partition without a leader")}, nullptr, true);
  EXPECT_FALSE(parts_.sinks["kafka"].down);
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark));
  EXPECT_EQ(batch_.out[0].attempts, 0);
  EXPECT_GE(batch_.out[0].next_attempt_us, kNow + 100 * 1000);
  EXPECT_TRUE(HeldBack(2, "k"));
}

TEST_F(VerdictTest, ADownTargetParksItsEventsWithoutAttemptsAndLeavesTheSinkUp) {
  batch_.Add(1, "orders.a", "k");
  batch_.Add(2, "orders.a");
  batch_.Add(3, "orders.b");
  Delivery down{DeliveryStatus::kTargetDown, "HTTP 503 from http://h/orders.a"};
  Judge({down, down, Delivered()});
  const SinkState &state = parts_.sinks["kafka"];
  EXPECT_FALSE(state.down);
  EXPECT_EQ(state.down_targets.at("orders.a"), 1);  // once per group, not per event
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(Is(batch_.out[i], Outcome::kPark));
    EXPECT_EQ(batch_.out[i].attempts, 0);
    EXPECT_GE(batch_.out[i].next_attempt_us, kNow + 100 * 1000);
    EXPECT_LE(batch_.out[i].next_attempt_us, kNow + 200 * 1000);
  }
  EXPECT_TRUE(Is(batch_.out[2], Outcome::kPublished));
  EXPECT_TRUE(HeldBack(4, "k"));
  EXPECT_TRUE(parts_.sinks.behind_down().empty());
}

TEST_F(VerdictTest, EveryTargetDownNeverMakesTheSinkDown) {
  batch_.Add(1, "orders.a");
  batch_.Add(2, "orders.b");
  Delivery down{DeliveryStatus::kTargetDown, "connection refused"};
  Judge({down, down});
  EXPECT_FALSE(parts_.sinks["kafka"].down);
  EXPECT_EQ(parts_.sinks["kafka"].down_targets.size(), 2u);
  for (const RowOutcome &out : batch_.out) {
    EXPECT_TRUE(Is(out, Outcome::kPark));
    EXPECT_EQ(out.attempts, 0);
  }
  EXPECT_TRUE(parts_.sinks.behind_down().empty());  // other topics' claims go on
  EXPECT_EQ(parts_.TakeLogs(), "");
}

TEST_F(VerdictTest, ADownTargetsBackoffGrowsWhileDownAndADeliveryToItEndsIt) {
  batch_.Add(1, "orders.a");
  Delivery down{DeliveryStatus::kTargetDown, "down"};
  for (int group = 1; group <= 3; ++group) Judge({down});
  EXPECT_EQ(parts_.sinks["kafka"].down_targets.at("orders.a"), 3);
  EXPECT_LE(batch_.out[0].next_attempt_us, kNow + 400 * 1000);  // third step: up to 400 ms
  Judge({Delivered()});
  EXPECT_EQ(parts_.sinks["kafka"].down_targets.count("orders.a"), 0u);
}

TEST_F(VerdictTest, RetryAfterDelaysARetryUpToTheBackoffMaximum) {
  batch_.Add(1, "orders.a", "k");
  Delivery busy = Retriable("HTTP 429");
  busy.retry_after_ms = 700;
  parts_.verdicts.Attempted(batch_.rows[0], parts_.routes[0], busy, settings_, &batch_.out[0]);
  EXPECT_EQ(batch_.out[0].attempts, 1);
  EXPECT_GE(batch_.out[0].next_attempt_us, kNow + 700 * 1000);
  busy.retry_after_ms = 3600 * 1000;
  parts_.verdicts.Attempted(batch_.rows[0], parts_.routes[0], busy, settings_, &batch_.out[0]);
  EXPECT_EQ(batch_.out[0].next_attempt_us, kNow + 1000 * 1000);  // backoff_max
  Delivery down{DeliveryStatus::kTargetDown, "HTTP 503"};
  down.retry_after_ms = 900;
  batch_.out[0] = RowOutcome{};
  Judge({down});
  EXPECT_GE(batch_.out[0].next_attempt_us, kNow + 900 * 1000);
  EXPECT_LE(batch_.out[0].next_attempt_us, kNow + 1000 * 1000);
  EXPECT_EQ(batch_.out[0].attempts, 0);
}

TEST_F(VerdictTest, ARefusalAmongOthersIsRetriedAloneOnTheSinkThatRefusedIt) {
  batch_.Add(1, "orders.a");
  batch_.Add(2, "orders.b");
  Sink *sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  Judge({Rejected(), Delivered()}, sink);
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPublished));  // alone, it went through
  EXPECT_EQ(batch_.out[0].attempts, 0);
  ASSERT_EQ(BrokerNamed("kafka")->calls.size(), 1u);
  EXPECT_EQ(BrokerNamed("kafka")->Ids(0), std::vector<std::string>{Id(1)});
  EXPECT_EQ(BrokerNamed("kafka")->calls[0][0].payload, "{\"n\":1}");
}

TEST_F(VerdictTest, EventsLostWithOthersAreNotChargedAndGoAloneOnceLostSoTwice) {
  batch_.Add(1, "orders.a", "a");
  batch_.Add(2, "orders.a", "b", 1);
  batch_.Add(3, "orders.a", "c");
  Sink *sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  Judge({Delivered(), LostWithConnection(), LostWithConnection()}, sink);
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPublished));
  for (size_t k : {1u, 2u}) {
    EXPECT_TRUE(Is(batch_.out[k], Outcome::kPark)) << k;
    EXPECT_EQ(batch_.out[k].attempts, batch_.rows[k].attempts) << k;  // not charged
    EXPECT_GE(batch_.out[k].next_attempt_us, kNow + 100 * 1000) << k;
    EXPECT_FALSE(parts_.verdicts.suspects().SendsAlone(Id(k + 1), "kafka")) << k;
  }
  EXPECT_TRUE(HeldBack(4, "b"));
  EXPECT_TRUE(BrokerNamed("kafka")->calls.empty()) << "nothing is sent while judging";
  // Sent with others once more and lost so again: alone from now on.
  Judge({Delivered(), LostWithConnection(), Delivered()}, sink);
  EXPECT_TRUE(parts_.verdicts.suspects().SendsAlone(Id(2), "kafka"));
  EXPECT_FALSE(parts_.verdicts.suspects().SendsAlone(Id(3), "kafka"));  // went through
  EXPECT_EQ(parts_.verdicts.suspects().size(), 1u);
  EXPECT_TRUE(Contains(batch_.out[1].error, "sent alone next"));
  EXPECT_FALSE(parts_.sinks["kafka"].down);
}

TEST_F(VerdictTest, AGroupLostOnlyWithConnectionsLeavesTheSinkAsItWas) {
  batch_.Add(1, "orders.a", "k");
  batch_.Add(2, "orders.b");
  Judge({LostWithConnection(), LostWithConnection()});
  EXPECT_FALSE(parts_.sinks["kafka"].down) << "a broker may close its connections over one message";
  for (const RowOutcome &out : batch_.out) {
    EXPECT_TRUE(Is(out, Outcome::kPark));
    EXPECT_EQ(out.attempts, 0);
  }
  // Nor does it say the sink is back after an outage.
  parts_.sinks["kafka"].down = true;
  parts_.sinks["kafka"].failures = 3;
  Judge({LostWithConnection(), LostWithConnection()});
  EXPECT_TRUE(parts_.sinks["kafka"].down);
  EXPECT_EQ(parts_.sinks["kafka"].failures, 3);
  EXPECT_FALSE(Contains(parts_.TakeLogs(), "available again"));
}

TEST_F(VerdictTest, LateEventsLostWithAConnectionWaitWithoutAnAttempt) {
  batch_.Add(1, "orders.a", "k");
  batch_.Add(2, "orders.b");
  Judge({LostWithConnection(), Delivered()}, nullptr, true);  // a late group's answered part
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark));
  EXPECT_EQ(batch_.out[0].attempts, 0);
  EXPECT_FALSE(parts_.sinks["kafka"].wait_in_full) << "no payload is needed to send it alone later";
  EXPECT_TRUE(HeldBack(3, "k"));
}

// Event 1 made a suspect sent alone: lost with others twice.
void MakeAloneSuspect(Verdicts *verdicts) {
  verdicts->suspects().LostWithOthers(Id(1), "kafka");
  verdicts->suspects().LostWithOthers(Id(1), "kafka");
}

TEST_F(VerdictTest, ASuspectLostAloneWhileTheSinkAnswersOthersIsForgivenOnceThenCharged) {
  batch_.Add(1, "orders.a", "k");
  MakeAloneSuspect(&parts_.verdicts);
  alone_ = true;
  answered_others_ = true;
  Judge({LostWithConnection()});
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark));
  EXPECT_EQ(batch_.out[0].attempts, 0);
  EXPECT_TRUE(Contains(batch_.out[0].error, "sent alone: not counted yet"));
  EXPECT_TRUE(HeldBack(2, "k"));
  Judge({LostWithConnection()});
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kRetry));
  EXPECT_EQ(batch_.out[0].attempts, 1);
  EXPECT_TRUE(Contains(batch_.out[0].error, "(sent alone)"));
  EXPECT_FALSE(parts_.sinks["kafka"].down);
  EXPECT_TRUE(parts_.verdicts.suspects().SendsAlone(Id(1), "kafka")) << "still sent alone";
  // At its last attempt it is dead, and forgotten.
  batch_.rows[0].attempts = 2;
  Judge({LostWithConnection()});
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kDead));
  EXPECT_TRUE(parts_.verdicts.suspects().empty());
}

TEST_F(VerdictTest, ASuspectLostAloneWhileNothingElseAnswersIsChargedFromItsSecondLoss) {
  // A quiet sink, or a culprit first in every batch: nothing else answers,
  // and a sink judged down would charge nobody and meet it again for good.
  batch_.Add(1, "orders.a", "k");
  MakeAloneSuspect(&parts_.verdicts);
  alone_ = true;
  answered_others_ = false;
  Judge({LostWithConnection()});
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark));
  EXPECT_EQ(batch_.out[0].attempts, 0);
  Judge({LostWithConnection()});
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kRetry));
  EXPECT_EQ(batch_.out[0].attempts, 1);
  EXPECT_FALSE(parts_.sinks["kafka"].down);
}

TEST_F(VerdictTest, EachSuspectLostAloneWhileNothingElseAnswersIsTriedOnceThenTheSinkIsDown) {
  // A burst of culprits: each one lost alone is its own loss, once each
  // (forgiven: nothing is charged yet). One lost so again after another
  // was: a broker that closes every connection, and nobody is charged.
  for (int n : {2, 3}) {
    parts_.verdicts.suspects().LostWithOthers(Id(n), "kafka");
    parts_.verdicts.suspects().LostWithOthers(Id(n), "kafka");
  }
  MakeAloneSuspect(&parts_.verdicts);
  alone_ = true;
  answered_others_ = false;
  for (int n : {1, 2, 3}) {
    batch_ = PartsBatch();
    batch_.Add(n, "orders.a", "k" + std::to_string(n));
    Judge({LostWithConnection()});
    EXPECT_FALSE(parts_.sinks["kafka"].down) << n;
    EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark)) << n;
    EXPECT_TRUE(Contains(batch_.out[0].error, "not counted yet")) << n;
  }
  for (int n : {2, 1, 3}) {
    batch_ = PartsBatch();
    batch_.Add(n, "orders.a", "k" + std::to_string(n));
    Judge({LostWithConnection()});
    EXPECT_TRUE(parts_.sinks["kafka"].down) << n;
    EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark)) << n;
    EXPECT_EQ(batch_.out[0].attempts, 0) << n;
    parts_.sinks["kafka"].down = false;
  }
  // A delivery ends the series: the next losses alone are the events' again.
  batch_ = PartsBatch();
  batch_.Add(4, "orders.b");
  alone_ = false;
  Judge({Delivered()});
  alone_ = true;
  for (int n : {1, 2}) {
    batch_ = PartsBatch();
    batch_.Add(n, "orders.a", "k" + std::to_string(n));
    Judge({LostWithConnection()});
    EXPECT_FALSE(parts_.sinks["kafka"].down) << n;
    EXPECT_TRUE(Is(batch_.out[0], Outcome::kRetry)) << n << ": its second failure alone";
    EXPECT_EQ(batch_.out[0].attempts, 1) << n;
  }
}

TEST_F(VerdictTest, SuspectsLostAloneAgainJustAfterAnAnswerMakeTheSinkDown) {
  // A broker that starts closing every connection has answered others just
  // before: each suspect lost alone counts once, then the sink is down.
  parts_.verdicts.suspects().LostWithOthers(Id(2), "kafka");
  parts_.verdicts.suspects().LostWithOthers(Id(2), "kafka");
  MakeAloneSuspect(&parts_.verdicts);
  alone_ = true;
  answered_others_ = true;
  for (int round = 0; round < 3; ++round) {
    for (int n : {1, 2}) {
      batch_ = PartsBatch();
      batch_.Add(n, "orders.a", "k" + std::to_string(n));
      Judge({LostWithConnection()});
      EXPECT_EQ(batch_.out[0].attempts, 0) << round << " " << n;
      EXPECT_EQ(parts_.sinks["kafka"].down, round > 0) << round << " " << n;
      parts_.sinks["kafka"].down = false;
    }
  }
}

TEST_F(VerdictTest, ASuspectThatFailedAloneWaitsUntilTheUntriedOnesHadTheirTurns) {
  for (int n = 2; n <= 21; ++n) {
    parts_.verdicts.suspects().LostWithOthers(Id(n), "kafka");
    parts_.verdicts.suspects().LostWithOthers(Id(n), "kafka");
  }
  MakeAloneSuspect(&parts_.verdicts);
  alone_ = true;
  answered_others_ = false;
  batch_.Add(1, "orders.a", "k");
  Judge({LostWithConnection()});
  ASSERT_TRUE(Is(batch_.out[0], Outcome::kPark));
  // 20 not tried, each a turn apart (at least kMinTurnSpacingMs).
  EXPECT_GE(batch_.out[0].next_attempt_us - kNow, 20 * Suspects::kMinTurnSpacingMs * kUsecPerMs);
  EXPECT_TRUE(HeldBack(2, "k")) << "its key waits as long";
}

TEST_F(VerdictTest, ASuspectAloneThatFindsNoBrokerWhileNothingElseAnswersMakesTheSinkDown) {
  batch_.Add(1, "orders.a", "k");
  MakeAloneSuspect(&parts_.verdicts);
  alone_ = true;
  answered_others_ = false;
  Judge({Retriable("connection refused")});
  EXPECT_TRUE(parts_.sinks["kafka"].down);
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark));
  EXPECT_EQ(batch_.out[0].attempts, 0);
  // Not counted as a failure alone: the next one is still forgiven.
  parts_.sinks["kafka"].down = false;
  answered_others_ = true;
  Judge({LostWithConnection()});
  EXPECT_EQ(batch_.out[0].attempts, 0);
}

TEST_F(VerdictTest, ASuspectThroughAloneIsPublishedAndForgotten) {
  batch_.Add(1, "orders.a", "k");
  MakeAloneSuspect(&parts_.verdicts);
  alone_ = true;
  Judge({Delivered()});
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPublished));
  EXPECT_TRUE(parts_.verdicts.suspects().empty());
  EXPECT_FALSE(HeldBack(2, "k"));
}

TEST_F(VerdictTest, JudgingASuspectSentAloneEndsItsSinksTurn) {
  batch_.Add(1, "orders.a", "k");
  MakeAloneSuspect(&parts_.verdicts);
  parts_.verdicts.suspects().SentAlone("kafka", Id(1), 7, SteadyMs());
  uint64_t ticket = 0;
  ASSERT_TRUE(parts_.verdicts.suspects().Out("kafka", SteadyMs(), &ticket));
  EXPECT_EQ(ticket, 7u);
  alone_ = true;
  answered_others_ = true;
  g_interrupted = true;  // even with no verdict (shutting down)
  Judge({Retriable("interrupted")});
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kUntouched));
  EXPECT_FALSE(parts_.verdicts.suspects().Out("kafka", SteadyMs(), &ticket));
}

TEST_F(VerdictTest, AnEventLostWithAConnectionWaitsBehindAnEarlierFailureOfItsKey) {
  batch_.Add(1, "orders.a", "k");
  batch_.Add(2, "orders.a", "k");
  batch_.Add(3, "orders.a", "j");
  std::shared_ptr<FakeBroker> broker = BrokerNamed("kafka");
  broker->script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? Rejected("not authorised") : Delivered();
  };
  Sink *sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  Judge({Rejected("not authorised"), LostWithConnection(), Delivered()}, sink);
  // Event 1 was tried alone (a refusal among others) and refused again.
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kRetry));
  EXPECT_TRUE(Is(batch_.out[1], Outcome::kPark));  // never sent ahead of it
  EXPECT_EQ(batch_.out[1].attempts, 0);
  EXPECT_GE(batch_.out[1].next_attempt_us, batch_.out[0].next_attempt_us);
  EXPECT_EQ(broker->AllIds(), std::vector<std::string>{Id(1)});
}

TEST_F(VerdictTest, AnInterruptedCallLeavesItsFailuresUntouchedAndRemembersTheirKeys) {
  batch_.Add(1, "orders.a", "k");
  batch_.Add(2, "orders.b");
  g_interrupted = true;
  Judge({Retriable("interrupted"), Delivered()});
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kUntouched));
  EXPECT_TRUE(Is(batch_.out[1], Outcome::kPublished));
  EXPECT_EQ(parts_.verdicts.untouched().count(RouteKey("orders.*", "k")), 1u);
  EXPECT_FALSE(parts_.sinks["kafka"].down);
  parts_.verdicts.ClearUntouched();
  EXPECT_TRUE(parts_.verdicts.untouched().empty());
}

TEST_F(VerdictTest, ARetiredProducersAnswersLeaveTheSinkUnderItsNameAlone) {
  batch_.Add(1, "orders.a");
  sink_name_ = "gone";
  Judge({Retriable()}, nullptr, true, true);
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark));
  EXPECT_FALSE(parts_.sinks.Has("gone"));
}

TEST_F(VerdictTest, AnEventBehindAWaitingOneIsParkedUntilItsTimeUnlessAdmittedAfterIt) {
  batch_.Add(2, "orders.a", "k");
  parts_.guard.Block("orders.*", "k", Id(1), kNow + 5'000'000);
  const std::set<std::string> admitted{Id(1)};
  EXPECT_FALSE(parts_.verdicts.ParkBehindEarlier(batch_.rows[0], parts_.routes[0], &admitted, kNow,
                                                 kWaitingForKey, &batch_.out[0]));
  EXPECT_TRUE(parts_.verdicts.ParkBehindEarlier(batch_.rows[0], parts_.routes[0], nullptr, kNow,
                                                kWaitingForKey, &batch_.out[0]));
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark));
  EXPECT_EQ(batch_.out[0].next_attempt_us, kNow + 5'000'000);
  EXPECT_STREQ(batch_.out[0].error, "waiting for an earlier event with the same key");
  EXPECT_TRUE(HeldBack(3, "k"));  // it waits too, and holds later ones back
}

TEST_F(VerdictTest, AnEventBehindALateAnswerIsLookedAtAgainAfterAboutAsLongAsItWasAwaited) {
  // A late group of sink "kafka" whose event 1 of key k is unanswered.
  BrokerNamed("kafka")->pipelined = true;
  BrokerNamed("kafka")->slow = true;
  PartsBatch first;
  first.Add(1, "orders.a", "k");
  SinkGroup group;
  group.sink_name = "kafka";
  group.members = first.All();
  group.messages.push_back(MessageOf(first.rows[0], parts_.routes[0], 0, ""));
  group.results.resize(1);
  group.sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  group.sink_ticket = group.sink->Send(group.messages.data(), 1, group.results.data(), nullptr);
  parts_.late.Take(&group, first.rows.data(), first.route_of.data(), first.out.data(), settings_,
                   nullptr);
  ASSERT_EQ(parts_.late.keys().count(RouteKey("orders.*", "k")), 1u);

  batch_.Add(2, "orders.a", "k");
  EXPECT_TRUE(parts_.verdicts.ParkBehindEarlier(batch_.rows[0], parts_.routes[0], nullptr, kNow,
                                                kWaitingForKey, &batch_.out[0]));
  EXPECT_EQ(batch_.out[0].next_attempt_us, kNow + Verdicts::kLateRecheckMinUs)
      << "an answer awaited for no time yet: looked at again in the least step";
  // Looked at again after about as long as the answer has been awaited (on
  // the 500 ms step after 300 ms): a slow answer is met soon after it
  // comes, one that does not come costs a look a second.
  batch_.out[0] = RowOutcome{};
  EXPECT_TRUE(parts_.verdicts.ParkBehindEarlier(batch_.rows[0], parts_.routes[0], nullptr,
                                                kNow + 300000, kWaitingForKey, &batch_.out[0]));
  EXPECT_EQ(batch_.out[0].next_attempt_us, kNow + 1000000);
  batch_.out[0] = RowOutcome{};
  EXPECT_TRUE(parts_.verdicts.ParkBehindEarlier(batch_.rows[0], parts_.routes[0], nullptr,
                                                kNow + 5000000, kWaitingForKey, &batch_.out[0]));
  EXPECT_EQ(batch_.out[0].next_attempt_us, kNow + 5000000 + Verdicts::kLateRecheckUs);
  parts_.late.Drop();
}

TEST_F(VerdictTest, KeysBehindLateAnswersParkedAtDifferentMomentsAreLookedAtAgainTogether) {
  // Keys k and j each wait for a late answer of sink "kafka", left late
  // 700 ms apart (a partition without a leader, keys written now and then).
  BrokerNamed("kafka")->pipelined = true;
  BrokerNamed("kafka")->slow = true;
  PartsBatch first;
  first.Add(1, "orders.a", "k");
  first.Add(2, "orders.a", "j");
  std::vector<SinkGroup> groups(2);
  for (size_t i = 0; i < groups.size(); ++i) {
    SinkGroup &group = groups[i];
    group.sink_name = "kafka";
    group.members = {i};
    group.messages.push_back(MessageOf(first.rows[i], parts_.routes[0], 0, ""));
    group.results.resize(1);
    group.sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
    group.sink_ticket = group.sink->Send(group.messages.data(), 1, group.results.data(), nullptr);
    DispatchSettings at = settings_;
    at.now_us = kNow + static_cast<int64_t>(i) * 700000;
    parts_.late.Take(&group, first.rows.data(), first.route_of.data(), first.out.data(), at,
                     nullptr);
  }
  ASSERT_EQ(parts_.late.keys().size(), 2u);

  // Their later events, parked 800 ms apart, are due at one moment, so one
  // claim looks at both (not a wake-up and a transaction per key).
  batch_.Add(3, "orders.a", "k");
  batch_.Add(4, "orders.a", "j");
  EXPECT_TRUE(parts_.verdicts.ParkBehindEarlier(batch_.rows[0], parts_.routes[0], nullptr,
                                                kNow + 2600000, kWaitingForKey, &batch_.out[0]));
  EXPECT_TRUE(parts_.verdicts.ParkBehindEarlier(batch_.rows[1], parts_.routes[0], nullptr,
                                                kNow + 3400000, kWaitingForKey, &batch_.out[1]));
  EXPECT_EQ(batch_.out[0].next_attempt_us, kNow + 4000000);
  EXPECT_EQ(batch_.out[1].next_attempt_us, kNow + 4000000);
  parts_.late.Drop();
}

TEST(LateRecheckTest, TheStepCoversTheWaitAndTheDueTimeIsItsMultipleAboutAStepFromNow) {
  for (int64_t now = kNow - 3000000; now < kNow + 3000000; now += 7919) {
    for (const int64_t awaited :
         {int64_t{0}, int64_t{15000}, int64_t{15625}, int64_t{40000}, int64_t{300000},
          int64_t{999999}, int64_t{1000000}, int64_t{60000000}}) {
      const int64_t step = Verdicts::LateRecheckStepUs(awaited);
      const int64_t due = Verdicts::LateRecheckDueUs(now, awaited);
      ASSERT_GE(step, std::min(awaited, Verdicts::kLateRecheckUs)) << awaited;
      ASSERT_LE(step, std::max(2 * awaited, Verdicts::kLateRecheckMinUs)) << awaited;
      ASSERT_LE(step, Verdicts::kLateRecheckUs);
      ASSERT_EQ(Verdicts::kLateRecheckUs % step, 0) << "steps divide the second";
      ASSERT_EQ(due % step, 0) << now << " " << awaited;
      ASSERT_GT(due, now + step / 2) << now << " " << awaited;
      ASSERT_LE(due, now + step / 2 + step) << now << " " << awaited;
    }
  }
}

TEST_F(VerdictTest, ADeliveryPastAnEarlierFailureOfItsKeyIsLoggedAsOvertaken) {
  batch_.Add(1, "orders.a", "k");
  batch_.Add(2, "orders.a", "k");
  Judge({Delivery{DeliveryStatus::kTargetRefused, "unknown topic"}, Delivered()});
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kRetry));
  EXPECT_TRUE(Is(batch_.out[1], Outcome::kPublished));
  EXPECT_TRUE(Contains(parts_.TakeLogs(),
                       "sink \"kafka\": 1 event(s) will arrive after a later "
                       "event of their key, which the broker took while "
                       "refusing them (one batch split over two requests): " +
                           Id(1)));
}

TEST_F(VerdictTest, AMessageGoesToItsRoutesTargetOrElseToItsTopic) {
  batch_.Add(1, "orders.a", "k");
  DispatchRoute route{"orders.*", "kafka", true, "orders-topic"};
  route.format = MessageFormat::kCloudEvents;
  const OutMessage m = MessageOf(batch_.rows[0], route, 0, "/db");
  EXPECT_EQ(m.id, Id(1));
  EXPECT_EQ(m.topic, "orders.a");
  EXPECT_EQ(m.target, "orders-topic");
  EXPECT_EQ(m.key, "k");
  EXPECT_EQ(m.payload, "{\"n\":1}");
  EXPECT_EQ(m.format, MessageFormat::kCloudEvents);
  EXPECT_EQ(m.source, "/db");
  EXPECT_EQ(MessageOf(batch_.rows[0], parts_.routes[0], 0, "").target, "orders.a");
}

TEST_F(VerdictTest, AnErrorTooLongForItsRowIsCut) {
  RowOutcome out;
  SetError(&out, std::string(1000, 'x'));
  EXPECT_EQ(std::string(out.error), std::string(sizeof out.error - 1, 'x'));
}

}  // namespace
}  // namespace outbox
