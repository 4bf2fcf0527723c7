// What every pipelining sink over one connection (MQTT, NATS: keyed_sink.hpp)
// must do against its real broker, written once: several Sends open at once
// complete independently; a stopped broker (SIGSTOP of the test's own
// server) leaves a Send open and CollectFor returns within its wait; the
// arrays of Sends abandoned meanwhile stay untouched when the broker comes
// back (the test overwrites them with a sentinel); each key's order holds
// within a Send while other Sends are open. mqtt_pipelining_test.cpp and
// nats_pipelining_test.cpp run them against mosquitto and nats-server.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/sink.hpp"
#include "sink_batch.hpp"
#include "test_support.hpp"

namespace outbox {
namespace test_support {

struct PipelineRig {
  // A sink on the test's own server, with this ack_timeout_ms.
  std::function<std::unique_ptr<Sink>(int ack_timeout_ms)> make;
  std::function<void()> pause;   // SIGSTOP the server (by its PID)
  std::function<void()> resume;  // SIGCONT
  // The bodies that reached `target` so far, in arrival order, after
  // waiting up to 10 s for at least `count`.
  std::function<std::vector<std::string>(size_t count)> arrived;
  std::string target;  // a topic or subject the server takes
};

inline double MillisSince(Clock::time_point start) { return SecondsSince(start) * 1000; }

// A sink whose first message was delivered, on a server now stopped.
inline std::unique_ptr<Sink> ConnectedThenStopped(const PipelineRig &rig, int ack_timeout_ms) {
  std::unique_ptr<Sink> sink = rig.make(ack_timeout_ms);
  Batch warm;
  warm.Add(rig.target, "w", "warm");
  warm.Publish(sink.get());
  EXPECT_EQ(warm.Count(DeliveryStatus::kDelivered), 1u) << warm.Errors();
  rig.pause();
  return sink;
}

// `sends` Sends open at once, each of `per_send` messages over `keys` keys
// of its own ("s<send>k<n>"), each message's body "<key>:<i>".
struct OpenSends {
  std::vector<Batch> batches;
  std::vector<uint64_t> tickets;
  OpenSends(Sink *sink, const std::string &target, int sends, int per_send, int keys)
      : batches(static_cast<size_t>(sends)) {
    for (Batch &batch : batches) {
      const std::string prefix = "s" + std::to_string(tickets.size()) + "k";
      for (int i = 0; i < per_send; ++i) {
        const std::string key = prefix + std::to_string(i % keys);
        batch.Add(target, key, key + ":" + std::to_string(i));
      }
      tickets.push_back(batch.Send(sink));
    }
  }
};

// Three Sends open at once, collected newest first, each complete on its
// own, with what the caller's views said when it sent them (the caller
// changed them right after Send).
inline void SeveralSendsCompleteIndependently(const PipelineRig &rig) {
  std::unique_ptr<Sink> sink = rig.make(5000);
  OpenSends open(sink.get(), rig.target, 3, 10, 3);
  for (Batch &batch : open.batches) {
    for (auto &o : batch.owned) o->payload.assign("changed after Send");
  }
  for (int b = 2; b >= 0; --b) {
    if (open.tickets[b] != 0) {
      EXPECT_TRUE(sink->CollectFor(open.tickets[b], 10000, nullptr)) << "send " << b;
      EXPECT_TRUE(sink->CollectFor(open.tickets[b], 0, nullptr));  // closed: nothing left
    }
    EXPECT_EQ(open.batches[b].Count(DeliveryStatus::kDelivered), 10u) << open.batches[b].Errors();
  }
  const std::vector<std::string> seen = rig.arrived(30);
  EXPECT_EQ(seen.size(), 30u);
  for (const std::string &body : seen) EXPECT_EQ(body.rfind("s", 0), 0u) << body;
}

// A stopped server: Send returns at once, CollectFor within its wait, and
// another Send opens beside it; Collect ends with the acknowledgement
// timeout, nothing delivered; once the server runs again, all goes.
inline void AStoppedServerDelaysOnlyItsOwnSends(const PipelineRig &rig) {
  std::unique_ptr<Sink> sink = ConnectedThenStopped(rig, 1500);
  Batch first, second;
  for (int i = 0; i < 6; ++i)
    first.Add(rig.target, "k" + std::to_string(i % 2), "f" + std::to_string(i));
  second.Add(rig.target, "other", "s0");
  Clock::time_point start = Clock::now();
  const uint64_t t1 = first.Send(sink.get());
  const uint64_t t2 = second.Send(sink.get());
  EXPECT_LT(MillisSince(start), 500) << "Send waited for the stopped server";
  ASSERT_NE(t1, 0u);
  ASSERT_NE(t2, 0u);
  start = Clock::now();
  EXPECT_FALSE(sink->CollectFor(t1, 200, nullptr));
  const double waited = MillisSince(start);
  EXPECT_GE(waited, 190);
  EXPECT_LT(waited, 600) << "CollectFor overran its wait";
  start = Clock::now();
  EXPECT_FALSE(sink->CollectFor(t2, 0, nullptr));
  EXPECT_LT(MillisSince(start), 100);
  EXPECT_EQ(first.Count(DeliveryStatus::kNotSent), 6u);  // untouched so far ("unset")
  sink->Collect(t1, nullptr);
  EXPECT_LT(MillisSince(start), 5000);
  EXPECT_EQ(first.Count(DeliveryStatus::kDelivered), 0u);
  EXPECT_EQ(first.Count(DeliveryStatus::kRetriable), 2u) << first.Errors();  // one a key
  EXPECT_EQ(first.Count(DeliveryStatus::kNotSent), 4u);                      // behind them
  EXPECT_TRUE(Contains(first.Errors(), "within 1500 ms"));
  EXPECT_TRUE(sink->CollectFor(t2, 1000, nullptr));
  EXPECT_EQ(second.Count(DeliveryStatus::kRetriable), 1u) << second.Errors();
  EXPECT_EQ(sink->State(), "down");
  rig.resume();
  first.Publish(sink.get());
  EXPECT_EQ(first.Count(DeliveryStatus::kDelivered), 6u) << first.Errors();
  EXPECT_EQ(sink->State(), "connected");
}

// Sends abandoned while the server is stopped get kRetriable with the
// reason at once; their arrays, overwritten by the test, stay untouched
// while the server, running again, answers what it had taken, and while
// the sink goes on with new Sends.
inline void AbandonedSendsStayUntouched(const PipelineRig &rig) {
  std::unique_ptr<Sink> sink = ConnectedThenStopped(rig, 3000);
  Batch first, second;
  for (int i = 0; i < 4; ++i) {
    first.Add(rig.target, "a" + std::to_string(i % 2), "abandoned" + std::to_string(i));
    second.Add(rig.target, std::nullopt, "abandoned-keyless" + std::to_string(i));
  }
  const uint64_t t1 = first.Send(sink.get());
  const uint64_t t2 = second.Send(sink.get());
  ASSERT_NE(t1, 0u);
  ASSERT_NE(t2, 0u);
  EXPECT_FALSE(sink->CollectFor(t1, 100, nullptr));
  sink->AbandonAll("abandoned by the test");
  for (Batch *b : {&first, &second}) {
    EXPECT_EQ(b->Count(DeliveryStatus::kRetriable), 4u) << b->Errors();
    EXPECT_TRUE(Contains(b->Errors(), "abandoned by the test"));
  }
  const Delivery sentinel{DeliveryStatus::kTargetDown, "sentinel", 4242, 7};
  first.results.assign(first.results.size(), sentinel);
  second.results.assign(second.results.size(), sentinel);
  EXPECT_TRUE(sink->CollectFor(t1, 0, nullptr));  // forgotten: nothing to wait for
  rig.resume();
  const Clock::time_point start = Clock::now();
  Batch after;
  after.Add(rig.target, "a0", "after");
  after.Publish(sink.get());
  EXPECT_EQ(after.Count(DeliveryStatus::kDelivered), 1u) << after.Errors();
  while (SecondsSince(start) < 1.5) {
    sink->Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (Batch *b : {&first, &second}) {
    for (const Delivery &d : b->results) {
      EXPECT_EQ(d.status, DeliveryStatus::kTargetDown);
      EXPECT_EQ(d.error, "sentinel");
      EXPECT_EQ(d.answered_at_us, 4242);
    }
  }
}

// Two Sends open at once, each with keys of its own and several messages
// a key: every key's messages arrive in their order.
inline void KeyOrderHoldsWithinEachOpenSend(const PipelineRig &rig) {
  std::unique_ptr<Sink> sink = rig.make(5000);
  OpenSends open(sink.get(), rig.target, 2, 40, 4);
  for (size_t b = 0; b < 2; ++b) {
    if (open.tickets[b] != 0) sink->Collect(open.tickets[b], nullptr);
    EXPECT_EQ(open.batches[b].Count(DeliveryStatus::kDelivered), 40u) << open.batches[b].Errors();
  }
  const std::vector<std::string> seen = rig.arrived(80);
  ASSERT_EQ(seen.size(), 80u);
  std::map<std::string, int> last;
  for (const std::string &body : seen) {
    const size_t colon = body.find(':');
    ASSERT_NE(colon, std::string::npos) << body;
    const std::string key = body.substr(0, colon);
    const int i = std::stoi(body.substr(colon + 1));
    auto it = last.find(key);
    if (it != last.end()) {
      EXPECT_LT(it->second, i) << "key " << key << " out of order";
    }
    last[key] = i;
  }
  EXPECT_EQ(last.size(), 8u);
}

}  // namespace test_support
}  // namespace outbox

// The checks above as tests of one suite, on a fresh Rig each (a type with
// ready() and a PipelineRig `rig`: a server of the test's own).
#define OUTBOX_PIPELINING_TEST(Suite, Rig, Check)         \
  TEST(Suite, Check) {                                    \
    Rig r;                                                \
    ASSERT_TRUE(r.ready()) << "the server did not start"; \
    test_support::Check(r.rig);                           \
  }
#define OUTBOX_PIPELINING_TESTS(Suite, Rig)                               \
  OUTBOX_PIPELINING_TEST(Suite, Rig, SeveralSendsCompleteIndependently)   \
  OUTBOX_PIPELINING_TEST(Suite, Rig, AStoppedServerDelaysOnlyItsOwnSends) \
  OUTBOX_PIPELINING_TEST(Suite, Rig, AbandonedSendsStayUntouched)         \
  OUTBOX_PIPELINING_TEST(Suite, Rig, KeyOrderHoldsWithinEachOpenSend)
