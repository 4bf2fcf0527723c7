// The Kafka sink's judgement of librdkafka's error codes (kafka_errors.hpp).
#include "sinks/kafka_errors.hpp"

#include <librdkafka/rdkafka.h>

#include <string>

namespace outbox {

DeliveryStatus ClassifyKafkaError(int err) {
  switch (static_cast<rd_kafka_resp_err_t>(err)) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
      return DeliveryStatus::kDelivered;
    // The message itself (or the produce request that carried it, which
    // Kafka accepts or refuses as a whole) will never be accepted as is.
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:  // invalid topic name
    case RD_KAFKA_RESP_ERR__INVALID_ARG:     // ours: invalid topic name
    case RD_KAFKA_RESP_ERR_INVALID_MSG:      // CORRUPT_MESSAGE
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
      return DeliveryStatus::kRejected;
    // The broker answered that the topic cannot take messages: each event
    // counts an attempt (it may be created or granted before they run out:
    // outbox.max_attempts with backoff gives minutes), and the sink is not
    // down for it (its other topics flow).
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
      return DeliveryStatus::kTargetRefused;
    // Everything else may pass later: brokers down, timeouts, leader changes,
    // not enough replicas, purged, a fatal producer error (the next producer
    // retries).
    default:
      return DeliveryStatus::kRetriable;
  }
}

std::string KafkaErrorText(int err) {
  const auto code = static_cast<rd_kafka_resp_err_t>(err);
  std::string text(rd_kafka_err2name(code));
  text += ": ";
  text += rd_kafka_err2str(code);
  return text;
}

}  // namespace outbox
