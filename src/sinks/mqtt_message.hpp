// What an MQTT message of the sink holds, and how the broker's answers are
// judged: plain functions without libmosquitto or PostgreSQL, tested as
// tables (test/unit/mqtt_message_test.cpp). docs/formats.md shows the
// result byte for byte.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/sink.hpp"

namespace outbox {

// One MQTT message of an event, as the sink publishes it.
//
// MQTT 5 (protocol 5):
//   raw: the body is the payload; content type "application/json"; user
//     properties outbox-id, outbox-topic, outbox-key (keyed events), then the
//     user's headers (HeaderedHeaders' list: names a format of outbox sets
//     are not taken from the user).
//   cloudevents: structured content mode: the body is the CloudEvent as one
//     JSON object (as AMQP and Redis carry it); content type
//     "application/cloudevents+json"; user properties outbox-id,
//     outbox-topic, outbox-key (keyed events); the user's headers travel
//     inside the event (extension attributes, outboxheaders).
//   Both: correlation data = the event id (its 36 bytes of text).
// MQTT 3.1.1 (no properties): the body is the raw envelope
//   {"id","topic","key","payload","headers"} (raw) or the structured
//   CloudEvent (cloudevents), as Redis's publish mode sends them.
struct MqttMessage {
  std::string_view body;           // into the event or *scratch
  std::string_view content_type;   // MQTT 5 only; static text
  std::vector<Header> properties;  // MQTT 5 user properties, in order
};

// Fills *out for `m` (views into `m`, static text or *scratch, which must
// outlive their use). Returns why the event cannot travel as MQTT: a format
// other than raw and cloudevents, or (MQTT 5) a user property's name or
// value that is not an MQTT string (valid UTF-8 without control characters:
// brokers close the connection over one), named; nothing when it can.
std::optional<std::string> BuildMqttMessage(const OutMessage &m, bool mqtt5, std::string *scratch,
                                            MqttMessage *out);

// What a PUBACK's (QoS 1) or PUBREC's (QoS 2) MQTT 5 reason code means for
// its message. Below 0x80: delivered (0x10, no matching subscribers, too:
// the broker took it). 0x87 (not authorized) and 0x90 (topic name invalid):
// kTargetRefused, the topic cannot take messages from this client now,
// never a sign that the sink is down. 0x97 (quota exceeded): kRetriable,
// the broker is overloaded. 0x91 (packet identifier in use): kRetriable,
// the session is confused; the sink starts a new connection. Every other
// code from 0x80 (unspecified error, implementation specific error, payload
// format invalid, ...): kRejected, this message's fault.
DeliveryStatus MqttReasonOutcome(int reason_code);

// "0x87 not authorized": the code in hex and the specification's name.
std::string MqttReasonText(int reason_code);

}  // namespace outbox
