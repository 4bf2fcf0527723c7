// The sink registry on its own: producers made on first use and made again
// after a fatal error or a changed definition (the Retire hook told first),
// the sinks' log lines, their states for monitoring, the topics behind a
// down sink, and what their answer times make of a group still waiting.
#include "core/sink_registry.hpp"
#include "dispatch_support.hpp"
#include "fake_sink.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;

// A registry whose Retire hook records what it is told, and takes the
// producer when `keep` is set (as late answers do for a producer they wait on).
class SinkRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { g_brokers.clear(); }

  // Define these sinks, and no other, each with one option.
  void Define(const std::vector<std::string> &names, const std::string &servers = "k1:9092") {
    OptionView option;
    option.key = "bootstrap.servers";
    option.text = servers;
    std::vector<SinkRow> rows(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      rows[i].name = names[i];
      rows[i].kind = "kafka";
      rows[i].options = &option;
      rows[i].option_count = 1;
    }
    registry_.Configure(rows.data(), rows.size());
  }
  Sink *Producer(const std::string &name) { return registry_.SinkFor(name, &registry_[name]); }

  LogBuffer logs_{"test log line(s)"};
  std::vector<std::string> retired_;  // names the hook was told, with a producer
  std::vector<std::unique_ptr<Sink>> kept_;
  bool keep_ = false;
  SinkRegistry registry_{&FakeFactory, &logs_,
                         [this](const std::string &name, std::unique_ptr<Sink> *producer) {
                           if (*producer == nullptr) return;
                           retired_.push_back(name);
                           if (keep_) kept_.push_back(std::move(*producer));
                         }};
};

TEST_F(SinkRegistryTest, ASinkIsMadeOnFirstUseAndThenReused) {
  Define({"kafka"});
  EXPECT_TRUE(registry_.Has("kafka"));
  EXPECT_EQ(BrokerNamed("kafka")->created, 0);
  Sink *first = Producer("kafka");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(Producer("kafka"), first);
  EXPECT_EQ(BrokerNamed("kafka")->created, 1);
}

TEST_F(SinkRegistryTest, AnUnchangedDefinitionKeepsItsProducer) {
  Define({"kafka"});
  Sink *first = Producer("kafka");
  Define({"kafka"});
  EXPECT_EQ(Producer("kafka"), first);
  EXPECT_TRUE(retired_.empty());
}

TEST_F(SinkRegistryTest, AChangedDefinitionRetiresTheOldProducerBeforeItCloses) {
  Define({"kafka"});
  Producer("kafka");
  keep_ = true;
  Define({"kafka"}, "k2:9092");
  EXPECT_EQ(retired_, std::vector<std::string>{"kafka"});
  EXPECT_EQ(BrokerNamed("kafka")->destroyed, 0);  // the hook took it
  EXPECT_EQ(registry_["kafka"].sink, nullptr);
  Producer("kafka");
  EXPECT_EQ(BrokerNamed("kafka")->created, 2);
  EXPECT_EQ(BrokerNamed("kafka")->last_options[0].text, "k2:9092");
}

TEST_F(SinkRegistryTest, ARemovedSinkIsRetiredClosedAndForgotten) {
  Define({"kafka"});
  Producer("kafka");
  registry_.Configure(nullptr, 0);
  EXPECT_FALSE(registry_.Has("kafka"));
  EXPECT_EQ(retired_, std::vector<std::string>{"kafka"});
  EXPECT_EQ(BrokerNamed("kafka")->destroyed, 1);
  EXPECT_EQ(registry_.Find("kafka"), nullptr);
}

TEST_F(SinkRegistryTest, AProducerWithAFatalErrorIsMadeAgainOnlyWhenNoBatchUsesIt) {
  Define({"kafka"});
  Sink *first = Producer("kafka");
  BrokerNamed("kafka")->needs_recreate = true;
  EXPECT_EQ(registry_.SinkFor("kafka", &registry_["kafka"], false), first);
  EXPECT_EQ(BrokerNamed("kafka")->created, 1);
  Producer("kafka");
  EXPECT_EQ(BrokerNamed("kafka")->created, 2);
  EXPECT_EQ(BrokerNamed("kafka")->destroyed, 1);
  EXPECT_EQ(retired_, std::vector<std::string>{"kafka"});
  std::string text;
  for (const LogLine &line : logs_.Take()) text += line.text;
  EXPECT_TRUE(Contains(text, "hit a fatal error; recreating its producer"));
}

TEST_F(SinkRegistryTest, AFactoryFailureIsKeptAsTheSinksLastError) {
  Define({"kafka"});
  BrokerNamed("kafka")->fail_create = true;
  EXPECT_EQ(Producer("kafka"), nullptr);
  EXPECT_EQ(registry_["kafka"].last_error, "could not create the sink");
  BrokerNamed("kafka")->create_error = "bad option";
  EXPECT_EQ(Producer("kafka"), nullptr);
  EXPECT_EQ(registry_["kafka"].last_error, "bad option");
}

TEST_F(SinkRegistryTest, SinkLogLinesAreDrainedWithTheSinksName) {
  Define({"kafka"});
  Producer("kafka");
  BrokerNamed("kafka")->pending_logs.push_back(LogLine{LogLevel::kWarning, "broker gone"});
  registry_.DrainLogs();
  const std::vector<LogLine> lines = logs_.Take();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].level, LogLevel::kWarning);
  EXPECT_EQ(lines[0].text, "sink \"kafka\": broker gone");
}

TEST_F(SinkRegistryTest, EachSinkIsDescribedAsDownIdleOrAsItsProducerSays) {
  Define({"a", "b", "c"});
  Producer("b");
  BrokerNamed("b")->state = "connecting";
  registry_["c"].down = true;
  char text[64];
  registry_.Describe(text, sizeof text);
  EXPECT_STREQ(text, "a=idle, b=connecting, c=down");
  char small[6];
  registry_.Describe(small, sizeof small);
  EXPECT_STREQ(small, "a=idl");
}

TEST_F(SinkRegistryTest, PollAndAbandonReachEveryProducer) {
  Define({"a", "b"});
  Producer("a");
  Producer("b");
  registry_.Poll();
  EXPECT_EQ(BrokerNamed("a")->polls, 1);
  EXPECT_EQ(BrokerNamed("b")->polls, 1);
  BrokerNamed("a")->pipelined = true;
  std::vector<Delivery> out(1);
  OutMessage m;
  Producer("a")->Send(&m, 1, out.data(), nullptr);
  registry_.AbandonAll("given up");
  EXPECT_EQ(BrokerNamed("a")->abandoned, 1);
  EXPECT_EQ(out[0].status, DeliveryStatus::kRetriable);
  EXPECT_EQ(out[0].error, "given up");
}

TEST_F(SinkRegistryTest, TopicsBehindADownSinkAreBoundedAndForgottenWithTheirSink) {
  registry_.NoteBehindDown("orders.a", "a");
  registry_.NoteBehindDown("orders.a", "b");  // the first sink noted stays
  registry_.NoteBehindDown("payments", "b");
  EXPECT_EQ(registry_.behind_down().at("orders.a"), "a");
  registry_.ForgetBehindDown("b");
  EXPECT_EQ(registry_.behind_down().size(), 1u);
  for (size_t i = 0; i < 2 * SinkRegistry::kMaxTopicsBehindDownSinks; ++i) {
    registry_.NoteBehindDown("t" + std::to_string(i), "a");
  }
  EXPECT_EQ(registry_.behind_down().size(), SinkRegistry::kMaxTopicsBehindDownSinks);
  registry_.ClearBehindDown();
  EXPECT_TRUE(registry_.behind_down().empty());
}

TEST_F(SinkRegistryTest, TheSlowestRecentAnswerIsKeptPerTopicAndDecaysBySixteenths) {
  SinkState state;
  registry_.NoteAnsweredTopic(&state, "orders.a", 160);
  EXPECT_EQ(state.answer_ms, 160);
  EXPECT_EQ(state.answered_topics.at("orders.a"), 160);
  registry_.NoteAnsweredTopic(&state, "orders.a", 10);  // faster: 160 - 160/16
  EXPECT_EQ(state.answered_topics.at("orders.a"), 150);
  registry_.NoteAnsweredTopic(&state, "orders.b", 0);  // at least 1 ms
  EXPECT_EQ(state.answered_topics.at("orders.b"), 1);
  registry_.NoteAnsweredTopic(&state, "orders.b", 500);  // slower: taken as it is
  EXPECT_EQ(state.answered_topics.at("orders.b"), 500);
  EXPECT_EQ(state.answer_ms, 500);
}

TEST_F(SinkRegistryTest, ASuspectTopicExpiresOrIsEndedButAnAnswerAloneDoesNotEndIt) {
  SinkState state;
  registry_.SetSuspect("kafka", "orders.a", 1000);
  EXPECT_TRUE(registry_.IsSuspect("kafka", "orders.a", 1000));
  EXPECT_FALSE(registry_.IsSuspect("kafka", "orders.a", 1001));
  EXPECT_FALSE(registry_.IsSuspect("kafka", "orders.b", 0));
  EXPECT_TRUE(registry_.Suspected("kafka", "orders.a"));
  registry_.NoteAnsweredTopic(&state, "orders.a", 5);
  EXPECT_TRUE(registry_.IsSuspect("kafka", "orders.a", 0)) << "LateAnswers::NoteAnswered decides";
  registry_.EndSuspicion("kafka", "orders.a");
  EXPECT_FALSE(registry_.IsSuspect("kafka", "orders.a", 0));
  EXPECT_FALSE(registry_.Suspected("kafka", "orders.a"));
}

TEST_F(SinkRegistryTest, ATopicIsSuspectOnTheSinkThatLeftItUnansweredOnly) {
  registry_.SetSuspect("kafka", "orders.a", 1000);
  EXPECT_TRUE(registry_.IsSuspect("kafka", "orders.a", 0));
  EXPECT_FALSE(registry_.IsSuspect("kafka2", "orders.a", 0));
  EXPECT_FALSE(registry_.Suspected("kafka2", "orders.a"));
  EXPECT_FALSE(registry_.IsSuspect("kafka\0orders", "a", 0)) << "the key keeps names apart";
  registry_.EndSuspicion("kafka2", "orders.a");
  EXPECT_TRUE(registry_.IsSuspect("kafka", "orders.a", 0));
}

TEST_F(SinkRegistryTest, AnAnswerIsOverdueAfterFourTimesItsTopicsUsualTimeAndTheGrace) {
  SinkState state;
  EXPECT_EQ(SinkRegistry::OverdueAfterMs(state, "orders.a"), 0) << "nothing known yet";
  state.answer_ms = 2;
  EXPECT_EQ(SinkRegistry::OverdueAfterMs(state, "orders.a"), SinkRegistry::kMinGraceMs);
  state.answered_topics["orders.a"] = 50;
  EXPECT_EQ(SinkRegistry::OverdueAfterMs(state, "orders.a"), 200);
}

// A group of two sent at 1000 ms: the first event answered, the second not.
// The topics are views of literals, as a group's messages view their rows.
SinkGroup HalfAnswered(std::string_view unanswered_topic) {
  SinkGroup group;
  group.members = {0, 1};
  group.messages.resize(2);
  group.messages[0].topic = "orders.a";
  group.messages[1].topic = unanswered_topic;
  group.results.resize(2);
  group.results[0].status = DeliveryStatus::kDelivered;
  group.results[0].answered_at_us = 1;
  group.sent_ms = 1000;
  group.sink_name = "kafka";
  return group;
}

TEST_F(SinkRegistryTest, OnlySuspectsAreLeftWhenEveryUnansweredEventIsOfASuspectTopic) {
  const SinkGroup group = HalfAnswered("orders.b");
  EXPECT_FALSE(registry_.OnlySuspectsLeft(group, 1000));
  registry_.SetSuspect("kafka", "orders.a", 5000);
  EXPECT_FALSE(registry_.OnlySuspectsLeft(group, 1000));
  registry_.SetSuspect("kafka", "orders.b", 5000);
  EXPECT_TRUE(registry_.OnlySuspectsLeft(group, 1000));
  EXPECT_FALSE(registry_.OnlySuspectsLeft(group, 5001));
}

TEST_F(SinkRegistryTest, AStragglerHasWaitedFourTimesItsTopicsUsualAnswerAndAtLeastTheGrace) {
  const SinkGroup group = HalfAnswered("orders.b");
  SinkState state;
  EXPECT_FALSE(registry_.OnlyStragglersLeft(state, group, 100000));  // nothing known yet
  state.answer_ms = 2;                                               // the sink's, for orders.b
  EXPECT_FALSE(registry_.OnlyStragglersLeft(state, group, 1000 + SinkRegistry::kMinGraceMs - 1));
  EXPECT_TRUE(registry_.OnlyStragglersLeft(state, group, 1000 + SinkRegistry::kMinGraceMs));
  state.answered_topics["orders.b"] = 50;  // its own, once it has one
  EXPECT_FALSE(registry_.OnlyStragglersLeft(state, group, 1000 + 199));
  EXPECT_TRUE(registry_.OnlyStragglersLeft(state, group, 1000 + 200));
  registry_.SetSuspect("kafka", "orders.b", 2000);  // a suspect topic is given up at once
  EXPECT_TRUE(registry_.OnlyStragglersLeft(state, group, 1001));
}

TEST_F(SinkRegistryTest, ASinkAnsweredRecentlyWhenWithinAnAckWaitBeforeTheGroupWasSent) {
  SinkState state;
  EXPECT_FALSE(state.AnsweredRecently(1000, 500));  // never answered
  state.last_answer_ms = 400;
  EXPECT_FALSE(state.AnsweredRecently(1000, 500));
  EXPECT_TRUE(state.AnsweredRecently(900, 500));
}

// A group handed to the sink now, its messages' topics as given.
SinkGroup SentGroup(SinkRegistry *registry, const std::vector<std::string_view> &topics) {
  SinkGroup group;
  group.sink_name = "kafka";
  group.messages.resize(topics.size());
  for (size_t i = 0; i < topics.size(); ++i) {
    group.members.push_back(i);
    group.messages[i].topic = topics[i];
    group.messages[i].target = topics[i];
  }
  group.results.resize(topics.size());
  group.sink = registry->SinkFor("kafka", &(*registry)["kafka"]);
  group.sent_ms = SteadyMs();
  group.sent_unix_us = UnixNowUs();
  group.sink_ticket =
      group.sink->Send(group.messages.data(), group.messages.size(), group.results.data(), nullptr);
  return group;
}

TEST_F(SinkRegistryTest, CollectingGivesUpOnAStuckTopicSoonOnceTheSinkAnswersOthers) {
  Define({"kafka"});
  BrokerNamed("kafka")->pipelined = true;
  BrokerNamed("kafka")->stuck_topics = {"orders.b"};
  SinkGroup group = SentGroup(&registry_, {"orders.a", "orders.b"});
  const DispatchSettings settings = PartsSettings();
  const Clock::time_point start = Clock::now();
  EXPECT_FALSE(registry_.CollectGroup(&group, SteadyMs() + 10000, settings, nullptr));
  EXPECT_LT(SecondsSince(start), 5.0);  // not the 10 s deadline
  EXPECT_EQ(group.results[0].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(group.results[1].answered_at_us, 0);
  EXPECT_GT(registry_["kafka"].answer_ms, 0);  // its first answer measured it
  registry_.AbandonAll("done");
}

TEST_F(SinkRegistryTest, CollectingWithoutADeadlineWaitsForEveryAnswer) {
  Define({"kafka"});
  BrokerNamed("kafka")->pipelined = true;
  SinkGroup group = SentGroup(&registry_, {"orders.a", "orders.b"});
  EXPECT_TRUE(registry_.CollectGroup(&group, 0, PartsSettings(), nullptr));
  EXPECT_EQ(group.results[0].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(group.results[1].status, DeliveryStatus::kDelivered);
}

}  // namespace
}  // namespace outbox
