// How the Kafka sink judges librdkafka's error codes: whether a message
// failed for itself, for its topic, or for a state that passes. Plain
// functions of an error code, so that their tables are tested on their own
// (test/unit/kafka_sink_test.cpp). No PostgreSQL header here.
#pragma once

#include <string>

#include "core/sink.hpp"

namespace outbox {

// How the publisher should treat a librdkafka error code (rd_kafka_resp_err_t)
// that a message failed with: kRejected when the broker refused the message
// itself (or the produce request that carried it: too large, not authorised,
// invalid), kTargetRefused when the broker answered that its topic cannot
// take messages (unknown topic, not authorised for it), kDelivered for no
// error, kRetriable for everything else (broker down, timeouts, leader
// changes, purged).
DeliveryStatus ClassifyKafkaError(int err);

// "NAME: description", e.g. "MSG_SIZE_TOO_LARGE: Broker: Message size too large".
std::string KafkaErrorText(int err);

}  // namespace outbox
