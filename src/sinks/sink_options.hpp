// Validation of outbox.create_sink() options, per kind of sink. PostgreSQL-
// free: the SQL entry point flattens the jsonb into SinkOption values
// (core/sink_option.hpp), and the publisher parses the same values again
// when it builds a sink, so both agree on what is valid.
#pragma once

#include "core/sink_option.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

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
