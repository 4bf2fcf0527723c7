// Validation of outbox.create_sink() options. PostgreSQL-free: the SQL entry
// point flattens the jsonb into SinkOption values, and the publisher parses the
// same values again when it builds a sink, so both agree on what is valid.
#pragma once

#include <cstdint>
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
// sasl.oauthbearer.client.secret, sasl.oauthbearer.config; Redis: password).
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

// Kafka: every value must be a string, every key a librdkafka property that
// rd_kafka_conf_set accepts with that value (its message is returned verbatim
// inside ours) and that is on outbox's allowlist of producer properties
// (sink_options.cpp); those that open files, fetch URLs or run Kerberos only
// when `superuser` (set by a superuser). bootstrap.servers (or
// metadata.broker.list) must be set. Creates no librdkafka handle, thread or
// connection. Returns the error message, or nothing when the options are
// valid.
std::optional<std::string> ValidateKafkaOptions(const SinkOptions &options, bool superuser = false);

// Where a producer property stands on that allowlist: anyone managing sinks
// may set it, only a superuser may, or nobody (every property not listed,
// known to librdkafka or not).
enum class KafkaPropertyUse { kAnyone, kSuperuser, kRefused };
KafkaPropertyUse ClassifyKafkaProperty(std::string_view key);
// Whether this librdkafka has a property of that name (its own list).
bool KnownToLibrdkafka(std::string_view key);

struct RedisOptions {
  enum class Mode { kStream, kPublish, kList };
  std::string host = "127.0.0.1";
  int port = 6379;
  int64_t db = 0;
  std::optional<std::string> password;
  Mode mode = Mode::kStream;
  std::optional<int64_t> maxlen;  // XADD MAXLEN ~ N; streams only
};

// Redis: keys host, port, db, password, mode, maxlen; strings, with numbers
// also accepted for port, db and maxlen. Fills *out when valid.
std::optional<std::string> ParseRedisOptions(const SinkOptions &options, RedisOptions *out);

}  // namespace outbox
