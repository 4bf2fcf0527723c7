// The librdkafka configuration of a Kafka sink's producer: our defaults, the
// sink's options over them, and what is not the user's choice. Built on the
// owner's thread before the producer exists. No PostgreSQL header here.
#pragma once

#include <librdkafka/rdkafka.h>

#include <memory>
#include <string>

#include "core/sink_option.hpp"

namespace outbox {

struct KafkaConfDeleter {
  void operator()(rd_kafka_conf_t *conf) const { rd_kafka_conf_destroy(conf); }
};
using KafkaConfPtr = std::unique_ptr<rd_kafka_conf_t, KafkaConfDeleter>;

// The configuration of sink `name`'s producer: client.id "outbox-<name>",
// our defaults (enable.idempotence=true, acks=all, partitioner=murmur2_random,
// linger.ms=1, message.timeout.ms=10000), the options over them, and last
// log.queue=true, which the options cannot undo. The opaque and the callbacks
// are left to the sink. nullptr with *error set ("option \"KEY\": " and
// librdkafka's words) when librdkafka refuses a value.
KafkaConfPtr NewKafkaConf(const std::string &name, const SinkOptions &options, std::string *error);

// message.timeout.ms as librdkafka will apply it (a topic-level property:
// rd_kafka_conf_set stores it in the default topic configuration).
int KafkaMessageTimeoutMs(rd_kafka_conf_t *conf);

// librdkafka's error text without the newline it ends some messages with.
std::string TrimmedKafkaText(const char *text);

}  // namespace outbox
