// Messages for the AMQP sink's unit tests whose views point into strings the
// test keeps, and the sink under test built on a port.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/sink.hpp"
#include "sinks/amqp_sink.hpp"
#include "test_support.hpp"

namespace outbox {
namespace amqp_test {

struct Batch {
  struct Owned {
    std::string id, topic, target, key, payload, headers_json, source;
    bool has_key = false;
    std::vector<std::pair<std::string, std::string>> headers;
    std::vector<Header> header_views;
    MessageFormat format = MessageFormat::kRaw;
    int64_t created_at = 0;
  };
  std::vector<std::unique_ptr<Owned>> owned;
  std::vector<OutMessage> messages;
  std::vector<Delivery> results;

  // A message to `target` (the routing key). Ids are unique per process.
  Batch &Add(std::string target, std::optional<std::string> key, std::string payload,
             std::vector<std::pair<std::string, std::string>> headers = {},
             MessageFormat format = MessageFormat::kRaw, std::string topic = "orders.created") {
    static int serial = 0;
    auto o = std::make_unique<Owned>();
    char id[40];
    std::snprintf(id, sizeof id, "0190f5f0-0000-7000-8000-%012d", ++serial);
    o->id = id;
    o->topic = std::move(topic);
    o->target = std::move(target);
    o->has_key = key.has_value();
    if (key) o->key = *key;
    o->payload = std::move(payload);
    o->headers = std::move(headers);
    o->headers_json = "{}";
    o->format = format;
    o->source = "/outbox/unit";
    // 2026-11-21 10:00:00.123456 UTC, in microseconds since 2000-01-01.
    o->created_at = 848570400123456LL;
    owned.push_back(std::move(o));
    return *this;
  }

  const std::string &Id(size_t i) const { return owned[i]->id; }

  void Publish(Sink *sink, Sink::InterruptCheck interrupted = nullptr) {
    messages.clear();
    for (const auto &o : owned) {
      o->header_views.clear();
      for (const auto &[name, value] : o->headers) o->header_views.push_back({name, value});
      OutMessage m;
      m.id = o->id;
      m.topic = o->topic;
      m.target = o->target;
      m.has_key = o->has_key;
      m.key = o->key;
      m.payload = o->payload;
      m.headers = o->header_views.data();
      m.header_count = o->header_views.size();
      m.headers_json = o->headers_json;
      m.format = o->format;
      m.created_at = o->created_at;
      m.source = o->source;
      messages.push_back(m);
    }
    results.assign(messages.size(), Delivery{DeliveryStatus::kNotSent, "unset", -1});
    sink->Publish(messages.data(), messages.size(), results.data(), interrupted);
  }

  size_t Count(DeliveryStatus status) const {
    size_t count = 0;
    for (const Delivery &d : results) count += d.status == status ? 1 : 0;
    return count;
  }

  // The first result that is not `status`, for failure messages.
  std::string FirstOther(DeliveryStatus status) const {
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i].status != status) {
        return "message " + std::to_string(i) + ": status " +
               std::to_string(static_cast<int>(results[i].status)) + " " + results[i].error;
      }
    }
    return "all as expected";
  }
};

inline std::unique_ptr<Sink> MakeSink(int port, std::vector<SinkOption> more = {},
                                      const std::string &name = "test") {
  SinkOptions options = {test_support::Opt("host", "127.0.0.1"),
                         test_support::Opt("port", std::to_string(port))};
  options.insert(options.end(), more.begin(), more.end());
  std::string error;
  std::unique_ptr<Sink> sink = MakeAmqpSink(name, options, &error);
  EXPECT_NE(sink, nullptr) << error;
  return sink;
}

inline std::string AllLogs(Sink *sink) {
  std::string text;
  for (const LogLine &line : sink->TakeLogs()) text += line.text + "\n";
  return text;
}

}  // namespace amqp_test
}  // namespace outbox
