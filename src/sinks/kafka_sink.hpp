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

}  // namespace outbox
