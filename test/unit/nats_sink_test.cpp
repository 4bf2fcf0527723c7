// The NATS sink against a real nats-server with JetStream (nats_server.hpp:
// one per test binary run): what arrives in the stream (payload and headers,
// raw and cloudevents), acknowledgements and duplicate suppression, refused
// messages and subjects, per-key order when JetStream refuses one message,
// and a server that dies, stops answering or lacks JetStream.
#include "sinks/nats_sink.hpp"
#include "nats_server.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;
using nats_test::Client;
using nats_test::Server;
using nats_test::SharedServer;
using nats_test::Watcher;
using Stored = Client::Stored;

// The shared server, running with JetStream (a test that stopped it or took
// JetStream away restores it on its way out, but a failed one may not have).
Server &Healthy() {
  Server &server = SharedServer();
  if (!server.running() || !server.jetstream()) server.Restart(true);
  return server;
}

#define REQUIRE_SERVER(server) ASSERT_TRUE((server).running()) << "nats-server did not start"

// Messages whose views point into strings the test keeps.
struct Batch {
  struct Owned {
    std::string id, topic, target, key, payload, headers_json;
    std::vector<std::pair<std::string, std::string>> header_pairs;
    std::vector<Header> headers;
    bool has_key = false;
    MessageFormat format = MessageFormat::kRaw;
  };
  std::vector<std::unique_ptr<Owned>> owned;
  std::vector<OutMessage> messages;
  std::vector<Delivery> results;

  // Unique in the test binary's run: a stream drops a repeated id as a
  // duplicate, which only the tests of re-sends want.
  static std::string NextId() {
    static int next = 0;
    return Id(next++);
  }
  static std::string Id(int n) {
    char tail[13];
    std::snprintf(tail, sizeof tail, "%012d", n);
    return std::string("0190f5f0-0000-7000-8000-") + tail;
  }

  Batch &Add(std::string target, std::optional<std::string> key, std::string payload,
             std::vector<std::pair<std::string, std::string>> headers = {},
             MessageFormat format = MessageFormat::kRaw, std::string id = "") {
    auto o = std::make_unique<Owned>();
    o->id = id.empty() ? NextId() : std::move(id);
    o->topic = "orders.created";
    o->target = std::move(target);
    o->has_key = key.has_value();
    if (key) o->key = *key;
    o->payload = std::move(payload);
    o->header_pairs = std::move(headers);
    o->headers_json = "{}";
    o->format = format;
    owned.push_back(std::move(o));
    return *this;
  }

  void Publish(Sink *sink, Sink::InterruptCheck interrupted = nullptr) {
    messages.clear();
    for (const auto &o : owned) {
      o->headers.clear();
      for (const auto &[name, value] : o->header_pairs) o->headers.push_back({name, value});
      OutMessage m;
      m.id = o->id;
      m.topic = o->topic;
      m.target = o->target;
      m.has_key = o->has_key;
      m.key = o->key;
      m.payload = o->payload;
      m.headers = o->headers.data();
      m.header_count = o->headers.size();
      m.headers_json = o->headers_json;
      m.format = o->format;
      m.created_at = 831648000000000;  // 2026-05-09T13:20:00Z
      m.source = "/outbox/test";
      messages.push_back(m);
    }
    results.assign(messages.size(), Delivery{DeliveryStatus::kNotSent, "unset"});
    sink->Publish(messages.data(), messages.size(), results.data(), interrupted);
  }

  size_t Count(DeliveryStatus status) const {
    size_t count = 0;
    for (const Delivery &d : results) count += d.status == status ? 1 : 0;
    return count;
  }
  std::string Errors() const {
    std::string text;
    for (const Delivery &d : results) {
      if (!d.error.empty()) text += d.error + "\n";
    }
    return text;
  }
};

std::vector<SinkOption> Credentials() {
  return {Opt("user", nats_test::kUser), Opt("password", nats_test::kPassword)};
}

std::unique_ptr<Sink> MakeSink(int port, std::vector<SinkOption> more = {}) {
  SinkOptions options = {Opt("servers", "nats://127.0.0.1:" + std::to_string(port))};
  for (SinkOption &o : Credentials()) options.push_back(std::move(o));
  for (SinkOption &o : more) options.push_back(std::move(o));
  std::string error;
  std::unique_ptr<Sink> sink = MakeNatsSink("test", options, &error);
  EXPECT_NE(sink, nullptr) << error;
  return sink;
}

std::string AllLogs(Sink *sink) {
  std::string text;
  for (const LogLine &line : sink->TakeLogs()) text += line.text + "\n";
  return text;
}

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
  batch.Add("nowhere.a", "k", "1").Add("caught.a", "k", "2").Add("nowhere.a", "k", "3");
  batch.Add("nowhere.b", std::nullopt, "4");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kTargetRefused);
  EXPECT_TRUE(Contains(batch.results[0].error,
                       "no JetStream stream captures subject \"nowhere.a\" (no responders)"));
  EXPECT_NE(batch.results[0].answered_at_us, 0);
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kDelivered) << batch.Errors();
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kNotSent);  // behind its key's failure
  EXPECT_EQ(batch.results[3].status, DeliveryStatus::kTargetRefused);
  EXPECT_EQ(sink->State(), "connected");  // the sink is fine
}

TEST(NatsSink, NoRespondersWithoutJetStreamMeanTheSinkIsDown) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  {
    Client client(server.port());
    ASSERT_TRUE(client.AddStream({"LATER", {"later.>"}}));
  }
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  // The server comes back without JetStream, as a restarting server looks
  // before JetStream is ready: every subject has no responders.
  ASSERT_TRUE(server.Restart(false));
  Batch batch;
  batch.Add("later.a", "k", "1").Add("later.b", std::nullopt, "2");
  const Clock::time_point start = Clock::now();
  for (int tries = 0; tries < 100; ++tries) {
    batch.Publish(sink.get());
    if (batch.results[0].error.find("JetStream") != std::string::npos) break;
    // libnats had not reconnected yet: the sink says so at once.
    ASSERT_EQ(batch.Count(DeliveryStatus::kRetriable), 2u) << batch.Errors();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable), 2u) << batch.Errors();
  EXPECT_TRUE(Contains(batch.results[0].error, "JetStream is not answering"));
  EXPECT_TRUE(Contains(batch.results[1].error, "JetStream is not answering"));
  EXPECT_EQ(sink->State(), "down");
  EXPECT_LT(SecondsSince(start), 15.0);
  // JetStream back (the stream was kept on disk): the same sink delivers.
  ASSERT_TRUE(server.Restart(true));
  for (int tries = 0; tries < 100; ++tries) {
    batch.Publish(sink.get());
    if (batch.Count(DeliveryStatus::kDelivered) == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u) << batch.Errors();
  EXPECT_EQ(sink->State(), "connected");
  EXPECT_TRUE(Contains(AllLogs(sink.get()), "reconnected to"));
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
  batch.Add("lim.a", "k", "A").Add("free.a", "k", "F1").Add("lim.a", "k", "B");
  batch.Add("free.a", "k", "F2").Add("lim.a", "k", "C");
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

// Kills the server (from another thread) once the stream holds `after`
// messages, while Publish is in the middle of a batch of one key.
TEST(NatsSink, ServerKilledMidBatchIsRetriableAndNothingFalselyAcknowledged) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  {
    Client client(server.port());
    ASSERT_TRUE(client.AddStream({"KILL", {"kill.>"}}));
  }
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  constexpr int kMessages = 2000;
  for (int i = 0; i < kMessages; ++i) batch.Add("kill.a", "k", std::to_string(i));
  // The killer only touches the server while this thread is inside
  // Publish, which does not touch it.
  std::thread killer([&server] {
    Client watcher(server.port());
    const Clock::time_point start = Clock::now();
    while (SecondsSince(start) < 30 && watcher.StreamMessages("KILL") < 50) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    server.Kill();
  });
  const Clock::time_point start = Clock::now();
  batch.Publish(sink.get());
  const double took = SecondsSince(start);
  killer.join();
  EXPECT_FALSE(server.running()) << "the batch ended before the server was killed";
  EXPECT_LT(took, 15.0);
  size_t delivered = 0;
  while (delivered < batch.results.size() &&
         batch.results[delivered].status == DeliveryStatus::kDelivered) {
    ++delivered;
  }
  ASSERT_LT(delivered, static_cast<size_t>(kMessages)) << "everything was acknowledged";
  EXPECT_GE(delivered, 50u);
  EXPECT_EQ(batch.results[delivered].status, DeliveryStatus::kRetriable)
      << batch.results[delivered].error;
  for (size_t i = delivered + 1; i < batch.results.size(); ++i) {
    ASSERT_EQ(batch.results[i].status, DeliveryStatus::kNotSent) << i;
  }
  EXPECT_NE(sink->State(), "connected");

  // Back up: what was acknowledged is there; the batch sent again is
  // delivered, in order, each message once (JetStream rebuilt its duplicate
  // window from the store).
  ASSERT_TRUE(server.Start(true));
  Client client(server.port());
  const int64_t kept = client.StreamMessages("KILL");
  EXPECT_GE(kept, static_cast<int64_t>(delivered));
  for (int tries = 0; tries < 100; ++tries) {
    batch.Publish(sink.get());
    if (batch.Count(DeliveryStatus::kDelivered) == kMessages) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), static_cast<size_t>(kMessages))
      << batch.Errors();
  const std::vector<Stored> stored = client.Read("KILL");
  ASSERT_EQ(stored.size(), static_cast<size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) ASSERT_EQ(stored[i].data, std::to_string(i));
}

TEST(NatsSink, SilentServerTimesOutAndInterruptStopsTheWait) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  {
    Client client(server.port());
    ASSERT_TRUE(client.AddStream({"SILENT", {"silent.>"}}));
  }
  std::unique_ptr<Sink> sink = MakeSink(server.port(), {Opt("ack_timeout_ms", "400")});
  Batch warm;
  warm.Add("silent.a", "k", "0");
  warm.Publish(sink.get());
  ASSERT_EQ(warm.Count(DeliveryStatus::kDelivered), 1u) << warm.Errors();

  ASSERT_TRUE(server.Pause());  // the server takes bytes (the kernel does) and answers nothing
  Batch batch;
  batch.Add("silent.a", "k", "1").Add("silent.a", "k", "2").Add("silent.b", std::nullopt, "3");
  Clock::time_point start = Clock::now();
  batch.Publish(sink.get());
  double took = SecondsSince(start);
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "within 400 ms"));
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kRetriable);
  EXPECT_LT(took, 3.0);
  EXPECT_EQ(sink->State(), "down");

  // A long timeout, cut short by the interrupt check.
  std::unique_ptr<Sink> patient =
      MakeSink(server.port(), {Opt("ack_timeout_ms", "60000"), Opt("connect_timeout_ms", "300")});
  static Clock::time_point interrupt_at;
  interrupt_at = Clock::now() + std::chrono::milliseconds(300);
  start = Clock::now();
  batch.Publish(patient.get(), [] { return Clock::now() >= interrupt_at; });
  took = SecondsSince(start);
  EXPECT_LT(took, 2.0);
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable) + batch.Count(DeliveryStatus::kNotSent), 3u);

  server.Resume();
  for (int tries = 0; tries < 100; ++tries) {
    batch.Publish(sink.get());
    if (batch.Count(DeliveryStatus::kDelivered) == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 3u) << batch.Errors();
  EXPECT_EQ(sink->State(), "connected");
}

TEST(NatsSink, NoServerMeansRetriableAtOnceAndTheSinkDown) {
  std::unique_ptr<Sink> sink = MakeSink(nats_test::FreePort());
  Batch batch;
  batch.Add("any.a", "k", "1").Add("any.a", "k", "2");
  const Clock::time_point start = Clock::now();
  batch.Publish(sink.get());
  EXPECT_LT(SecondsSince(start), 3.0);
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "not connected to nats://127.0.0.1:"));
  EXPECT_NE(batch.results[1].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(sink->State(), "down");
  // Again: libnats keeps trying in the background; the call does not wait.
  const Clock::time_point again = Clock::now();
  batch.Publish(sink.get());
  EXPECT_LT(SecondsSince(again), 1.0);
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 0u);
}

TEST(NatsSink, SecretsNeverAppearInErrorsLogsOrState) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  const std::string wrong = "Wr0ng-Passw0rd-Value";
  SinkOptions options = {Opt("servers", "127.0.0.1:" + std::to_string(server.port())),
                         Opt("user", nats_test::kUser), Opt("password", wrong)};
  std::string error;
  std::unique_ptr<Sink> sink = MakeNatsSink("secret", options, &error);
  ASSERT_NE(sink, nullptr) << error;
  Batch batch;
  batch.Add("secret.a", "k", "1");
  for (int i = 0; i < 3; ++i) batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  const std::string everything = batch.Errors() + AllLogs(sink.get()) + sink->State();
  EXPECT_EQ(everything.find(wrong), std::string::npos) << everything;
  EXPECT_TRUE(Contains(everything, "uthorization")) << everything;
  // A token sink the same way (the server wants a user: refused).
  const std::string token = "T0ken-Secret-Value";
  sink = MakeNatsSink(
      "secret", {Opt("servers", "127.0.0.1:" + std::to_string(server.port())), Opt("token", token)},
      &error);
  ASSERT_NE(sink, nullptr) << error;
  batch.Publish(sink.get());
  const std::string more = batch.Errors() + AllLogs(sink.get()) + sink->State();
  EXPECT_EQ(more.find(token), std::string::npos) << more;
}

}  // namespace
}  // namespace outbox
