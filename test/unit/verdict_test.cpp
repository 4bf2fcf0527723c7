// Verdicts on their own: what one group's answers make of each row
// (published, retried, dead, parked behind its key), and of the sink (down,
// available again), on the parts a Dispatcher wires together.
#include "core/verdict.hpp"
#include "dispatch_support.hpp"
#include "fake_sink.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

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
    j.alone_until_ms = alone_until_ms_;
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
  int64_t alone_until_ms_ = 0;
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

// A message the broker closes the connection over (MQTT 3.1.1 past its
// packet size) fails every message in flight with it.
Delivery LostWithConnection() {
  Delivery d = Retriable("the connection to broker was lost");
  d.connection_lost = true;
  return d;
}

TEST_F(VerdictTest, EventsLostWithAConnectionAreTriedAloneAndOnlyTheCulpritIsCharged) {
  batch_.Add(1, "orders.a", "a");
  batch_.Add(2, "orders.a", "b", 1);
  batch_.Add(3, "orders.a", "c");  // the one the broker closes the connection over
  batch_.Add(4, "orders.a", "d");
  batch_.Add(5, "orders.a", "e");
  std::shared_ptr<FakeBroker> broker = BrokerNamed("kafka");
  broker->script = [](const OutMessage &m, int) {
    return m.id == Id(3) ? LostWithConnection() : Delivered();
  };
  Sink *sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  Judge({Delivered(), LostWithConnection(), LostWithConnection(), LostWithConnection(),
         LostWithConnection()},
        sink);
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(batch_.out[1], Outcome::kPublished));  // alone, it went through
  EXPECT_EQ(batch_.out[1].attempts, 1);                 // and was not charged
  EXPECT_TRUE(Is(batch_.out[2], Outcome::kRetry));      // lost alone: the cause, charged
  EXPECT_EQ(batch_.out[2].attempts, 1);
  EXPECT_TRUE(HeldBack(6, "c"));
  EXPECT_TRUE(Is(batch_.out[3], Outcome::kPublished));  // the others are still tried alone
  EXPECT_TRUE(Is(batch_.out[4], Outcome::kPublished));
  EXPECT_EQ(broker->AllIds(), (std::vector<std::string>{Id(2), Id(3), Id(4), Id(5)}));
  EXPECT_FALSE(parts_.sinks["kafka"].down);
}

TEST_F(VerdictTest, ARetryAloneThatFindsNoBrokerChargesNobodyAndEndsTheRetriesAlone) {
  batch_.Add(1, "orders.a", "a");
  batch_.Add(2, "orders.a", "b");
  batch_.Add(3, "orders.a", "c");
  batch_.Add(4, "orders.a", "d");
  std::shared_ptr<FakeBroker> broker = BrokerNamed("kafka");
  broker->script = [](const OutMessage &m, int) {
    return m.id == Id(3) ? Retriable("connection refused") : Delivered();  // a restart
  };
  Sink *sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  Judge({Delivered(), LostWithConnection(), LostWithConnection(), LostWithConnection()}, sink);
  EXPECT_TRUE(Is(batch_.out[1], Outcome::kPublished));
  for (size_t k : {2u, 3u}) {
    EXPECT_TRUE(Is(batch_.out[k], Outcome::kPark));
    EXPECT_EQ(batch_.out[k].attempts, 0);
    EXPECT_GE(batch_.out[k].next_attempt_us, kNow + 100 * 1000);
  }
  EXPECT_EQ(broker->AllIds(), (std::vector<std::string>{Id(2), Id(3)}));
  EXPECT_TRUE(HeldBack(5, "c"));
  EXPECT_TRUE(HeldBack(6, "d"));
}

TEST_F(VerdictTest, RetriesAloneStopWhenTheirBudgetIsSpent) {
  settings_.ack_wait_ms = 50;
  std::vector<Delivery> results{Delivered()};
  batch_.Add(1, "orders.a", "k0");
  for (int e = 2; e <= 11; ++e) {
    batch_.Add(e, "orders.a", "k" + std::to_string(e));
    results.push_back(LostWithConnection());
  }
  std::shared_ptr<FakeBroker> broker = BrokerNamed("kafka");
  broker->script = [](const OutMessage &, int) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a slow round trip
    return Delivered();
  };
  Sink *sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  Judge(results, sink);
  // The first starts the 50 ms budget, the second starts within it; none
  // after. A slower machine only tries fewer.
  EXPECT_GE(broker->calls.size(), 1u);
  EXPECT_LE(broker->calls.size(), 2u);
  for (size_t k = 1 + broker->calls.size(); k < batch_.out.size(); ++k) {
    EXPECT_TRUE(Is(batch_.out[k], Outcome::kPark)) << k;
    EXPECT_EQ(batch_.out[k].attempts, 0) << k;
  }
}

TEST_F(VerdictTest, AtMostAFewEventsLostWithAConnectionAreTriedAlonePerGroup) {
  const int n = static_cast<int>(Verdicts::kMaxAloneRetries) + 3;
  std::vector<Delivery> results{Delivered()};
  batch_.Add(1, "orders.a", "k0");
  for (int e = 2; e <= n + 1; ++e) {
    batch_.Add(e, "orders.a", "k" + std::to_string(e));
    results.push_back(LostWithConnection());
  }
  std::shared_ptr<FakeBroker> broker = BrokerNamed("kafka");
  Sink *sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  Judge(results, sink);
  EXPECT_EQ(broker->calls.size(), Verdicts::kMaxAloneRetries);
  size_t published = 0, parked = 0;
  for (const RowOutcome &out : batch_.out) {
    published += Is(out, Outcome::kPublished) ? 1 : 0;
    parked += Is(out, Outcome::kPark) && out.attempts == 0 ? 1 : 0;
  }
  EXPECT_EQ(published, Verdicts::kMaxAloneRetries + 1);
  EXPECT_EQ(parked, 3u);
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
  EXPECT_EQ(broker->AllIds(), std::vector<std::string>{Id(1)});
}

TEST_F(VerdictTest, LateEventsLostWithAConnectionWaitWithoutAnAttemptAndTheSinkWaitsInFull) {
  batch_.Add(1, "orders.a", "k");
  batch_.Add(2, "orders.b");
  Judge({LostWithConnection(), Delivered()});  // no payload left to try alone with
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kPark));
  EXPECT_EQ(batch_.out[0].attempts, 0);
  EXPECT_TRUE(parts_.sinks["kafka"].wait_in_full);
  EXPECT_TRUE(HeldBack(3, "k"));
}

TEST_F(VerdictTest, NothingIsTriedAlonePastTheWindowsAckWait) {
  // Other sinks' answers are waited for until then: retries alone after it
  // would push them to later cycles.
  batch_.Add(1, "orders.a", "a");
  batch_.Add(2, "orders.a", "b");
  std::shared_ptr<FakeBroker> broker = BrokerNamed("kafka");
  Sink *sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  alone_until_ms_ = SteadyMs() - 1;
  Judge({Delivered(), LostWithConnection()}, sink);
  EXPECT_TRUE(broker->calls.empty());
  EXPECT_TRUE(Is(batch_.out[1], Outcome::kPark));
  EXPECT_EQ(batch_.out[1].attempts, 0);
}

TEST_F(VerdictTest, AGroupLostOnlyWithConnectionsIsDownWhenItsFirstEventAloneFindsNoBroker) {
  batch_.Add(1, "orders.a", "k");
  batch_.Add(2, "orders.b");
  std::shared_ptr<FakeBroker> broker = BrokerNamed("kafka");
  broker->script = [](const OutMessage &, int) { return Retriable("connection refused"); };
  Sink *sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  Judge({LostWithConnection(), LostWithConnection()}, sink);
  EXPECT_TRUE(parts_.sinks["kafka"].down);
  EXPECT_EQ(broker->AllIds(), std::vector<std::string>{Id(1)});  // one tried alone
  for (const RowOutcome &out : batch_.out) {
    EXPECT_TRUE(Is(out, Outcome::kPark));
    EXPECT_EQ(out.attempts, 0);
  }
}

TEST_F(VerdictTest, AGroupLostOnlyWithConnectionsOverItsFirstEventChargesThatEventAlone) {
  // With one connection (or the culprit first on each), nothing went through:
  // without a retry alone the sink would be down, charge nobody, and meet
  // the culprit again on every try.
  batch_.Add(1, "orders.a", "k");
  batch_.Add(2, "orders.a", "j");
  batch_.Add(3, "orders.b");
  std::shared_ptr<FakeBroker> broker = BrokerNamed("kafka");
  broker->script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? LostWithConnection() : Delivered();
  };
  Sink *sink = parts_.sinks.SinkFor("kafka", &parts_.sinks["kafka"]);
  Judge({LostWithConnection(), LostWithConnection(), LostWithConnection()}, sink);
  EXPECT_FALSE(parts_.sinks["kafka"].down);
  EXPECT_TRUE(Is(batch_.out[0], Outcome::kRetry));
  EXPECT_EQ(batch_.out[0].attempts, 1);
  EXPECT_TRUE(Is(batch_.out[1], Outcome::kPublished));
  EXPECT_TRUE(Is(batch_.out[2], Outcome::kPublished));
  EXPECT_EQ(broker->AllIds(), (std::vector<std::string>{Id(1), Id(2), Id(3)}));
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

TEST_F(VerdictTest, AnEventBehindAnAwaitedLateAnswerIsLookedAtAgainWithinARecheck) {
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
  EXPECT_EQ(batch_.out[0].next_attempt_us, kNow + Verdicts::kLateRecheckUs);
  parts_.late.Drop();
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
