// The AMQP sink when the broker fails: down, killed in the middle of a batch
// (nothing reported delivered that the restarted node lacks, nothing held
// back that it has), hung (a proxy that stops moving bytes), gone while
// idle, blocking publishes (a resource alarm), a handshake that never
// answers, interruptions, and credentials it refuses (never shown).
#include "sinks/amqp_sink.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "amqp_batch.hpp"
#include "amqp_node.hpp"
#include "amqp_proxy.hpp"
#include "amqp_test_client.hpp"
#include "test_support.hpp"

namespace outbox {
namespace {

using namespace amqp_test;
using test_support::Clock;
using test_support::Contains;
using test_support::Opt;
using test_support::SecondsSince;

#define REQUIRE_NODE()                                              \
  const SharedNodeInfo &node = SharedRabbitNode();                  \
  ASSERT_TRUE(node.ok) << "RabbitMQ did not start: " << node.error; \
  const int port = node.ports.amqp

std::string Name(const std::string &what) {
  return "amqp-unit-" + what + "-" + std::to_string(getpid());
}

TEST(AmqpSinkFaults, BrokerDownIsRetriableAndWarnedOnce) {
  std::unique_ptr<Sink> sink = MakeSink(FreePort());
  Batch batch;
  batch.Add("q", "k", "1").Add("q", "k", "2").Add("q", std::nullopt, "3");
  const Clock::time_point start = Clock::now();
  batch.Publish(sink.get());
  EXPECT_LT(SecondsSince(start), 1.0);  // refused at once
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "cannot connect to 127.0.0.1:"));
  EXPECT_TRUE(Contains(batch.results[0].error, "Connection refused"));
  EXPECT_TRUE(batch.results[0].unsent);  // no connection took it
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(batch.results[2].unsent);
  EXPECT_EQ(sink->State(), "down");
  std::vector<LogLine> logs = sink->TakeLogs();
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs[0].level, LogLevel::kWarning);
  // Still down: the same reason is not repeated as a warning.
  batch.Publish(sink.get());
  for (const LogLine &line : sink->TakeLogs()) EXPECT_EQ(line.level, LogLevel::kDebug);
}

std::atomic<int> interrupt_calls{0};
std::atomic<bool> interrupt_now{false};
bool InterruptFlag() {
  interrupt_calls.fetch_add(1);
  return interrupt_now.load();
}

// The broker killed (SIGKILL) while a large batch is in flight: what had no
// confirm is retriable, what never left waits (kNotSent), and after a
// restart the node holds every message reported delivered and none of those
// held back. Sent again, everything arrives, per key in order.
RabbitNode *kill_node = nullptr;
Client *kill_watch = nullptr;
std::string kill_queue;
bool KillOnceStoring() {
  if (kill_node != nullptr && kill_node->running() && kill_watch->Count(kill_queue) >= 1000) {
    kill_node->Kill();
  }
  return false;
}

TEST(AmqpSinkFaults, KilledNodeMidBatchConfirmedNothingFalsely) {
  RabbitNode own;  // this test kills its node: not the shared one
  std::string error;
  ASSERT_TRUE(own.Start(&error)) << error;
  const std::string queue = "durable";
  // RabbitMQ writes a queue's definition to disk after declare-ok: one
  // declared moments before a SIGKILL may be gone after it, with whatever
  // was confirmed into it (seen twice on a loaded machine). So the queue
  // must first survive a kill of its own; what this test then finds
  // missing is messages, never the queue.
  bool queue_survives_a_kill = false;
  for (int attempt = 0; attempt < 3 && !queue_survives_a_kill; ++attempt) {
    {
      Client setup(own.port());
      ASSERT_TRUE(setup.ok() && setup.DeclareQueue(queue)) << setup.error();
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
    own.Kill();
    ASSERT_TRUE(own.Start(&error)) << error;
    Client check(own.port());
    ASSERT_TRUE(check.ok()) << check.error();
    queue_survives_a_kill = check.Count(queue) == 0;
  }
  ASSERT_TRUE(queue_survives_a_kill) << "the durable queue never survived a SIGKILL:\n"
                                     << own.Log();
  std::unique_ptr<Sink> sink = MakeSink(own.port());
  Batch batch;
  constexpr int kKeys = 50;
  constexpr int kMessages = 20000;
  for (int i = 0; i < kMessages; ++i) {
    if (i % 5 == 0) {
      batch.Add(queue, std::nullopt, std::to_string(i));
    } else {
      batch.Add(queue, "k" + std::to_string(i % kKeys), std::to_string(i));
    }
  }
  {
    Client watch(own.port());
    ASSERT_TRUE(watch.ok());
    kill_node = &own;
    kill_watch = &watch;
    kill_queue = queue;
    batch.Publish(sink.get(), KillOnceStoring);
    kill_node = nullptr;
    kill_watch = nullptr;
  }
  ASSERT_FALSE(own.running()) << "the batch ended before the node was killed";
  const size_t delivered = batch.Count(DeliveryStatus::kDelivered);
  EXPECT_GT(batch.Count(DeliveryStatus::kRetriable), 0u);
  EXPECT_GT(batch.Count(DeliveryStatus::kNotSent), 0u);
  EXPECT_EQ(batch.Count(DeliveryStatus::kRejected) + batch.Count(DeliveryStatus::kTargetRefused),
            0u);
  EXPECT_EQ(sink->State(), "down");
  EXPECT_TRUE(Contains(batch.FirstOther(DeliveryStatus::kDelivered), "lost"));

  ASSERT_TRUE(own.Start(&error)) << error;  // same ports, same data
  std::set<std::string> stored;
  {
    Client client(own.port());
    ASSERT_TRUE(client.ok()) << client.error();
    ASSERT_GE(client.Count(queue), 0) << "the queue is gone after the restart:\n" << own.Log();
    for (const Received &m : client.GetAll(queue)) stored.insert(m.message_id);
  }
  std::printf(
      "[          ] killed mid-batch: %zu delivered, %zu retriable, %zu held back; "
      "%zu stored\n",
      delivered, batch.Count(DeliveryStatus::kRetriable), batch.Count(DeliveryStatus::kNotSent),
      stored.size());
  for (size_t i = 0; i < batch.results.size(); ++i) {
    const DeliveryStatus s = batch.results[i].status;
    if (s == DeliveryStatus::kDelivered) {
      ASSERT_EQ(stored.count(batch.Id(i)), 1u) << "confirmed but lost: message " << i;
    } else if (s == DeliveryStatus::kNotSent) {
      ASSERT_EQ(stored.count(batch.Id(i)), 0u) << "held back but sent: message " << i;
    }
  }

  // The rest, sent again (the publisher's retry), arrives; per key in order
  // once duplicates are set aside.
  Batch retry;
  std::vector<int> numbers;
  for (size_t i = 0; i < batch.results.size(); ++i) {
    if (batch.results[i].status == DeliveryStatus::kDelivered) continue;
    const Batch::Owned &o = *batch.owned[i];
    retry.Add(o.target, o.has_key ? std::optional<std::string>(o.key) : std::nullopt, o.payload);
  }
  retry.Publish(sink.get());
  ASSERT_EQ(retry.Count(DeliveryStatus::kDelivered), retry.results.size())
      << retry.FirstOther(DeliveryStatus::kDelivered) << "\nnode log:\n"
      << own.Log();
  EXPECT_EQ(sink->State(), "connected");
  Client client(own.port());
  std::map<int, int> last_of_key;
  std::set<int> seen;
  size_t count = 0;
  for (const Received &m : client.GetAll(queue)) {
    ++count;
    const int i = std::stoi(m.body);
    if (i % 5 == 0 || !seen.insert(i).second) continue;
    auto [it, first] = last_of_key.try_emplace(i % kKeys, i);
    if (!first) {
      EXPECT_GT(i, it->second) << "key k" << i % kKeys;
      it->second = i;
    }
  }
  EXPECT_EQ(count, retry.results.size());
}

TEST(AmqpSinkFaults, HungBrokerTimesOutAndIsLeftBehind) {
  REQUIRE_NODE();
  const std::string queue = Name("hung");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  Proxy proxy(port);
  std::unique_ptr<Sink> sink = MakeSink(proxy.port(), {Opt("delivery_timeout_ms", "1000")});
  Batch batch;
  batch.Add(queue, "k", "1").Add(queue, "k", "2");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u)
      << batch.FirstOther(DeliveryStatus::kDelivered);

  proxy.Freeze(true);
  const Clock::time_point start = Clock::now();
  batch.Publish(sink.get());
  const double seconds = SecondsSince(start);
  proxy.Freeze(false);
  EXPECT_GE(seconds, 0.9);
  EXPECT_LT(seconds, 2.5);
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(
      Contains(batch.results[0].error,
               "no confirm from 127.0.0.1:" + std::to_string(proxy.port()) + " within 1000 ms"));
  // The key's second message never left: it is not charged an attempt.
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kNotSent);
  EXPECT_TRUE(Contains(batch.results[1].error, "not sent"));
  EXPECT_EQ(sink->State(), "down");

  // The connection was dropped (a late confirm could not be matched): a new
  // one delivers. The first attempt may have been stored too (at least once).
  batch.Publish(sink.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u)
      << batch.FirstOther(DeliveryStatus::kDelivered);
  EXPECT_EQ(sink->State(), "connected");
  EXPECT_EQ(proxy.accepted(), 2);
}

// A message larger than the socket takes at once, published to a broker
// that stopped reading (its kernel still acknowledging, its window shut):
// librabbitmq writes it whole with no deadline of its own, so only the
// connection's TCP_USER_TIMEOUT (delivery_timeout_ms) ends the wait. The
// publisher, which serves every sink from one loop, is held that long at
// most, not until the broker reads again.
TEST(AmqpSinkFaults, ALargeMessageToABrokerThatStoppedReadingIsGivenUpInTime) {
  REQUIRE_NODE();
  const std::string queue = Name("large-frozen");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  Proxy proxy(port);
  std::unique_ptr<Sink> sink = MakeSink(proxy.port(), {Opt("delivery_timeout_ms", "1000")});
  Batch warm;
  warm.Add(queue, "k", "warm");
  warm.Publish(sink.get());
  ASSERT_EQ(warm.results[0].status, DeliveryStatus::kDelivered) << warm.results[0].error;

  proxy.Freeze(true);
  std::atomic<bool> thawed{false};
  std::atomic<bool> done{false};
  std::thread thaw([&] {
    for (int i = 0; i < 200 && !done.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    thawed = true;
    proxy.Freeze(false);
  });
  Batch large;
  large.Add(queue, "k", std::string(32 * 1024 * 1024, 'x'));
  const Clock::time_point start = Clock::now();
  large.Publish(sink.get());
  const double seconds = SecondsSince(start);
  const bool before_thaw = !thawed.load();
  done = true;
  thaw.join();
  EXPECT_TRUE(before_thaw) << "held until the broker read again (" << seconds << " s)";
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(large.results[0].status, DeliveryStatus::kRetriable) << large.results[0].error;
  EXPECT_EQ(sink->State(), "down");
}

TEST(AmqpSinkFaults, InterruptStopsEveryWait) {
  REQUIRE_NODE();
  const std::string queue = Name("interrupt");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  Proxy proxy(port);
  std::unique_ptr<Sink> sink = MakeSink(proxy.port());
  Batch batch;
  batch.Add(queue, "k", "1").Add(queue, "k", "2");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u);

  // Waiting for confirms from a broker that does not answer.
  proxy.Freeze(true);
  interrupt_now = false;
  interrupt_calls = 0;
  std::thread interrupter([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    interrupt_now = true;
  });
  Clock::time_point start = Clock::now();
  batch.Publish(sink.get(), InterruptFlag);
  double seconds = SecondsSince(start);
  interrupter.join();
  proxy.Freeze(false);
  EXPECT_GE(seconds, 0.25);
  EXPECT_LT(seconds, 0.8);               // well before the 10 s delivery timeout
  EXPECT_GE(interrupt_calls.load(), 3);  // checked every 100 ms while waiting
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable), 2u);
  EXPECT_EQ(batch.results[0].error, "interrupted");
  EXPECT_EQ(sink->State(), "idle");

  // Interrupted before anything is sent: no connection is even attempted.
  const int accepted = proxy.accepted();
  interrupt_now = true;
  Batch other;
  other.Add(queue, "k", "never");
  other.Publish(sink.get(), InterruptFlag);
  EXPECT_EQ(other.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_EQ(other.results[0].error, "interrupted");
  EXPECT_EQ(proxy.accepted(), accepted);

  // Interrupted in a handshake that never answers.
  SilentListener silent;
  std::unique_ptr<Sink> stuck = MakeSink(silent.port(), {Opt("connect_timeout_ms", "60000")});
  interrupt_now = false;
  interrupt_calls = 0;
  std::thread again([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    interrupt_now = true;
  });
  start = Clock::now();
  other.Publish(stuck.get(), InterruptFlag);
  seconds = SecondsSince(start);
  again.join();
  EXPECT_LT(seconds, 0.8);
  EXPECT_EQ(other.results[0].error, "interrupted");
  EXPECT_EQ(stuck->State(), "idle");

  interrupt_now = false;
  batch.Publish(sink.get(), InterruptFlag);
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u)
      << batch.FirstOther(DeliveryStatus::kDelivered);
}

TEST(AmqpSinkFaults, HandshakeThatNeverAnswersTimesOut) {
  SilentListener silent;
  std::unique_ptr<Sink> sink = MakeSink(silent.port(), {Opt("connect_timeout_ms", "500")});
  Batch batch;
  batch.Add("q", "k", "1");
  const Clock::time_point start = Clock::now();
  batch.Publish(sink.get());
  const double seconds = SecondsSince(start);
  EXPECT_GE(seconds, 0.45);
  EXPECT_LT(seconds, 1.5);
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "no answer within 500 ms"));
  EXPECT_EQ(sink->State(), "down");
}

TEST(AmqpSinkFaults, ConnectionDroppedWhileIdleIsReopenedBeforeSending) {
  REQUIRE_NODE();
  const std::string queue = Name("idle");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  Proxy proxy(port);
  std::unique_ptr<Sink> sink = MakeSink(proxy.port());
  Batch batch;
  batch.Add(queue, "k", "1");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.results[0].status, DeliveryStatus::kDelivered);
  sink->TakeLogs();

  proxy.Cut();
  // Poll (the publisher calls it between cycles) notices the close.
  for (int i = 0; i < 100 && sink->State() == "connected"; ++i) {
    sink->Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(sink->State(), "idle");
  batch.Publish(sink.get());
  // Noticed before sending: nothing fails, nothing is sent twice.
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  const std::string logs = AllLogs(sink.get());
  EXPECT_TRUE(Contains(logs, "was closed"));
  EXPECT_TRUE(Contains(logs, "connected to"));
  EXPECT_EQ(client.Count(queue), 2);
}

// Heartbeats: Poll (which the publisher calls between cycles) answers them,
// so an idle connection stays open; without it the broker drops the
// connection after two missed heartbeats, and the next batch notices before
// sending and reconnects, failing nothing. The idle spells are the scenario
// (seconds of heartbeats), not waits for something.
TEST(AmqpSinkFaults, PollKeepsAnIdleConnectionAliveWithHeartbeats) {
  REQUIRE_NODE();
  const std::string queue = Name("heartbeat");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  // 2 s: the sink sends a heartbeat every 2 s, the broker gives up after
  // about two missed ones.
  std::unique_ptr<Sink> sink = MakeSink(port, {Opt("heartbeat", "2")});
  Batch batch;
  batch.Add(queue, "k", "1");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  sink->TakeLogs();

  for (const Clock::time_point start = Clock::now(); SecondsSince(start) < 6;) {
    sink->Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(sink->State(), "connected");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  EXPECT_EQ(AllLogs(sink.get()), "") << "the same connection, never closed";

  std::this_thread::sleep_for(std::chrono::seconds(9));  // no Poll: heartbeats missed
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  const std::string logs = AllLogs(sink.get());
  EXPECT_TRUE(Contains(logs, "was closed"));
  EXPECT_TRUE(Contains(logs, "connected to"));
  EXPECT_EQ(client.Count(queue), 3);
}

// A resource alarm (here: the disk limit above what the disk has) makes
// RabbitMQ block publishing connections. The sink says so (State "blocked",
// a warning) and gives up within its delivery timeout instead of writing
// into a socket nobody reads.
Sink *blocked_sink = nullptr;
std::atomic<bool> saw_blocked{false};
bool WatchBlocked() {
  if (blocked_sink != nullptr && blocked_sink->State() == "blocked") saw_blocked = true;
  return false;
}

TEST(AmqpSinkFaults, BlockedBrokerIsReportedAndTheWaitIsBounded) {
  RabbitNode own("disk_free_limit.absolute = 1000000GB\n");
  std::string error;
  ASSERT_TRUE(own.Start(&error)) << error;
  {
    Client setup(own.port());
    ASSERT_TRUE(setup.ok() && setup.DeclareQueue("blocked")) << setup.error();
  }
  std::unique_ptr<Sink> sink = MakeSink(own.port(), {Opt("delivery_timeout_ms", "2000")});
  Batch batch;
  for (int i = 0; i < 200; ++i)
    batch.Add("blocked", "k" + std::to_string(i % 10), std::to_string(i));
  blocked_sink = sink.get();
  saw_blocked = false;
  const Clock::time_point start = Clock::now();
  batch.Publish(sink.get(), WatchBlocked);
  const double seconds = SecondsSince(start);
  blocked_sink = nullptr;
  EXPECT_TRUE(saw_blocked.load()) << "State() said \"blocked\" while the broker blocked";
  EXPECT_LT(seconds, 4.0);
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 0u);
  EXPECT_TRUE(Contains(batch.results[0].error, "the broker blocks publishing"))
      << batch.results[0].error;
  EXPECT_TRUE(Contains(AllLogs(sink.get()), "blocks publishing"));
  EXPECT_EQ(sink->State(), "down");
}

TEST(AmqpSinkFaults, RefusedCredentialsAreRetriableAndNeverShown) {
  REQUIRE_NODE();
  const std::string wrong = "wrong-Pa55word";
  std::unique_ptr<Sink> sink = MakeSink(port, {Opt("password", wrong)});
  Batch batch;
  batch.Add("q", "k", "1").Add("q", "k", "2");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "ACCESS_REFUSED (403)"));
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(sink->State(), "down");
  const std::string logs = AllLogs(sink.get());
  EXPECT_TRUE(Contains(logs, "ACCESS_REFUSED"));
  for (const std::string &text :
       {logs, sink->State(), batch.results[0].error, batch.results[1].error}) {
    EXPECT_EQ(text.find(wrong), std::string::npos) << text;
  }

  // A password from the server's environment is handled alike.
  SinkOption from_env = Opt("password", wrong);
  from_env.from_environment = true;
  std::unique_ptr<Sink> env_sink = MakeSink(port, {from_env});
  batch.Publish(env_sink.get());
  EXPECT_TRUE(Contains(batch.results[0].error, "ACCESS_REFUSED"));
  EXPECT_EQ(batch.results[0].error.find(wrong), std::string::npos);
  EXPECT_EQ(AllLogs(env_sink.get()).find(wrong), std::string::npos);

  // A virtual host that does not exist.
  std::unique_ptr<Sink> vhost = MakeSink(port, {Opt("vhost", "no-such-vhost")});
  batch.Publish(vhost.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "NOT_ALLOWED (530)")) << batch.results[0].error;
}

}  // namespace
}  // namespace outbox
