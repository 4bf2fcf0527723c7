// Details of the Kafka sink that its unit tests check directly. The sink
// itself is built with MakeKafkaSink (below). No PostgreSQL header here.
#pragma once

#include <string>
#include <string_view>

#include "core/names.hpp"  // IsValidKafkaTopic
#include "core/sink.hpp"

namespace outbox {

// How the publisher should treat a librdkafka error code (rd_kafka_resp_err_t)
// that a message failed with: kRejected when the broker refused the message
// itself (or the produce request that carried it: too large, not authorised,
// invalid), kRetriable for everything else (broker down, timeouts, leader
// changes, unknown topic, purged).
DeliveryStatus ClassifyKafkaError(int err);

// "NAME: description", e.g. "MSG_SIZE_TOO_LARGE: Broker: Message size too large".
std::string KafkaErrorText(int err);

// How long the sink waits for a batch's delivery reports before it gives the
// batch up: message.timeout.ms plus margin_ms, or unlimited_ms plus margin_ms
// when message.timeout.ms is 0 (librdkafka's "no limit"). librdkafka reports
// every message by message.timeout.ms, so the margin only matters when a
// report goes astray or the limit is 0. MakeKafkaSink uses these defaults;
// tests shorten them to reach a deadline in seconds.
struct KafkaWaitLimits {
  int margin_ms = 5000;
  int unlimited_ms = 300000;
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
                                              KafkaWaitLimits limits);

}  // namespace outbox
