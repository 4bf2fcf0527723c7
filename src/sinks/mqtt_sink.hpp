// The MQTT sink (libmosquitto), and the details of it that its unit tests
// check directly: its options and topics (mqtt_options.hpp), its messages
// and its judgement of the broker's reason codes (mqtt_message.hpp). No
// PostgreSQL header here.
#pragma once

#include <memory>
#include <string>

#include "core/sink.hpp"
#include "sinks/mqtt_message.hpp"  // BuildMqttMessage, MqttReasonOutcome
#include "sinks/mqtt_options.hpp"  // ParseMqttOptions, CheckMqttTopic

namespace outbox {

// Build an MQTT sink from create_sink() options (ParseMqttOptions). It
// connects lazily, on the first Publish, and again on the Publish after a
// loss. Returns nullptr and sets *error when the options are invalid.
std::unique_ptr<Sink> MakeMqttSink(const std::string &name, const SinkOptions &options,
                                   std::string *error);

}  // namespace outbox
