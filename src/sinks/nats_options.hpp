// The NATS sink's options and route targets: what create_sink() accepts for
// kind 'nats', and which subjects a route may send to. Plain values and
// plain functions: no libnats here (create_sink() runs in a user's backend,
// which must not start libnats's threads), no PostgreSQL header; fuzzed
// (test/fuzz/nats_options_fuzz.cpp) and tested as tables
// (test/unit/nats_options_test.cpp).
//
// No option names a file: TLS verifies the server against the system's CA
// store and names only the host to expect, so a sink owner can never make
// the server process read a file of their choosing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/sink_option.hpp"

namespace outbox {

struct NatsServer {
  std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
  int port = 4222;
};

struct NatsOptions {
  // Tried in random order (libnats's default), as NATS clients do.
  std::vector<NatsServer> servers = {NatsServer{"127.0.0.1", 4222}};
  std::optional<std::string> user;          // with password: user/password authentication
  std::optional<std::string> password;      // a secret (may come from {"env": ...})
  std::optional<std::string> token;         // a secret; excludes user and password
  bool tls = false;                         // TLS, verifying the server (system CAs)
  std::optional<std::string> tls_hostname;  // the name the certificate must hold
  int64_t connect_timeout_ms = 2000;        // each server's TCP connect and handshake
  int64_t ack_timeout_ms = 5000;            // how long a message waits for its PubAck
};

// Bounds, for the docs and the tests.
constexpr int64_t kNatsMinTimeoutMs = 100;
constexpr int64_t kNatsMaxConnectTimeoutMs = 60000;
constexpr int64_t kNatsMaxAckTimeoutMs = 300000;
constexpr size_t kNatsMaxServers = 32;
constexpr size_t kNatsMaxSubjectBytes = 1024;

// Options: servers (comma-separated [nats://|tls://]host[:port], default
// nats://127.0.0.1:4222), user, password, token, tls ("true"/"false"),
// tls_hostname, connect_timeout_ms, ack_timeout_ms. Values are JSON strings;
// the two timeouts also take numbers. An unknown option is named with the
// valid ones. Secrets never appear in the error text. Fills *out when
// valid (out may be null), leaves it alone otherwise.
std::optional<std::string> ParseNatsOptions(const SinkOptions &options, NatsOptions *out);

// What sink_factory calls: ParseNatsOptions without a result. Connects to
// nothing.
std::optional<std::string> ValidateNatsOptions(const SinkOptions &options);

// Why `subject` cannot be a route's target on a NATS sink, as a sentence
// for an error's detail; nothing when it can. A subject is 1 to
// kNatsMaxSubjectBytes bytes of printable ASCII without spaces, tokens
// separated by single dots (none empty), literal (no '*' or '>': JetStream
// stores under a literal subject), and not in the server's own API space
// ($JS, $JSC, $NRG, $SYS as the first token). The sink applies the same
// rule to every message's subject (a route without a target sends to the
// event's topic, and a topic may be "a..b").
std::optional<std::string> CheckNatsSubject(std::string_view subject);

// "nats://host:port" (IPv6 hosts in brackets): how the sink names a server
// to libnats and in messages. Never holds credentials.
std::string NatsServerUrl(const NatsServer &server);

}  // namespace outbox
