// The MQTT sink against a real mosquitto (mqtt_broker.hpp): messages are
// delivered only once the broker acknowledged them, with the contract's
// user properties (MQTT 5) or the envelope (MQTT 3.1.1); many keys in
// flight with each key's order kept; a refused message holds back only its
// own key; a broker down, stopped or killed leaves everything retriable,
// and the sink shows it and recovers.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mqtt_broker.hpp"
#include "sink_batch.hpp"
#include "sinks/mqtt_options.hpp"
#include "sinks/mqtt_sink.hpp"
#include "test_support.hpp"

namespace outbox {
namespace {

using mqtt_test::Broker;
using mqtt_test::Seen;
using mqtt_test::SharedBroker;
using mqtt_test::Subscriber;
using test_support::Batch;
using test_support::Clock;
using test_support::Contains;
using test_support::Opt;

std::unique_ptr<Sink> MakeTestSink(int port, SinkOptions more = {}) {
  SinkOptions options = {Opt("port", std::to_string(port)), Opt("client_id", "unit")};
  for (SinkOption &o : more) options.push_back(std::move(o));
  std::string error;
  std::unique_ptr<Sink> sink = MakeMqttSink("test", options, &error);
  EXPECT_NE(sink, nullptr) << error;
  return sink;
}

std::string Property(const Seen &seen, const std::string &name) {
  for (const auto &[n, v] : seen.properties) {
    if (n == name) return v;
  }
  return "(none)";
}

TEST(MqttSink, DeliversWithTheContractsUserProperties) {
  Broker &broker = SharedBroker();
  MQTT_REQUIRE_BROKER(broker);
  Subscriber subscriber(broker.port());
  ASSERT_TRUE(subscriber.subscribed());
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port());
  EXPECT_EQ(sink->State(), "idle");
  Batch batch;
  batch.Add("t/props", "k1", R"({"n":1})", {{"trace", "abc"}, {"tenant", "eu"}});
  batch.Add("t/props", std::nullopt, R"({"n":2})");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u) << batch.Errors();
  EXPECT_GT(batch.results[0].answered_at_us, 0);
  EXPECT_EQ(sink->State(), "connected");
  const std::vector<Seen> seen = subscriber.Wait(2);
  ASSERT_EQ(seen.size(), 2u);
  std::map<std::string, Seen> by_body;
  for (const Seen &s : seen) by_body[s.body] = s;
  const Seen &first = by_body[R"({"n":1})"];
  EXPECT_EQ(first.topic, "t/props");
  EXPECT_EQ(first.content_type, "application/json");
  EXPECT_EQ(first.correlation, batch.owned[0]->id);
  ASSERT_EQ(first.properties.size(), 5u);
  EXPECT_EQ(first.properties[0], std::make_pair(std::string("outbox-id"), batch.owned[0]->id));
  EXPECT_EQ(Property(first, "outbox-topic"), "orders.created");
  EXPECT_EQ(Property(first, "outbox-key"), "k1");
  EXPECT_EQ(Property(first, "trace"), "abc");
  EXPECT_EQ(Property(first, "tenant"), "eu");
  EXPECT_EQ(Property(by_body[R"({"n":2})"], "outbox-key"), "(none)");  // keyless
}

TEST(MqttSink, CloudEventsTravelStructured) {
  Broker &broker = SharedBroker();
  MQTT_REQUIRE_BROKER(broker);
  Subscriber subscriber(broker.port());
  ASSERT_TRUE(subscriber.subscribed());
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("qos", "2")});
  Batch batch;
  batch.Add("t/ce", "k", R"({"n":1})", {}, MessageFormat::kCloudEvents);
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 1u) << batch.Errors();
  const std::vector<Seen> seen = subscriber.Wait(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].content_type, "application/cloudevents+json");
  EXPECT_TRUE(Contains(seen[0].body, "\"specversion\":\"1.0\""));
  EXPECT_TRUE(Contains(seen[0].body, "\"id\":\"" + batch.owned[0]->id + "\""));
  EXPECT_TRUE(Contains(seen[0].body, "\"data\":{\"n\":1}"));
  EXPECT_EQ(Property(seen[0], "outbox-id"), batch.owned[0]->id);
}

TEST(MqttSink, Mqtt311CarriesTheEnvelope) {
  Broker &broker = SharedBroker();
  MQTT_REQUIRE_BROKER(broker);
  Subscriber subscriber(broker.port());
  ASSERT_TRUE(subscriber.subscribed());
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("protocol", "3.1.1")});
  Batch batch;
  batch.Add("t/v311", "k", R"({"n":1})", {{"h", "v"}});
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 1u) << batch.Errors();
  const std::vector<Seen> seen = subscriber.Wait(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].body, "{\"id\":\"" + batch.owned[0]->id +
                              R"(","topic":"orders.created","key":"k","payload":{"n":1},)"
                              R"("headers":{}})");
  EXPECT_TRUE(seen[0].properties.empty());
}

TEST(MqttSink, ManyKeysInFlightKeepEachKeysOrder) {
  Broker &broker = SharedBroker();
  MQTT_REQUIRE_BROKER(broker);
  Subscriber subscriber(broker.port());
  ASSERT_TRUE(subscriber.subscribed());
  for (const char *qos : {"1", "2"}) {
    std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("qos", qos)});
    Batch batch;
    constexpr int kKeys = 20;
    constexpr int kPerKey = 25;
    for (int i = 0; i < kKeys * kPerKey; ++i) {
      batch.Add(std::string("t/order/") + qos, "key" + std::to_string(i % kKeys),
                std::to_string(i / kKeys));
    }
    const Clock::time_point start = Clock::now();
    batch.Publish(sink.get());
    ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), batch.results.size()) << batch.Errors();
    EXPECT_LT(test_support::SecondsSince(start), 10.0);
  }
  const std::vector<Seen> seen = subscriber.Wait(2 * 20 * 25);
  ASSERT_EQ(seen.size(), 2u * 20 * 25);
  // The subscriber cannot see keys (the properties can): per topic and key,
  // the sequence numbers arrive in order.
  std::map<std::pair<std::string, std::string>, int> last;
  for (const Seen &s : seen) {
    const auto slot = std::make_pair(s.topic, Property(s, "outbox-key"));
    const int n = std::stoi(s.body);
    auto it = last.find(slot);
    if (it != last.end()) {
      EXPECT_EQ(n, it->second + 1) << s.topic << " " << slot.second;
    }
    last[slot] = n;
  }
}

TEST(MqttSink, ARefusedMessageHoldsBackOnlyItsKey) {
  Broker &broker = SharedBroker();
  MQTT_REQUIRE_BROKER(broker);
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port());
  Batch batch;
  batch.Add("denied/x", "k1", "1");  // the ACL refuses it: 0x87
  batch.Add("t/ok", "k1", "2");      // another target, the same key: held back
  batch.Add("denied/x", "k1", "3");  // the same target and key: held back
  batch.Add("t/ok", "k2", "4");
  batch.Add("t/big", "k3", "\"" + std::string(mqtt_test::kMqttTestMaxPacket, 'x') + "\"");
  batch.Add("t/big", "k3", "6");  // behind the too large one
  batch.Add("a//b", "k4", "7");   // an event topic that is not an MQTT topic
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kTargetRefused) << batch.Errors();
  EXPECT_TRUE(Contains(batch.results[0].error, "0x87 not authorized"));
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kNotSent) << batch.Errors();
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(batch.results[3].status, DeliveryStatus::kDelivered) << batch.Errors();
  EXPECT_EQ(batch.results[4].status, DeliveryStatus::kRejected);
  EXPECT_TRUE(Contains(batch.results[4].error, "too large"));
  EXPECT_EQ(batch.results[5].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(batch.results[6].status, DeliveryStatus::kTargetRefused);
  EXPECT_EQ(sink->State(), "connected");  // refusals are the messages', not the sink's
}

TEST(MqttSink, ABrokerDownLeavesEverythingRetriableAndRecovers) {
  Broker broker;  // a broker of this test's own: it is stopped
  MQTT_REQUIRE_BROKER(broker);
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("connect_timeout_ms", "500")});
  broker.Kill();
  Batch batch;
  batch.Add("t/down", "k", "1").Add("t/down", "k", "2").Add("t/down", std::nullopt, "3");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable), 3u) << batch.Errors();
  for (const Delivery &d : batch.results) {
    EXPECT_TRUE(d.unsent) << "no connection took it: the sink's trouble, never the event's";
    EXPECT_FALSE(d.connection_lost);
  }
  EXPECT_EQ(sink->State(), "down");
  EXPECT_TRUE(Contains(batch.Errors(), "mqtt://127.0.0.1:"));
  ASSERT_TRUE(broker.Start());
  batch.Publish(sink.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 3u) << batch.Errors();
  EXPECT_EQ(sink->State(), "connected");
}

TEST(MqttSink, NothingIsDeliveredWithoutItsAcknowledgement) {
  Broker broker;
  MQTT_REQUIRE_BROKER(broker);
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("ack_timeout_ms", "300")});
  Batch warm;
  warm.Add("t/stop", "k", "0");
  warm.Publish(sink.get());
  ASSERT_EQ(warm.Count(DeliveryStatus::kDelivered), 1u) << warm.Errors();
  broker.Pause();  // it takes the bytes (the kernel does) but never answers
  Batch batch;
  for (int i = 0; i < 10; ++i) batch.Add("t/stop", "k" + std::to_string(i % 3), std::to_string(i));
  batch.Publish(sink.get());
  broker.Resume();
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 0u);
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable) + batch.Count(DeliveryStatus::kNotSent), 10u);
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable), 3u);  // one per key was in flight
  EXPECT_TRUE(Contains(batch.Errors(), "no acknowledgement"));
  EXPECT_EQ(sink->State(), "down");
  batch.Publish(sink.get());  // a new connection: the late answers cannot confuse it
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 10u) << batch.Errors();
}

// MQTT 3.1.1 has no way to learn the broker's packet limit: a message past
// it makes the broker close the connection, and every message in flight is
// lost with it. They are marked so (the dispatcher tries each alone before
// it counts an attempt against it; those not handed to it yet are suspected
// of nothing): alone, the neighbours go through and only the culprit fails
// again.
TEST(MqttSink, MessagesLostWithAConnectionClosedOverOneAreMarkedAndGoThroughAlone) {
  Broker &broker = SharedBroker();
  MQTT_REQUIRE_BROKER(broker);
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("protocol", "3.1.1")});
  const std::string huge = "\"" + std::string(mqtt_test::kMqttTestMaxPacket + 1000, 'x') + "\"";
  constexpr size_t kCulprit = 10;
  Batch batch;
  for (size_t k = 0; k < 24; ++k) {
    batch.Add("t/lost", "k" + std::to_string(k), k == kCulprit ? huge : R"({"n":1})");
  }
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[kCulprit].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(batch.results[kCulprit].connection_lost);
  std::vector<size_t> lost;
  for (size_t k = 0; k < batch.results.size(); ++k) {
    const Delivery &d = batch.results[k];
    if (k == kCulprit || d.status == DeliveryStatus::kDelivered) continue;
    // On the connection, or not handed to it yet (unsent: suspected of
    // nothing), each waits as one lost with it.
    EXPECT_EQ(d.status, DeliveryStatus::kRetriable) << k << ": " << d.error;
    EXPECT_TRUE(d.connection_lost) << k << ": " << d.error;
    lost.push_back(k);
  }
  for (size_t k : lost) {
    Batch alone;
    alone.Add("t/lost", "k" + std::to_string(k), R"({"n":1})");
    alone.Publish(sink.get());
    EXPECT_EQ(alone.Count(DeliveryStatus::kDelivered), 1u) << alone.Errors();
  }
  Batch culprit;
  culprit.Add("t/lost", "k" + std::to_string(kCulprit), huge);
  culprit.Publish(sink.get());
  EXPECT_EQ(culprit.results[0].status, DeliveryStatus::kRetriable);
  Batch after;
  after.Add("t/lost", "k0", R"({"n":2})");
  after.Publish(sink.get());
  EXPECT_EQ(after.Count(DeliveryStatus::kDelivered), 1u) << after.Errors();
}

TEST(MqttSink, ABrokerKilledMidStreamLosesNothingAndKeepsOrder) {
  Broker broker;
  MQTT_REQUIRE_BROKER(broker);
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("connect_timeout_ms", "500")});
  std::map<std::string, int> next_of_key;  // the next number each key sends
  int delivered = 0;
  for (int round = 0; round < 12; ++round) {
    if (round == 4 || round == 8) broker.Kill();
    if (round == 6 || round == 10) {
      ASSERT_TRUE(broker.Start());
    }
    Batch batch;
    for (int k = 0; k < 5; ++k) {
      const std::string key = "k" + std::to_string(k);
      for (int j = 0; j < 4; ++j) batch.Add("t/kill", key, std::to_string(next_of_key[key] + j));
    }
    batch.Publish(sink.get());
    // Per key, what was delivered is a prefix of the batch's messages: the
    // rest is sent again (from its first undelivered one) next round.
    for (int k = 0; k < 5; ++k) {
      const std::string key = "k" + std::to_string(k);
      int prefix = 0;
      bool gap = false;
      for (int j = 0; j < 4; ++j) {
        const bool ok =
            batch.results[static_cast<size_t>(k * 4 + j)].status == DeliveryStatus::kDelivered;
        if (ok && gap) {
          ADD_FAILURE() << "a later message of " << key << " overtook an earlier one";
        }
        if (!ok) gap = true;
        if (ok && !gap) ++prefix;
      }
      next_of_key[key] += prefix;
      delivered += prefix;
    }
    if (round >= 4 && round < 6) {
      EXPECT_EQ(sink->State(), "down");
    }
  }
  EXPECT_GT(delivered, 0);
  EXPECT_EQ(sink->State(), "connected");
  Batch last;
  last.Add("t/kill", "k0", "x");
  last.Publish(sink.get());
  EXPECT_EQ(last.Count(DeliveryStatus::kDelivered), 1u) << last.Errors();
}

TEST(MqttSink, AConnectionClosedWhileIdleIsMadeAgainBeforeSending) {
  Broker broker;
  MQTT_REQUIRE_BROKER(broker);
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port());
  Batch first;
  first.Add("t/idle", "k", "1");
  first.Publish(sink.get());
  ASSERT_EQ(first.Count(DeliveryStatus::kDelivered), 1u) << first.Errors();
  // The broker goes and comes back between two batches: the next batch
  // finds the old connection closed before sending on it, and goes out on
  // a new one instead of failing.
  ASSERT_TRUE(broker.Restart());
  Batch second;
  second.Add("t/idle", "k", "2").Add("t/idle", std::nullopt, "3");
  second.Publish(sink.get());
  EXPECT_EQ(second.Count(DeliveryStatus::kDelivered), 2u) << second.Errors();
  EXPECT_EQ(sink->State(), "connected");
}

TEST(MqttSink, ClientIdsOfTwoSinksDiffer) {
  Broker &broker = SharedBroker();
  MQTT_REQUIRE_BROKER(broker);
  // Two publishers of one sink (the same options): were their ids the same,
  // each connection would take the other's over, and one would fail.
  std::unique_ptr<Sink> a = MakeTestSink(broker.port());
  std::unique_ptr<Sink> b = MakeTestSink(broker.port());
  Batch first;
  first.Add("t/two", "k", "1");
  first.Publish(a.get());
  Batch second;
  second.Add("t/two", "k", "2");
  second.Publish(b.get());
  first.Publish(a.get());
  EXPECT_EQ(first.Count(DeliveryStatus::kDelivered), 1u) << first.Errors();
  EXPECT_EQ(second.Count(DeliveryStatus::kDelivered), 1u) << second.Errors();
  EXPECT_TRUE(Contains(
      [&] {
        std::string text;
        for (const LogLine &l : a->TakeLogs()) text += l.text + "\n";
        return text;
      }(),
      "as clients \"unit-"));
}

// The client ids the broker's log shows PUBLISHes to `topic` from.
std::set<std::string> PublishersOf(const Broker &broker, const std::string &topic) {
  std::set<std::string> ids;
  std::istringstream log(broker.Log());
  const std::string from = "Received PUBLISH from ";
  for (std::string line; std::getline(log, line);) {
    const size_t at = line.find(from);
    if (at == std::string::npos || line.find("'" + topic + "'") == std::string::npos) continue;
    const size_t start = at + from.size();
    ids.insert(line.substr(start, line.find(' ', start) - start));
  }
  return ids;
}

std::string LogsOf(Sink *sink) {
  std::string text;
  for (const LogLine &l : sink->TakeLogs()) text += l.text + "\n";
  return text;
}

TEST(MqttSink, MessagesGoOutOverEveryConnectionSoTheBrokersWindowIsPerConnection) {
  // mosquitto lets each connection have one message unacknowledged here
  // (its Receive Maximum): one connection would carry one message per round
  // trip, four carry four.
  Broker broker(false, "max_inflight_messages 1\nlog_type all\n");
  MQTT_REQUIRE_BROKER(broker);
  for (const int connections : {1, 4}) {
    std::unique_ptr<Sink> sink =
        MakeTestSink(broker.port(), {Opt("connections", std::to_string(connections))});
    const std::string topic = "t/spread/" + std::to_string(connections);
    Batch batch;
    for (int k = 0; k < 8; ++k) batch.Add(topic, std::nullopt, "1");  // keyless: in turn
    batch.Publish(sink.get());
    ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 8u) << batch.Errors();
    const std::set<std::string> ids = PublishersOf(broker, topic);
    EXPECT_EQ(ids.size(), static_cast<size_t>(connections)) << broker.Log();
    for (const std::string &id : ids) {
      EXPECT_EQ(id.size(), std::string("unit-").size() + 16) << id;  // one length for all
    }
    const std::string logs = LogsOf(sink.get());
    EXPECT_TRUE(Contains(logs, connections == 1 ? "as client \"unit-" : "as clients \"unit-"))
        << logs;
    if (connections == 4) {
      EXPECT_TRUE(Contains(logs, "\" (4 connections)")) << logs;
    }
  }
}

TEST(MqttSink, EveryMessageOfAKeyGoesOverOneConnection) {
  // A broker orders what one client sent; a clustered broker behind a load
  // balancer may deliver two clients' messages in either order, even when
  // the first was acknowledged before the second was sent. So a key keeps
  // to one connection, and only keyless messages go over each in turn.
  Broker broker(false, "log_type all\n");
  MQTT_REQUIRE_BROKER(broker);
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("connections", "4")});
  for (int round = 0; round < 2; ++round) {  // and the same one in the next batch
    Batch batch;
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 16; ++k) {
        batch.Add("t/key/" + std::to_string(k), "key" + std::to_string(k), std::to_string(j));
      }
      batch.Add("t/keyless", std::nullopt, std::to_string(j));
      batch.Add("t/keyless", std::nullopt, std::to_string(j));
    }
    batch.Publish(sink.get());
    ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), batch.results.size()) << batch.Errors();
  }
  std::set<std::string> all;
  for (int k = 0; k < 16; ++k) {
    const std::set<std::string> ids = PublishersOf(broker, "t/key/" + std::to_string(k));
    EXPECT_EQ(ids.size(), 1u) << "key" << k << " went over " << ids.size() << " connections";
    all.insert(ids.begin(), ids.end());
  }
  EXPECT_GT(all.size(), 1u) << "16 keys all on one of 4 connections";
  EXPECT_EQ(PublishersOf(broker, "t/keyless").size(), 4u);
}

TEST(MqttSink, WithRetainOneConnectionKeepsTheLastMessageSentRetained) {
  // The broker retains the last message it got per topic; over several
  // connections that need not be the last one sent.
  Broker broker(false, "log_type all\n");
  MQTT_REQUIRE_BROKER(broker);
  std::unique_ptr<Sink> sink =
      MakeTestSink(broker.port(), {Opt("connections", "4"), Opt("retain", "true")});
  for (int round = 0; round < 3; ++round) {
    Batch batch;
    for (int i = 1; i <= 8; ++i) batch.Add("t/retain", std::nullopt, std::to_string(i));
    batch.Publish(sink.get());
    ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 8u) << batch.Errors();
  }
  EXPECT_EQ(PublishersOf(broker, "t/retain").size(), 1u);
  Subscriber late(broker.port());  // gets what is retained as it subscribes
  ASSERT_TRUE(late.subscribed());
  const std::vector<Seen> seen = late.Wait(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].body, "8");
}

TEST(MqttSink, ABrokerThatTakesFewerConnectionsLeavesTheSinkWithThoseItTook) {
  // A listener limit (or a per-user one) below the option's: the sink goes
  // on with the connections the broker took, and says so.
  Broker broker(false, "max_connections 2\n");
  MQTT_REQUIRE_BROKER(broker);
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("connections", "4")});
  for (int round = 0; round < 3; ++round) {
    Batch batch;
    for (int k = 0; k < 8; ++k) batch.Add("t/fewer", "k" + std::to_string(k), "1");
    batch.Publish(sink.get());
    ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 8u) << batch.Errors() << LogsOf(sink.get());
  }
  EXPECT_EQ(sink->State(), "connected");
  const std::string logs = LogsOf(sink.get());
  // mosquitto counts the test's readiness probe for a while, so it takes
  // one or two.
  EXPECT_TRUE(Contains(logs, " of 4 connections (")) << logs;
  EXPECT_TRUE(Contains(logs, "the sink goes on with ")) << logs;
  EXPECT_FALSE(Contains(logs, "(4 connections)")) << logs;
  // After a loss it asks for every connection again (the limit may have
  // been raised meanwhile), and settles again.
  ASSERT_TRUE(broker.Restart());
  Batch after;
  for (int k = 0; k < 8; ++k) after.Add("t/fewer", "k" + std::to_string(k), "2");
  after.Publish(sink.get());
  ASSERT_EQ(after.Count(DeliveryStatus::kDelivered), 8u) << after.Errors() << LogsOf(sink.get());
  const std::string again = LogsOf(sink.get());
  EXPECT_TRUE(Contains(again, " of 4 connections (")) << again;
}

TEST(MqttSink, ClosingTheSinkDisconnectsEveryConnectionCleanly) {
  Broker broker;
  MQTT_REQUIRE_BROKER(broker);
  {
    std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("connections", "4")});
    Batch batch;
    batch.Add("t/close", "k", "1");
    batch.Publish(sink.get());
    ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 1u) << batch.Errors();
  }
  // mosquitto logs "Client <id> disconnected." for a DISCONNECT, "closed its
  // connection" for a socket closed without one.
  const auto count = [&](const std::string &what) {
    const std::string log = broker.Log();
    size_t n = 0;
    for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  const Clock::time_point start = Clock::now();
  while (count(" disconnected.") < 4 && test_support::SecondsSince(start) < 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(count(" disconnected."), 4u) << broker.Log();
  EXPECT_EQ(count("Client unit-"), 4u) << broker.Log();  // none "closed its connection"
}

TEST(MqttSink, OneConnectionTakenOverRetriesWhatWasInFlightAndKeepsEachKeysOrder) {
  Broker broker;
  MQTT_REQUIRE_BROKER(broker);
  Subscriber subscriber(broker.port());
  ASSERT_TRUE(subscriber.subscribed());
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port(), {Opt("connections", "4")});
  Batch warm;
  warm.Add("t/over/warm", "w", "0");
  warm.Publish(sink.get());
  ASSERT_EQ(warm.Count(DeliveryStatus::kDelivered), 1u) << warm.Errors();
  const std::string logs = LogsOf(sink.get());
  const size_t at = logs.find("as clients \"");
  ASSERT_NE(at, std::string::npos) << logs;
  const size_t start = at + std::string("as clients \"").size();
  // The connections' identifiers count up from the first's.
  const std::string first = logs.substr(start, logs.find('"', start) - start);
  const size_t dash = first.rfind('-');
  const std::string third =
      MqttClientId(first.substr(0, dash), std::stoull(first.substr(dash + 1), nullptr, 16) + 2);
  // While the broker is stopped the sink hands a batch over, and a client
  // with its third connection's identifier connects: the broker takes that
  // connection over as it reads its backlog, in whatever order against the
  // messages, and answers some of them.
  broker.Pause();
  Batch batch;
  std::map<std::string, int> next_of_key;
  for (int k = 0; k < 5; ++k) {
    for (int j = 0; j < 4; ++j) batch.Add("t/over", "k" + std::to_string(k), std::to_string(j));
  }
  const uint64_t ticket = batch.Send(sink.get());
  mosquitto *intruder = mosquitto_new(third.c_str(), true, nullptr);
  ASSERT_NE(intruder, nullptr);
  ASSERT_EQ(mosquitto_connect(intruder, "127.0.0.1", broker.port(), 30), MOSQ_ERR_SUCCESS);
  mosquitto_loop_start(intruder);
  broker.Resume();
  if (ticket != 0) sink->Collect(ticket, nullptr);
  // Per key, what was delivered is a prefix of its messages; nothing is
  // without an outcome.
  for (int k = 0; k < 5; ++k) {
    bool gap = false;
    int prefix = 0;
    for (int j = 0; j < 4; ++j) {
      const DeliveryStatus status = batch.results[static_cast<size_t>(k * 4 + j)].status;
      EXPECT_TRUE(status == DeliveryStatus::kDelivered || status == DeliveryStatus::kRetriable ||
                  status == DeliveryStatus::kNotSent)
          << batch.Errors();
      const bool ok = status == DeliveryStatus::kDelivered;
      if (ok && gap) ADD_FAILURE() << "a later message of k" << k << " overtook an earlier one";
      if (!ok) gap = true;
      if (ok && !gap) ++prefix;
    }
    next_of_key["k" + std::to_string(k)] = prefix;
  }
  mosquitto_disconnect(intruder);
  mosquitto_loop_stop(intruder, true);
  mosquitto_destroy(intruder);
  // The rest goes again, on new connections, after what was delivered.
  Batch rest;
  for (int k = 0; k < 5; ++k) {
    const std::string key = "k" + std::to_string(k);
    for (int j = next_of_key[key]; j < 4; ++j) rest.Add("t/over", key, std::to_string(j));
  }
  rest.Publish(sink.get());
  ASSERT_EQ(rest.Count(DeliveryStatus::kDelivered), rest.results.size()) << rest.Errors();
  // At the subscriber each key's numbers never go back, except to repeat
  // the last one (a message whose acknowledgement was lost with its
  // connection arrives twice), and every number arrives.
  std::map<std::string, std::set<int>> arrived;
  const Clock::time_point waiting = Clock::now();
  for (bool complete = false; !complete && test_support::SecondsSince(waiting) < 10;) {
    arrived.clear();
    std::map<std::string, int> last;
    for (const Seen &s : subscriber.Wait(21, 0.2)) {
      if (s.topic != "t/over") continue;
      const std::string key = Property(s, "outbox-key");
      const int n = std::stoi(s.body);
      auto it = last.find(key);
      if (it != last.end() && (n < it->second || n > it->second + 1)) {
        ADD_FAILURE() << key << ": " << n << " after " << it->second;
        return;
      }
      last[key] = n;
      arrived[key].insert(n);
    }
    complete = true;
    for (int k = 0; k < 5; ++k) complete = complete && arrived["k" + std::to_string(k)].size() == 4;
  }
  for (int k = 0; k < 5; ++k) EXPECT_EQ(arrived["k" + std::to_string(k)].size(), 4u) << k;
}

TEST(MqttSink, NothingIsSentPastItsBatchsCutOffWhenTheSinkIsSteppedLate) {
  // No message of a batch goes later than connect_timeout_ms +
  // ack_timeout_ms after it, even when the first Step after connecting
  // comes only after that (a caller busy with another sink).
  Broker broker;
  MQTT_REQUIRE_BROKER(broker);
  Subscriber subscriber(broker.port());
  ASSERT_TRUE(subscriber.subscribed());
  std::unique_ptr<Sink> sink = MakeTestSink(
      broker.port(), {Opt("connect_timeout_ms", "2000"), Opt("ack_timeout_ms", "100")});
  Batch batch;
  batch.Add("t/late", "k", "1").Add("t/late", std::nullopt, "2");
  // The broker answers the CONNECT only once Send has returned (a quick
  // broker could answer within Send's own Step, which then sends at once),
  // and the CONNACK waits in the socket until the first Step after the
  // cut-off (2,100 ms after Send) reads it.
  broker.Pause();
  const uint64_t ticket = batch.Send(sink.get());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  broker.Resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(2400));
  if (ticket != 0) sink->Collect(ticket, nullptr);
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 0u) << batch.Errors();
  EXPECT_EQ(batch.Count(DeliveryStatus::kNotSent), 2u) << batch.Errors();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const Seen &seen : subscriber.Wait(0, 0)) EXPECT_NE(seen.topic, "t/late");
}

TEST(MqttSink, AWindowIsAcknowledgedWithoutWaitingForTcpsDelayedAcknowledgement) {
  Broker &broker = SharedBroker();  // mosquitto's default: Nagle on its sockets
  MQTT_REQUIRE_BROKER(broker);
  std::unique_ptr<Sink> sink = MakeTestSink(broker.port());
  // A broker that keeps Nagle's algorithm on sends a window's second PUBACK
  // only once the client acknowledged the first at the TCP level; a client
  // that delays its acknowledgements (Linux: at least 40 ms) makes every
  // call of more than one message last that long. The fastest of many calls
  // says whether the sink waits for it: load only makes calls slower.
  double fastest = 1e9;
  for (int round = 0; round < 30; ++round) {
    Batch batch;
    for (int k = 0; k < 8; ++k) batch.Add("t/window", "k" + std::to_string(k), "1");
    const Clock::time_point start = Clock::now();
    batch.Publish(sink.get());
    const double took = test_support::SecondsSince(start);
    ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 8u) << batch.Errors();
    if (took < fastest) fastest = took;
  }
  EXPECT_LT(fastest, 0.030) << "every call of 8 messages took 30 ms or more";
}

}  // namespace
}  // namespace outbox
