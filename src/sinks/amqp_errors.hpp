// How the AMQP sink judges what the broker says when it refuses something:
// a channel closed over a publish, and the sizes a refusal of a too large
// message names. Plain functions of the reply's code and text, so that
// their table is tested on its own (test/unit/amqp_errors_test.cpp). No
// PostgreSQL header here, and no librabbitmq one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/sink.hpp"

namespace outbox {

// What a channel.close the broker sends while we publish says about the
// messages in flight on that channel (every one of them is lost with the
// channel unless already confirmed):
enum class AmqpChannelRefusal {
  // One message was refused for itself (406 PRECONDITION_FAILED "message
  // size N is larger than configured max size M"): that message is
  // rejected, the others were only in its way, and publishing goes on on a
  // new channel.
  kMessageTooLarge,
  // The sink's own configuration is refused (404 NOT_FOUND: the exchange
  // does not exist; 403 ACCESS_REFUSED: the user may not write to it). It
  // concerns every message the sink sends, so no event is charged for it:
  // all are retriable and the sink counts as down until it publishes again.
  kSinkConfiguration,
  // Anything else (a resource error, an internal error, a code we do not
  // know): retriable, as a passing state of the broker.
  kTransient,
};
AmqpChannelRefusal JudgeAmqpChannelClose(uint16_t reply_code, std::string_view reply_text);

// What a basic.return of a mandatory message says (its reply code): 312
// NO_ROUTE, no queue is bound for the routing key, and 313 NO_CONSUMERS are
// the target's state, not the message's: kTargetRefused, an attempt for the
// event, never a sign that the sink is down; 311 CONTENT_TOO_LARGE refuses
// the message itself (kRejected).
DeliveryStatus JudgeAmqpReturn(uint16_t reply_code);

// The two sizes of a refusal of a too large message ("... message size
// 2097152 is larger than configured max size 1048576"): the message's body
// size, then the broker's limit; nothing for any other text.
struct AmqpSizeRefusal {
  uint64_t size = 0;
  uint64_t max = 0;
};
std::optional<AmqpSizeRefusal> ParseAmqpSizeRefusal(std::string_view reply_text);

// "NOT_FOUND (404)": the name AMQP 0-9-1 gives a reply code, for messages.
std::string AmqpReplyCodeName(uint16_t reply_code);

}  // namespace outbox
