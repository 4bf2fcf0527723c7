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
#include "sink_batch.hpp"
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

using test_support::Batch;

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
