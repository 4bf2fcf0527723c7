// Details of the Kafka sink that its unit tests check directly (its
// judgement of error codes: kafka_errors.hpp). The sink itself is built with
// MakeKafkaSink (below). No PostgreSQL header here.
#pragma once

#include <string>
#include <string_view>

#include "core/names.hpp"  // IsValidKafkaTopic
#include "core/sink.hpp"
#include "sinks/kafka_errors.hpp"  // ClassifyKafkaError, KafkaErrorText

namespace outbox {

// How long the sink waits for a batch's delivery reports before it gives the
// batch up: message.timeout.ms plus margin_ms, or unlimited_ms plus margin_ms
// when message.timeout.ms is 0 (librdkafka's "no limit"). librdkafka reports
// every message by message.timeout.ms, so the margin only matters when a
// report goes astray or the limit is 0.
// max_topics: how many distinct topics one producer writes to before it asks
// to be replaced (Sink::Worn). librdkafka keeps every topic a producer ever
// wrote to, with its metadata and partitions, until the producer is
// destroyed (about 26 KB each, measured on 2.0): a route without a target
// lets emit() callers choose the topics, and tens of thousands of them
// would otherwise grow the publisher without bound and slow every metadata
// refresh.
// MakeKafkaSink uses these defaults; tests shorten them.
struct KafkaLimits {
  int margin_ms = 5000;
  int unlimited_ms = 300000;
  size_t max_topics = 4096;
};
// Build a Kafka sink from create_sink() options. Our defaults apply unless
// the options set them: enable.idempotence=true, acks=all,
// partitioner=murmur2_random, linger.ms=1, message.timeout.ms=10000.
// Returns nullptr and sets *error when librdkafka refuses the configuration,
// or it sets a property outbox does not allow (a superuser's property, see
// sinks/sink_options.hpp, unless `privileged`).
std::unique_ptr<Sink> MakeKafkaSink(const std::string &name, const SinkOptions &options,
                                    std::string *error, bool privileged = false);

std::unique_ptr<Sink> MakeKafkaSinkWithLimits(const std::string &name, const SinkOptions &options,
                                              std::string *error, bool privileged,
                                              KafkaLimits limits);

}  // namespace outbox
