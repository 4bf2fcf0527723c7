// A fake broker for the dispatcher's tests: sinks that record what reached
// the "broker" and answer as each sink name's script says, at once or
// pipelined (answers at Collect, slow, stuck per topic or id), and a factory
// for them. Every sink name has one FakeBroker (g_brokers), which outlives
// the sinks built from it; tests clear g_brokers in SetUp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/sink.hpp"

namespace outbox {
namespace test_support {

// A message as the sink saw it, copied (the views die with the Publish call).
struct SentMessage {
  std::string id, topic, target;
  int route = 0;
  bool has_key = false;
  std::string key, payload;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string headers_json;
};

// Decides one message's fate; `call` counts this sink name's Publish calls
// from 0, across recreations.
using Script = std::function<Delivery(const OutMessage &m, int call)>;

inline Delivery Delivered() { return Delivery{DeliveryStatus::kDelivered, ""}; }
inline Delivery Retriable(std::string error = "Local: Broker transport failure") {
  return Delivery{DeliveryStatus::kRetriable, std::move(error)};
}
inline Delivery Rejected(std::string error = "Broker: Message size too large") {
  return Delivery{DeliveryStatus::kRejected, std::move(error)};
}
// A message lost with its connection, which the broker may have closed over
// another message in flight on it (MQTT 3.1.1 past its packet size).
inline Delivery LostWithConnection() {
  Delivery d = Retriable("the connection to broker was lost");
  d.connection_lost = true;
  return d;
}
// A message that waited for its turn on a connection lost over another.
inline Delivery NotSentBeforeTheLoss() {
  Delivery d = Retriable("not sent: the connection to broker was lost");
  d.connection_lost = true;
  d.unsent = true;
  return d;
}
// No connection could be made for the message.
inline Delivery CannotConnect() {
  Delivery d = Retriable("cannot connect to broker: Connection refused");
  d.unsent = true;
  return d;
}

// Everything about one sink name: how it answers, what it was sent, how often
// it was built. Outlives the sinks built from it (they hold a shared_ptr).
struct FakeBroker {
  Script script = [](const OutMessage &, int) { return Delivered(); };
  std::vector<std::vector<SentMessage>> calls;
  int created = 0;
  int destroyed = 0;
  int polls = 0;
  bool fail_create = false;      // the factory returns nullptr with create_error
  bool throw_on_create = false;  // the factory runs out of memory (std::bad_alloc)
  std::string create_error;
  bool needs_recreate = false;  // reported by the live sink; cleared on creation
  bool worn = false;            // the same, for Sink::Worn
  // Called as each message is handed to the sink (before any answer).
  std::function<void(const SentMessage &)> on_send;
  std::string state = "connected";
  std::vector<LogLine> pending_logs;  // handed out by the next TakeLogs
  std::string last_kind;
  SinkOptions last_options;
  // Pipelined: Send only records (the messages are "on the wire"); the
  // script decides each outcome at Collect, as a broker answering later.
  bool pipelined = false;
  int abandoned = 0;  // AbandonAll calls that found open Sends
  // Pipelined: AbandonAll keeps the answers of the messages that are not
  // stuck (they came in before it gave the rest up), as the Kafka sink does.
  bool answers_when_abandoned = false;
  // Pipelined and slow: CollectFor finds no answer yet (the Send stays open)
  // until this is cleared.
  bool slow = false;
  // Pipelined: the messages of these topics get no answer (a topic the
  // cluster lacks, a partition without a leader) until removed; the others
  // are answered (answered_at_us set, as a real sink does).
  std::set<std::string> stuck_topics;
  std::set<std::string> stuck_ids;  // the same, message by message
  // Pipelined: the messages of these topics are answered this many ms after
  // they were sent (a slower broker), not at once.
  std::map<std::string, int> answer_after_ms;
  // Pipelined: the messages with these ids are not sent; Send settles them
  // at once as kNotSent without an answer (answered_at_us 0), as a sink
  // does that cuts its call short for want of time.
  std::set<std::string> cut_off_ids;
  // The calls (indexes into `calls`) that came through SendAlone.
  std::set<size_t> alone_calls;

  // Ids of the messages of call c, in the order the sink got them.
  std::vector<std::string> Ids(size_t c) const {
    std::vector<std::string> ids;
    if (c < calls.size()) {
      for (const SentMessage &m : calls[c]) ids.push_back(m.id);
    }
    return ids;
  }
  // Every id sent, over all calls, in order.
  std::vector<std::string> AllIds() const {
    std::vector<std::string> ids;
    for (const auto &call : calls) {
      for (const SentMessage &m : call) ids.push_back(m.id);
    }
    return ids;
  }
};

inline std::map<std::string, std::shared_ptr<FakeBroker>> g_brokers;
inline bool g_interrupted = false;
inline bool Interrupted() { return g_interrupted; }

inline std::shared_ptr<FakeBroker> BrokerNamed(const std::string &name) {
  std::shared_ptr<FakeBroker> &b = g_brokers[name];
  if (!b) b = std::make_shared<FakeBroker>();
  return b;
}

class FakeSink : public Sink {
 public:
  explicit FakeSink(std::shared_ptr<FakeBroker> broker) : broker_(std::move(broker)) {}
  ~FakeSink() override { ++broker_->destroyed; }

  void Publish(const OutMessage *messages, size_t n, Delivery *out,
               InterruptCheck interrupted) override {
    (void)interrupted;
    const int call = static_cast<int>(broker_->calls.size());
    Record(messages, n);
    for (size_t i = 0; i < n; ++i) out[i] = broker_->script(messages[i], call);
  }

 private:
  struct Open {
    uint64_t ticket;
    int call;
    Delivery *out;
    std::vector<SentMessage> copies;
    std::vector<bool> answered;
    std::chrono::steady_clock::time_point sent = std::chrono::steady_clock::now();
  };

  // Answer the open Send's messages whose topics are not stuck (all, unless
  // `stuck_ok`); true when every message has its answer.
  bool Answer(Open *o, bool stuck_ok) {
    bool all = true;
    for (size_t i = 0; i < o->copies.size(); ++i) {
      if (o->answered[i]) continue;
      const SentMessage &c = o->copies[i];
      if (stuck_ok &&
          (broker_->stuck_topics.count(c.topic) != 0 || broker_->stuck_ids.count(c.id) != 0)) {
        all = false;
        continue;
      }
      auto delay = broker_->answer_after_ms.find(c.topic);
      if (stuck_ok && delay != broker_->answer_after_ms.end() &&
          std::chrono::steady_clock::now() - o->sent < std::chrono::milliseconds(delay->second)) {
        all = false;
        continue;
      }
      OutMessage m;
      m.id = c.id;
      m.topic = c.topic;
      m.target = c.target;
      m.has_key = c.has_key;
      m.key = c.key;
      o->out[i] = broker_->script(m, o->call);
      o->out[i].answered_at_us = UnixNowUs();
      o->answered[i] = true;
    }
    return all;
  }

  void Record(const OutMessage *messages, size_t n) {
    broker_->calls.emplace_back();
    for (size_t i = 0; i < n; ++i) {
      const OutMessage &m = messages[i];
      SentMessage s;
      s.id = std::string(m.id);
      s.topic = std::string(m.topic);
      s.target = std::string(m.target);
      s.route = m.route;
      s.has_key = m.has_key;
      s.key = std::string(m.key);
      s.payload = std::string(m.payload);
      for (size_t h = 0; h < m.header_count; ++h) {
        s.headers.emplace_back(std::string(m.headers[h].name), std::string(m.headers[h].value));
      }
      s.headers_json = std::string(m.headers_json);
      broker_->calls.back().push_back(std::move(s));
      if (broker_->on_send) broker_->on_send(broker_->calls.back().back());
    }
  }

 public:
  uint64_t Send(const OutMessage *messages, size_t n, Delivery *out,
                InterruptCheck interrupted) override {
    if (!broker_->pipelined) return Sink::Send(messages, n, out, interrupted);
    const int call = static_cast<int>(broker_->calls.size());
    Record(messages, n);
    open_.push_back(Open{++tickets_, call, out, {}, std::vector<bool>(n, false)});
    for (size_t i = 0; i < n; ++i) {
      open_.back().copies.push_back(broker_->calls.back()[i]);
      if (broker_->cut_off_ids.count(std::string(messages[i].id)) != 0) {
        out[i] = Delivery{DeliveryStatus::kNotSent, "not sent: cut off for want of time"};
        open_.back().answered[i] = true;
      }
    }
    return tickets_;
  }
  uint64_t SendAlone(const OutMessage *message, Delivery *out,
                     InterruptCheck interrupted) override {
    broker_->alone_calls.insert(broker_->calls.size());
    return Send(message, 1, out, interrupted);
  }
  void Collect(uint64_t ticket, InterruptCheck interrupted) override {
    for (auto it = open_.begin(); it != open_.end(); ++it) {
      if (it->ticket != ticket) continue;
      Answer(&*it, false);
      open_.erase(it);
      return;
    }
  }
  bool CollectFor(uint64_t ticket, int64_t wait_ms, InterruptCheck interrupted) override {
    (void)wait_ms;
    for (auto it = open_.begin(); it != open_.end(); ++it) {
      if (it->ticket != ticket) continue;
      if (broker_->slow) return false;
      if (!Answer(&*it, true)) return false;
      open_.erase(it);
      return true;
    }
    return true;
  }
  int64_t SettleLimitMs() const override { return broker_->pipelined ? 10000 : 0; }
  void AbandonAll(const char *reason) noexcept override {
    if (open_.empty()) return;
    ++broker_->abandoned;
    for (Open &o : open_) {
      // The answers that came in while the Kafka sink's purge drained its
      // reports are kept; the rest is given up.
      if (broker_->answers_when_abandoned) Answer(&o, true);
      for (size_t i = 0; i < o.copies.size(); ++i) {
        if (!o.answered[i]) o.out[i] = Delivery{DeliveryStatus::kRetriable, reason};
      }
    }
    open_.clear();
  }
  void Poll() override { ++broker_->polls; }
  std::vector<LogLine> TakeLogs() override {
    std::vector<LogLine> logs;
    logs.swap(broker_->pending_logs);
    return logs;
  }
  bool NeedsRecreate() const override { return broker_->needs_recreate; }
  bool Worn() const override { return broker_->worn; }
  std::string State() const override { return broker_->state; }

 private:
  std::shared_ptr<FakeBroker> broker_;
  std::vector<Open> open_;
  uint64_t tickets_ = 0;
};

inline std::unique_ptr<Sink> FakeFactory(std::string_view name, std::string_view kind,
                                         const SinkOptions &options, bool privileged,
                                         std::string *error) {
  (void)privileged;
  std::shared_ptr<FakeBroker> b = BrokerNamed(std::string(name));
  if (b->fail_create) {
    *error = b->create_error;
    return nullptr;
  }
  if (b->throw_on_create) throw std::bad_alloc();
  ++b->created;
  b->needs_recreate = false;
  b->worn = false;
  b->last_kind = std::string(kind);
  b->last_options = options;
  return std::make_unique<FakeSink>(b);
}
}  // namespace test_support
}  // namespace outbox
