// The NATS sink against a real nats-server with JetStream (nats_server.hpp:
// one per test binary run): what arrives in the stream (payload and headers,
// raw and cloudevents), acknowledgements and duplicate suppression, refused
// messages and subjects, and per-key order when JetStream refuses one
// message. nats_sink_faults_test.cpp has the server dying, hanging or
// lacking JetStream.
#include "nats_sink_support.hpp"

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;
using nats_test::AllLogs;
using nats_test::Batch;
using nats_test::Client;
using nats_test::Healthy;
using nats_test::Server;
using Stored = Client::Stored;
using nats_test::Watcher;

std::unique_ptr<Sink> MakeSink(int port, std::vector<SinkOption> more = {}) {
  return nats_test::MakeTestSink(port, std::move(more));
}

#define REQUIRE_SERVER(server) NATS_REQUIRE_SERVER(server)

TEST(NatsSink, OptionsAreValidatedAtCreationAndConnectToNothing) {
  std::string error;
  EXPECT_EQ(MakeNatsSink("bad", {Opt("server", "x")}, &error), nullptr);
  EXPECT_TRUE(Contains(error, "unknown option \"server\""));
  EXPECT_EQ(
      MakeNatsSink("bad",
                   {Opt("token", "t0ken-secret"), Opt("user", "u"), Opt("password", "p4ss-secret")},
                   &error),
      nullptr);
  EXPECT_TRUE(Contains(error, "option \"token\""));
  EXPECT_EQ(error.find("t0ken-secret"), std::string::npos);
  // Creating a sink connects to nothing: no server listens on this port.
  std::unique_ptr<Sink> sink = MakeNatsSink(
      "ok", {Opt("servers", "127.0.0.1:" + std::to_string(nats_test::FreePort()))}, &error);
  ASSERT_NE(sink, nullptr) << error;
  EXPECT_EQ(sink->State(), "idle");
  EXPECT_FALSE(sink->NeedsRecreate());
  EXPECT_TRUE(sink->TakeLogs().empty());
  sink->Publish(nullptr, 0, nullptr, nullptr);  // an empty batch does nothing at all
  EXPECT_EQ(sink->State(), "idle");
}

TEST(NatsSink, RawMessagesArriveWithPayloadAndHeaders) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  Client client(server.port());
  ASSERT_TRUE(client.AddStream({"RAW", {"raw.>"}}));
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("raw.orders", "customer-7", R"({"total":12.5,"items":[1,2]})",
            {{"trace", "abc"},
             {"Nats-Msg-Id", "forged"},
             {"nats-expected-stream", "OTHER"},
             {"NATS-Expected-Last-Sequence", "3"},
             {"Status", "503"},
             {"description", "x"},
             {"bad name", "v"},
             {"colon:name", "v"},
             {"multi", "line\r\nNats-Msg-Id: forged"},
             {"outbox-id", "forged"},
             {"Camel-Case", "kept as named"}});
  batch.Add("raw.orders", std::nullopt, "null");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u) << batch.Errors();
  EXPECT_EQ(batch.results[0].error, "");
  EXPECT_NE(batch.results[0].answered_at_us, 0);
  EXPECT_EQ(sink->State(), "connected");
  EXPECT_TRUE(Contains(AllLogs(sink.get()), "connected to nats://127.0.0.1:"));

  const std::vector<Stored> stored = client.Read("RAW");
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].subject, "raw.orders");
  EXPECT_EQ(stored[0].data, R"({"total":12.5,"items":[1,2]})");
  const std::map<std::string, std::string> want = {{"Nats-Msg-Id", batch.owned[0]->id},
                                                   {"outbox-id", batch.owned[0]->id},
                                                   {"outbox-topic", "orders.created"},
                                                   {"outbox-key", "customer-7"},
                                                   {"trace", "abc"},
                                                   {"Camel-Case", "kept as named"}};
  EXPECT_EQ(stored[0].headers, want);
  EXPECT_EQ(stored[0].header_count, 6);  // nothing forged beside ours
  // No key: no outbox-key.
  EXPECT_EQ(stored[1].data, "null");
  EXPECT_EQ(stored[1].headers,
            (std::map<std::string, std::string>{{"Nats-Msg-Id", batch.owned[1]->id},
                                                {"outbox-id", batch.owned[1]->id},
                                                {"outbox-topic", "orders.created"}}));
}

TEST(NatsSink, CloudEventsTravelInBinaryModeWithCeHeaders) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  Client client(server.port());
  ASSERT_TRUE(client.AddStream({"CE", {"ce.>"}}));
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("ce.orders", "k1", R"({"a":1})", {{"traceparent", "00-ab-cd-01"}, {"X-Other", "o"}},
            MessageFormat::kCloudEvents);
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 1u) << batch.Errors();
  const std::vector<Stored> stored = client.Read("CE");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].data, R"({"a":1})");  // binary mode: the body is the data
  const std::map<std::string, std::string> want = {
      {"Nats-Msg-Id", batch.owned[0]->id},  {"ce-specversion", "1.0"},
      {"ce-id", batch.owned[0]->id},        {"ce-source", "/outbox/test"},
      {"ce-type", "orders.created"},        {"ce-time", "2026-05-09T13:20:00.000000Z"},
      {"content-type", "application/json"}, {"ce-partitionkey", "k1"},
      {"ce-traceparent", "00-ab-cd-01"},    {"ce-outboxheaders", R"({"X-Other":"o"})"}};
  EXPECT_EQ(stored[0].headers, want);
}

TEST(NatsSink, ResendWithinTheDuplicateWindowIsAcknowledgedAndStoredOnce) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  Client client(server.port());
  ASSERT_TRUE(client.AddStream({"DUP", {"dup.>"}}));
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("dup.x", "k", R"({"n":1})").Add("dup.x", "k", R"({"n":2})");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u) << batch.Errors();
  AllLogs(sink.get());
  // The same events again, as at-least-once delivery re-sends them (same
  // ids, so the same Nats-Msg-Id): JetStream answers duplicate:true.
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u) << batch.Errors();
  EXPECT_TRUE(Contains(AllLogs(sink.get()), "2 message(s) were already in their stream"));
  const std::vector<Stored> stored = client.Read("DUP");
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].data, R"({"n":1})");
  EXPECT_EQ(stored[1].data, R"({"n":2})");
}

TEST(NatsSink, SubjectNoStreamCapturesIsTheEventsFaultNotTheSinks) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  Client client(server.port());
  ASSERT_TRUE(client.AddStream({"CAUGHT", {"caught.>"}}));
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("nowhere.a", "k", "1").Add("caught.a", "j", "2").Add("nowhere.a", "k", "3");
  batch.Add("nowhere.b", std::nullopt, "4");
  batch.Add("caught.a", "k", "5");  // another subject, behind its key's failure too
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kTargetRefused);
  EXPECT_TRUE(Contains(batch.results[0].error,
                       "no JetStream stream captures subject \"nowhere.a\" (no responders)"));
  EXPECT_NE(batch.results[0].answered_at_us, 0);
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kDelivered) << batch.Errors();
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kNotSent);  // behind its key's failure
  EXPECT_EQ(batch.results[3].status, DeliveryStatus::kTargetRefused);
  EXPECT_EQ(batch.results[4].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(sink->State(), "connected");  // the sink is fine
}

TEST(NatsSink, KeyOrderHoldsWhenJetStreamRefusesOneMessage) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  Client client(server.port());
  // Room for two messages, and a full stream refuses new ones.
  ASSERT_TRUE(client.AddStream({"LIMITED", {"lim.>"}, 2, true}));
  ASSERT_TRUE(client.AddStream({"FREE", {"free.>"}}));
  Watcher sent(client.nc(), "lim.>");
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch first;
  first.Add("lim.a", "p", "0");
  first.Publish(sink.get());
  ASSERT_EQ(first.Count(DeliveryStatus::kDelivered), 1u) << first.Errors();

  // A, B and C of key k: A takes the last place, B is refused, C waits
  // behind B, never sent. Other keys and subjects go on.
  Batch batch;
  batch.Add("lim.a", "k", "A").Add("free.a", "f", "F1").Add("lim.a", "k", "B");
  batch.Add("free.a", "f", "F2").Add("lim.a", "k", "C");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.Errors();
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kTargetRefused);
  EXPECT_TRUE(Contains(batch.results[2].error, "maximum messages exceeded"));
  EXPECT_EQ(batch.results[4].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(batch.results[3].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(sent.Seen(), (std::vector<std::string>{"0", "A", "B"}));  // C never went out

  // Room again: B and C go, in their order.
  ASSERT_TRUE(client.PurgeStream("LIMITED"));
  Batch retry;
  retry.Add("lim.a", "k", "B", {}, MessageFormat::kRaw, batch.owned[2]->id);
  retry.Add("lim.a", "k", "C", {}, MessageFormat::kRaw, batch.owned[4]->id);
  retry.Publish(sink.get());
  ASSERT_EQ(retry.Count(DeliveryStatus::kDelivered), 2u) << retry.Errors();
  const std::vector<Stored> stored = client.Read("LIMITED");
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].data, "B");
  EXPECT_EQ(stored[1].data, "C");
  const std::vector<Stored> free = client.Read("FREE");
  ASSERT_EQ(free.size(), 2u);
  EXPECT_EQ(free[0].data, "F1");
  EXPECT_EQ(free[1].data, "F2");
}

TEST(NatsSink, ManyKeysInFlightKeepEachKeysOrder) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  Client client(server.port());
  ASSERT_TRUE(client.AddStream({"MANY", {"many.>"}}));
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  for (int i = 0; i < 600; ++i) {
    const int key = i % 12;
    batch.Add("many.s" + std::to_string(key % 3),
              key < 10 ? std::optional<std::string>("k" + std::to_string(key)) : std::nullopt,
              std::to_string(i));
  }
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 600u) << batch.Errors();
  std::map<std::string, int> last;
  for (const Stored &s : client.Read("MANY")) {
    const std::string key = s.headers.count("outbox-key") ? s.headers.at("outbox-key") : "";
    if (key.empty()) continue;
    const int n = std::stoi(s.data);
    if (last.count(key) != 0) {
      EXPECT_LT(last[key], n) << "key " << key;
    }
    last[key] = n;
  }
  EXPECT_EQ(last.size(), 10u);
  EXPECT_EQ(client.StreamMessages("MANY"), 600);
}

TEST(NatsSink, TooLargeMessageIsRejectedAndOnlyItsKeyWaits) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  Client client(server.port());
  ASSERT_TRUE(client.AddStream({"BIG", {"big.>"}}));
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("big.a", "k", "\"" + std::string(nats_test::kNatsTestMaxPayload, 'x') + "\"");
  batch.Add("big.a", "k", "1").Add("big.a", "other", "2");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRejected);
  EXPECT_TRUE(Contains(batch.results[0].error, "too large"));
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kDelivered) << batch.Errors();
  EXPECT_EQ(sink->State(), "connected");
}

TEST(NatsSink, MessagesNatsCannotCarryAreRefusedUnsent) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  Client client(server.port());
  ASSERT_TRUE(client.AddStream({"ODD", {"odd.>"}}));
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("odd..x", "k1", "1");                               // not a subject
  batch.Add("odd.x", "line\nbreak", "2");                       // key breaks a header
  batch.Add("odd.x", "k3", "3", {}, MessageFormat::kDebezium);  // not NATS's format
  batch.Add("odd.*", "k4", "4");                                // a wildcard
  batch.Add("odd.x", "k5", "5");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kTargetRefused);
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kRejected);
  EXPECT_TRUE(Contains(batch.results[1].error, "outbox-key"));
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kRejected);
  EXPECT_TRUE(Contains(batch.results[2].error, "debezium"));
  EXPECT_EQ(batch.results[3].status, DeliveryStatus::kTargetRefused);
  EXPECT_EQ(batch.results[4].status, DeliveryStatus::kDelivered) << batch.Errors();
  EXPECT_EQ(client.StreamMessages("ODD"), 1);
}

}  // namespace
}  // namespace outbox
