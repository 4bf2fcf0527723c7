// Details of the Kafka sink that its unit tests check directly. The sink
// itself is built with MakeKafkaSink (sink.hpp). No PostgreSQL header here.
#pragma once

#include <string>
#include <string_view>

#include "core/names.hpp"  // IsValidKafkaTopic
#include "sinks/sink.hpp"

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
std::unique_ptr<Sink> MakeKafkaSinkWithLimits(const std::string &name, const SinkOptions &options,
                                              std::string *error, bool privileged,
                                              KafkaWaitLimits limits);

}  // namespace outbox
