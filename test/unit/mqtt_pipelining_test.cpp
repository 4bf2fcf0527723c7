// The MQTT sink pipelines (keyed_sink.hpp) against a mosquitto of each
// test's own (mqtt_broker.hpp), which the test stops and continues by its
// PID: the checks of pipelining_checks.hpp.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "mqtt_broker.hpp"
#include "pipelining_checks.hpp"
#include "sinks/mqtt_sink.hpp"
#include "test_support.hpp"

namespace outbox {
namespace {

using mqtt_test::Broker;
using mqtt_test::Seen;
using mqtt_test::Subscriber;
using test_support::Opt;
using test_support::PipelineRig;

// A broker and a subscriber of the test's own; the rig's sinks publish to
// "t/pipe".
struct MqttRig {
  Broker broker;
  std::unique_ptr<Subscriber> subscriber;
  PipelineRig rig;

  MqttRig() {
    if (!broker.running()) return;
    subscriber = std::make_unique<Subscriber>(broker.port());
    rig.make = [this](int ack_timeout_ms) {
      std::string error;
      std::unique_ptr<Sink> sink =
          MakeMqttSink("pipe",
                       {Opt("port", std::to_string(broker.port())), Opt("client_id", "pipe"),
                        Opt("ack_timeout_ms", std::to_string(ack_timeout_ms)),
                        Opt("connect_timeout_ms", "1000")},
                       &error);
      EXPECT_NE(sink, nullptr) << error;
      return sink;
    };
    rig.pause = [this] { broker.Pause(); };
    rig.resume = [this] { broker.Resume(); };
    rig.arrived = [this](size_t count) {
      std::vector<std::string> bodies;
      for (const Seen &s : subscriber->Wait(count)) {
        if (s.topic == "t/pipe") bodies.push_back(s.body);
      }
      return bodies;
    };
    rig.target = "t/pipe";
  }
  bool ready() const { return broker.running() && subscriber && subscriber->subscribed(); }
};

OUTBOX_PIPELINING_TESTS(MqttPipelining, MqttRig)

}  // namespace
}  // namespace outbox
