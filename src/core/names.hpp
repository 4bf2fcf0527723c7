// Rules for the names users give us: topics, route patterns, sink names.
// PostgreSQL-free so the rules are unit-tested and fuzzed on their own.
#pragma once

#include <string_view>

namespace outbox {

// Kafka's rule, which we apply to every topic whatever the sink:
// 1 to 249 characters of [A-Za-z0-9._-].
constexpr size_t kMaxTopicLength = 249;

// emit()'s bounds on what an application role may attach to an event (the
// security model: no input may exhaust the publisher's memory, which holds a
// few batches of events as JSON text). A key is at most kMaxKeyBytes bytes;
// the headers, as JSON text (octet_length(headers::text)), at most
// kMaxHeadersBytes. The trace context adds at most 512 + 512 characters of
// printable ASCII (trace_context.hpp).
constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxHeadersBytes = 16384;
bool IsValidTopic(std::string_view topic);

// A Kafka topic that can actually be created: a valid topic, and neither "."
// nor ".." (Kafka refuses those two). Used for Kafka targets.
bool IsValidKafkaTopic(std::string_view topic);

// A route pattern: a topic in which '*' may stand for any run of characters
// (1 to 249 characters of [A-Za-z0-9._-*]).
bool IsValidPattern(std::string_view pattern);

// A sink name: 1 to 63 characters of [A-Za-z0-9._-] (fits a PostgreSQL
// identifier, so it can appear in logs and process titles unquoted).
constexpr size_t kMaxSinkNameLength = 63;
bool IsValidSinkName(std::string_view name);

}  // namespace outbox
