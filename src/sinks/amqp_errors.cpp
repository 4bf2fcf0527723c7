// The AMQP sink's judgement of the broker's refusals (amqp_errors.hpp).
#include "sinks/amqp_errors.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

namespace {

// AMQP 0-9-1's reply codes (the specification's constants).
constexpr uint16_t kAccessRefused = 403;
constexpr uint16_t kNotFound = 404;
constexpr uint16_t kPreconditionFailed = 406;

// Reads the decimal number that follows `label` in `text`.
std::optional<uint64_t> NumberAfter(std::string_view text, std::string_view label) {
  const size_t at = text.find(label);
  if (at == std::string_view::npos) return std::nullopt;
  size_t i = at + label.size();
  uint64_t v = 0;
  const size_t start = i;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (i - start >= 19) return std::nullopt;  // more than fits; no broker says so
    v = v * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (i == start) return std::nullopt;
  return v;
}

}  // namespace

std::optional<AmqpSizeRefusal> ParseAmqpSizeRefusal(std::string_view reply_text) {
  // RabbitMQ (rabbit_channel:check_msg_size): "PRECONDITION_FAILED - message
  // size ~p is larger than configured max size ~p", and since 3.11 also
  // "... larger than max size ~p" for the hard limit.
  const std::optional<uint64_t> size = NumberAfter(reply_text, "message size ");
  if (!size) return std::nullopt;
  std::optional<uint64_t> max = NumberAfter(reply_text, "larger than configured max size ");
  if (!max) max = NumberAfter(reply_text, "larger than max size ");
  if (!max || *size <= *max) return std::nullopt;
  return AmqpSizeRefusal{*size, *max};
}

AmqpChannelRefusal JudgeAmqpChannelClose(uint16_t reply_code, std::string_view reply_text) {
  if (reply_code == kPreconditionFailed && ParseAmqpSizeRefusal(reply_text)) {
    return AmqpChannelRefusal::kMessageTooLarge;
  }
  if (reply_code == kNotFound || reply_code == kAccessRefused) {
    return AmqpChannelRefusal::kSinkConfiguration;
  }
  return AmqpChannelRefusal::kTransient;
}

DeliveryStatus JudgeAmqpReturn(uint16_t reply_code) {
  constexpr uint16_t kContentTooLarge = 311;
  return reply_code == kContentTooLarge ? DeliveryStatus::kRejected
                                        : DeliveryStatus::kTargetRefused;
}

std::string AmqpReplyCodeName(uint16_t reply_code) {
  const char *name = nullptr;
  switch (reply_code) {
    case 200:
      name = "REPLY_SUCCESS";
      break;
    case 311:
      name = "CONTENT_TOO_LARGE";
      break;
    case 312:
      name = "NO_ROUTE";
      break;
    case 313:
      name = "NO_CONSUMERS";
      break;
    case 320:
      name = "CONNECTION_FORCED";
      break;
    case 402:
      name = "INVALID_PATH";
      break;
    case 403:
      name = "ACCESS_REFUSED";
      break;
    case 404:
      name = "NOT_FOUND";
      break;
    case 405:
      name = "RESOURCE_LOCKED";
      break;
    case 406:
      name = "PRECONDITION_FAILED";
      break;
    case 501:
      name = "FRAME_ERROR";
      break;
    case 502:
      name = "SYNTAX_ERROR";
      break;
    case 503:
      name = "COMMAND_INVALID";
      break;
    case 504:
      name = "CHANNEL_ERROR";
      break;
    case 505:
      name = "UNEXPECTED_FRAME";
      break;
    case 506:
      name = "RESOURCE_ERROR";
      break;
    case 530:
      name = "NOT_ALLOWED";
      break;
    case 540:
      name = "NOT_IMPLEMENTED";
      break;
    case 541:
      name = "INTERNAL_ERROR";
      break;
    default:
      break;
  }
  const std::string code = std::to_string(reply_code);
  return name != nullptr ? std::string(name) + " (" + code + ")" : "reply code " + code;
}

}  // namespace outbox
