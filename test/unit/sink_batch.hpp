// Batches of messages for the sinks' tests against real brokers
// (nats_sink_*_test.cpp, mqtt_sink_*_test.cpp): messages whose views point
// into strings the test keeps, published through a Sink, with their
// outcomes counted.
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/sink.hpp"

namespace outbox {
namespace test_support {

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

  // Unique in the test binary's run (a NATS stream drops a repeated id as a
  // duplicate, which only the tests of re-sends want).
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

  // The views of what was added, and results reset (kNotSent, "unset").
  void Build() {
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
  }

  void Publish(Sink *sink, Sink::InterruptCheck interrupted = nullptr) {
    Build();
    sink->Publish(messages.data(), messages.size(), results.data(), interrupted);
  }

  // Pipelined: the Send's ticket (0 when it settled everything at once).
  uint64_t Send(Sink *sink) {
    Build();
    return sink->Send(messages.data(), messages.size(), results.data(), nullptr);
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

}  // namespace test_support
}  // namespace outbox
