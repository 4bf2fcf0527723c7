// The options of a sink as create_sink() and the publisher pass them to a
// sink: plain values, with where each came from, and the rule for values
// read from the server's environment. PostgreSQL-free; each kind of sink
// validates its own options (sinks/sink_options.hpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

struct SinkOption {
  // kUnresolved: a reference to an environment variable ({"env": "OUTBOX_X"})
  // that could not be read; `text` says why (never a value).
  enum class Kind { kString, kNumber, kOther, kUnresolved };
  std::string key;
  Kind kind = Kind::kString;
  std::string text;               // the string, or the number's text; empty for kOther
  bool from_environment = false;  // text was read from {"env": ...}
};

// Secrets without SQL text: an option's value may be
// {"env": "NAME"}, the value of environment variable NAME of the server's
// processes (set where the server is started: the service unit, pg_ctl's
// environment). Only names OUTBOX_[A-Z0-9_]{1,64} may be read, so that a
// sink owner cannot send other variables of the server's environment to a
// broker of its choosing. Whether `name` is such a name.
bool IsSecretVariableName(std::string_view name);

using SinkOptions = std::vector<SinkOption>;

// Values from the environment are a superuser's choice (the environment is
// shared by every database of the server: one database's sink owner must not
// send another's secret to a broker of its choosing), and only for options
// that hold secrets, which no message ever quotes (Kafka: sasl.password,
// ssl.key.password, ssl.keystore.password, ssl.key.pem,
// sasl.oauthbearer.client.secret, sasl.oauthbearer.config; Redis, AMQP and
// MQTT: password; NATS: password, token; HTTP: secret, the signing key).
// The reason when an option breaks that; nothing otherwise. Checked before
// the kind's own validation, by create_sink() and when a sink is built.
std::optional<std::string> CheckSecretSources(const SinkOptions &options, bool superuser);

// An option as views into someone else's memory (PostgreSQL-facing code
// flattens jsonb into these without building containers).
struct OptionView {
  std::string_view key;
  SinkOption::Kind kind = SinkOption::Kind::kString;
  std::string_view text;
  bool from_environment = false;
};

}  // namespace outbox
