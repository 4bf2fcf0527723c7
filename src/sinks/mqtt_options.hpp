// The MQTT sink's options (outbox.create_sink(name, 'mqtt', options)) and
// its rule for route targets (MQTT topic names). Plain parsing: no
// libmosquitto header here (create_sink() runs in a user's backend), nothing
// connects, and the fuzz target links it alone (test/fuzz/mqtt_options_fuzz.cpp,
// test/unit/mqtt_options_test.cpp). docs/reference.md lists the options.
//
// No option names a file: TLS trusts the system's store or certificates
// given inline as PEM text, so a sink owner can never make the server
// process read a file of their choosing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/sink_option.hpp"

namespace outbox {

struct MqttOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: the protocol's default, 1883 (plain) or 8883 (TLS)
  // The start of the client identifier. The sink adds "-" and 16 random hex
  // digits per instance (MqttClientId), so that two publishers of one sink
  // (two databases, a restarted worker whose old session lingers) never take
  // each other's session over: a broker disconnects the older client of an
  // identifier when a new one connects with it.
  std::string client_id = "outbox";
  std::optional<std::string> user;
  std::optional<std::string> password;  // a secret (may come from {"env": ...}); needs user
  bool tls = false;
  bool tls_verify = true;  // with tls: check the chain and that it names host
  // With tls: PEM text of the certificates to trust instead of the system's
  // store. Inline, never a path.
  std::string tls_ca;
  int keepalive_s = 30;
  int protocol = 5;  // 5 (MQTT 5) or 311 (MQTT 3.1.1)
  int qos = 1;       // 1 (PUBACK) or 2 (PUBREC/PUBREL/PUBCOMP)
  bool retain = false;
  int connect_timeout_ms = 2000;  // TCP connect, TLS handshake and CONNACK
  int ack_timeout_ms = 5000;      // how long a message waits for its acknowledgement
  // Connections to the broker, used as one (MqttSink): a broker lets each
  // connection have only so many messages unacknowledged (its Receive
  // Maximum; mosquitto's max_inflight_messages, 20 by default), so that
  // window, not the round trip, would bound the sink's pace on one.
  int connections = 4;

  int EffectivePort() const { return port != 0 ? port : (tls ? 8883 : 1883); }
};

// Bounds, for the docs and the tests.
constexpr size_t kMqttMaxClientIdPrefix = 64;
constexpr size_t kMqttMaxTopicBytes = 4096;
constexpr int kMqttMinTimeoutMs = 100;
constexpr int kMqttMaxConnectTimeoutMs = 60000;
constexpr int kMqttMaxAckTimeoutMs = 300000;
constexpr int kMqttMaxConnections = 16;

// Keys host, port, client_id, user, password, tls, tls_verify, tls_ca,
// keepalive, protocol ("5" or "3.1.1"), qos, retain, connect_timeout_ms,
// ack_timeout_ms, connections. Values are JSON strings; port, keepalive,
// protocol, qos, the timeouts and connections also take numbers; booleans are the strings "true"
// and "false". An unknown option is named with the valid ones; a secret is never quoted. Fills *out
// when valid (out may be null), leaves it alone otherwise.
std::optional<std::string> ParseMqttOptions(const SinkOptions &options, MqttOptions *out);

// What sink_factory calls at create_sink(): ParseMqttOptions without a result.
std::optional<std::string> ValidateMqttOptions(const SinkOptions &options);

// Why `topic` cannot be published to (a sentence for an error's detail), or
// nothing. A topic name is 1 to kMqttMaxTopicBytes bytes of valid UTF-8
// without control characters (NUL included); it holds no wildcard ('+' or
// '#', which only subscriptions may use); it does not start with '$' (the
// broker's own topics, such as $SYS); and no level is empty (no leading or
// trailing '/', no "//"). MQTT allows empty levels, but a topic such as
// "orders//eu" or "/orders" is nearly always a mistake that subscribers to
// "orders/+/eu" or "orders/#" would miss; there is no option to allow them,
// since a route's target is checked where no sink option is known. The sink
// applies the same rule to every message's topic (a route without a target
// sends to the event's topic).
std::optional<std::string> CheckMqttTopic(std::string_view topic);

// Whether `text` is an MQTT string a broker accepts: at most 65535 bytes of
// valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF)
// holding no control character (C0 with NUL, DEL, C1) and no noncharacter:
// what the MQTT specification asks of its strings and what brokers
// (mosquitto among them) close the connection over; nor U+FEFF, which
// common clients (paho-mqtt) refuse whole packets over.
bool IsMqttString(std::string_view text);

// The client identifier of one sink instance: the prefix, "-", and 16 hex
// digits of `nonce` (its connections use nonce, nonce + 1, ...).
std::string MqttClientId(std::string_view prefix, uint64_t nonce);

}  // namespace outbox
