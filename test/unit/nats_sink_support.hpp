// What the NATS sink's tests against a real server share (nats_sink_test.cpp,
// nats_sink_faults_test.cpp): the shared server kept healthy, batches of
// messages whose views the test keeps alive, and a sink on the server.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nats_server.hpp"
#include "sinks/nats_sink.hpp"
#include "test_support.hpp"

namespace outbox {
namespace nats_test {

// The shared server, running with JetStream (a test that stopped it or took
// JetStream away restores it on its way out, but a failed one may not have).
inline Server &Healthy() {
  Server &server = SharedServer();
  if (!server.running() || !server.jetstream()) server.Restart(true);
  return server;
}

#define NATS_REQUIRE_SERVER(server) ASSERT_TRUE((server).running()) << "nats-server did not start"

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

inline std::vector<SinkOption> Credentials() {
  return {test_support::Opt("user", nats_test::kUser),
          test_support::Opt("password", nats_test::kPassword)};
}

inline std::unique_ptr<Sink> MakeTestSink(int port, std::vector<SinkOption> more = {}) {
  SinkOptions options = {test_support::Opt("servers", "nats://127.0.0.1:" + std::to_string(port))};
  for (SinkOption &o : Credentials()) options.push_back(std::move(o));
  for (SinkOption &o : more) options.push_back(std::move(o));
  std::string error;
  std::unique_ptr<Sink> sink = MakeNatsSink("test", options, &error);
  EXPECT_NE(sink, nullptr) << error;
  return sink;
}

inline std::string AllLogs(Sink *sink) {
  std::string text;
  for (const LogLine &line : sink->TakeLogs()) text += line.text + "\n";
  return text;
}

}  // namespace nats_test
}  // namespace outbox
