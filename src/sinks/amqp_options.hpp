// The AMQP sink's options (outbox.create_sink(name, 'amqp', options)) and
// its rule for route targets (routing keys). Plain parsing: no librabbitmq
// header here, nothing connects, and the fuzz target links it alone.
// docs/reference.md lists the options for users.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/sink_option.hpp"

namespace outbox {

struct AmqpOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: the scheme's default, 5672 (amqp) or 5671 (amqps)
  std::string vhost = "/";
  std::string user = "guest";
  std::string password = "guest";
  std::string exchange;  // "": the default exchange (routing key = queue name)
  bool tls = false;
  // With tls: check the server's certificate chain and that it names host.
  bool tls_verify = true;
  // With tls: PEM text of the certificates to trust instead of the system's
  // store. Inline, never a path: a sink owner must not make the server open
  // files of its choosing.
  std::string tls_ca;
  int heartbeat_s = 30;  // proposed to the server (0: off); the smaller non-zero wins
  int connect_timeout_ms = 5000;
  int delivery_timeout_ms = 10000;

  int EffectivePort() const { return port != 0 ? port : (tls ? 5671 : 5672); }
};

// Keys host, port, vhost, user, password, exchange, tls, tls_verify, tls_ca,
// heartbeat, connect_timeout_ms, delivery_timeout_ms. Values are JSON
// strings; numbers are also accepted for port, heartbeat and the timeouts,
// and booleans are written as the strings "true" and "false" (a jsonb
// boolean reaches the sink without its value). Returns the error message,
// which names the option, or nothing (and fills *out when not null).
std::optional<std::string> ParseAmqpOptions(const SinkOptions &options, AmqpOptions *out);

// What sink_factory calls at create_sink(): ParseAmqpOptions without a result.
std::optional<std::string> ValidateAmqpOptions(const SinkOptions &options);

// Why `target` cannot be a routing key (a sentence for an error's detail),
// or nothing. AMQP carries a routing key as a short string: at most 255
// bytes. An empty key is allowed (a fanout exchange ignores it).
std::optional<std::string> CheckAmqpRoutingKey(std::string_view target);

// The longest short string AMQP 0-9-1 can carry (routing keys, exchange
// names, property values such as message_id and type, table keys).
constexpr size_t kAmqpMaxShortString = 255;

}  // namespace outbox
