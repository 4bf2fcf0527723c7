// The NATS sink pipelines (keyed_sink.hpp) against a nats-server of each
// test's own (nats_server.hpp), which the test stops and continues by its
// PID: the checks of pipelining_checks.hpp.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nats_sink_support.hpp"
#include "pipelining_checks.hpp"

namespace outbox {
namespace {

using nats_test::Client;
using nats_test::Server;
using nats_test::Watcher;
using test_support::Opt;
using test_support::PipelineRig;

// A server with a stream for "pipe.>", and a watcher of what is published
// there; the rig's sinks publish to "pipe.a".
struct NatsRig {
  Server server;
  std::unique_ptr<Client> client;
  std::unique_ptr<Watcher> watcher;
  PipelineRig rig;

  NatsRig() {
    if (!server.running()) return;
    client = std::make_unique<Client>(server.port());
    if (!client->AddStream({"PIPE", {"pipe.>"}})) return;
    watcher = std::make_unique<Watcher>(client->nc(), "pipe.>");
    rig.make = [this](int ack_timeout_ms) {
      return nats_test::MakeTestSink(server.port(),
                                     {Opt("ack_timeout_ms", std::to_string(ack_timeout_ms)),
                                      Opt("connect_timeout_ms", "1000")});
    };
    rig.pause = [this] { ASSERT_TRUE(server.Pause()); };
    rig.resume = [this] { server.Resume(); };
    rig.arrived = [this](size_t count) {
      const test_support::Clock::time_point start = test_support::Clock::now();
      std::vector<std::string> seen = watcher->Seen();
      while (seen.size() < count && test_support::SecondsSince(start) < 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        seen = watcher->Seen();
      }
      return seen;
    };
    rig.target = "pipe.a";
  }
  bool ready() const { return server.running() && watcher != nullptr; }
};

OUTBOX_PIPELINING_TESTS(NatsPipelining, NatsRig)

}  // namespace
}  // namespace outbox
