// The NATS sink when its server fails (nats_server.hpp: one per test binary
// run, killed, paused and restarted here): killed mid-batch, silent,
// absent, without JetStream; what State() says meanwhile; and secrets
// never in errors, logs or State().
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

std::unique_ptr<Sink> MakeSink(int port, std::vector<SinkOption> more = {}) {
  return nats_test::MakeTestSink(port, std::move(more));
}

#define REQUIRE_SERVER(server) NATS_REQUIRE_SERVER(server)

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

TEST(NatsSink, StateFollowsTheConnection) {
  Server &server = Healthy();
  REQUIRE_SERVER(server);
  {
    Client client(server.port());
    ASSERT_TRUE(client.AddStream({"STATE", {"state.>"}}));
  }
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("state.a", "k", "1");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 1u) << batch.Errors();
  EXPECT_EQ(sink->State(), "connected");
  server.Kill();
  const Clock::time_point start = Clock::now();
  while (sink->State() == "connected" && SecondsSince(start) < 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(sink->State(), "connecting");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "not connected to"));
  EXPECT_EQ(sink->State(), "down");
  ASSERT_TRUE(server.Start(true));
  for (int tries = 0; tries < 100; ++tries) {
    batch.Publish(sink.get());
    if (batch.Count(DeliveryStatus::kDelivered) == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 1u) << batch.Errors();
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
  EXPECT_TRUE(batch.results[0].unsent);  // no connection took it
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
  // libnats says what the server refused only until its background
  // attempt gives the connection up ("No server available" after that,
  // often before the sink looks, and its text is rewritten as it is read):
  // whether "Authorization Violation" shows is libnats's timing, so only
  // the failure and the masking are asserted. Each Publish connects afresh.
  std::string everything;
  for (int i = 0; i < 5; ++i) {
    batch.Publish(sink.get());
    EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
    EXPECT_TRUE(Contains(batch.Errors(), "not connected to nats://") ||
                Contains(batch.Errors(), "cannot connect to nats://"))
        << batch.Errors();
    everything += batch.Errors() + AllLogs(sink.get()) + sink->State();
  }
  EXPECT_EQ(everything.find(wrong), std::string::npos) << everything;
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
