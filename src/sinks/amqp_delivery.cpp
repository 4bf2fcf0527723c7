// Outcomes as the broker's answers arrive on the publishing channel:
// basic.ack and basic.nack (publisher confirms, one message or all up to a
// delivery tag), basic.return (a mandatory message no queue took, which
// always precedes that message's ack), and channel.close (the channel and
// every unconfirmed message on it are lost). A message's outcome settles
// its chain: the next message of its route and key becomes ready when it is
// delivered, and is held back (kNotSent) when it is not.
#include "sinks/amqp_errors.hpp"
#include "sinks/amqp_sink_class.hpp"

#include <cstdint>
#include <string>
#include <utility>

namespace outbox {

namespace {

constexpr const char *kHeldBack = "held back: an earlier event of its key failed in this batch";

std::string BytesText(amqp_bytes_t bytes) {
  return bytes.bytes == nullptr ? std::string()
                                : std::string(static_cast<const char *>(bytes.bytes), bytes.len);
}

}  // namespace

void AmqpSink::Settle(Batch *b, size_t i, DeliveryStatus status, std::string error, bool answered) {
  if (b->settled[i]) return;
  Delivery &d = b->out[i];
  d.status = status;
  d.error = std::move(error);
  d.answered_at_us = answered ? UnixNowUs() : 0;
  d.connection_lost = false;
  d.unsent = false;
  b->settled[i] = true;
  --b->unsettled;
}

// The later messages of i's chain were never sent (only a chain's head is
// ever on the wire): they wait behind i, without an attempt.
void AmqpSink::HoldChain(Batch *b, size_t i, const std::string &why) {
  for (size_t j = b->chain_next[i]; j < b->n; j = b->chain_next[j]) {
    Settle(b, j, DeliveryStatus::kNotSent, why, false);
  }
}

bool AmqpSink::OnChannelFrame(Batch *b, const amqp_frame_t &frame, std::string *error) {
  if (frame.frame_type == AMQP_FRAME_HEADER) {
    if (!b->pending_return || b->pending_return->have_header) return true;
    PendingReturn &r = *b->pending_return;
    r.have_header = true;
    r.body_left = frame.payload.properties.body_size;
    const auto *p = static_cast<const amqp_basic_properties_t *>(frame.payload.properties.decoded);
    if (p != nullptr && (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0) {
      const auto found = b->by_id.find(
          std::string_view(static_cast<const char *>(p->message_id.bytes), p->message_id.len));
      if (found != b->by_id.end()) {
        b->returned_status[found->second] = JudgeAmqpReturn(r.reply_code);
        b->returned[found->second] =
            "the broker returned the message as unroutable: " + AmqpReplyCodeName(r.reply_code) +
            ": " + r.reply_text + " (exchange \"" + options_.exchange + "\", routing key \"" +
            std::string(b->messages[found->second].target) + "\")";
      }
    }
    if (r.body_left == 0) b->pending_return.reset();
    return true;
  }
  if (frame.frame_type == AMQP_FRAME_BODY) {
    if (b->pending_return && b->pending_return->have_header) {
      PendingReturn &r = *b->pending_return;
      const uint64_t len = frame.payload.body_fragment.len;
      r.body_left = len >= r.body_left ? 0 : r.body_left - len;
      if (r.body_left == 0) b->pending_return.reset();
    }
    return true;
  }
  if (frame.frame_type != AMQP_FRAME_METHOD) return true;
  const amqp_method_t &m = frame.payload.method;
  switch (m.id) {
    case AMQP_BASIC_ACK_METHOD: {
      const auto *ack = static_cast<const amqp_basic_ack_t *>(m.decoded);
      Confirm(b, ack->delivery_tag, ack->multiple != 0, true);
      return true;
    }
    case AMQP_BASIC_NACK_METHOD: {
      const auto *nack = static_cast<const amqp_basic_nack_t *>(m.decoded);
      Confirm(b, nack->delivery_tag, nack->multiple != 0, false);
      return true;
    }
    case AMQP_BASIC_RETURN_METHOD: {
      const auto *ret = static_cast<const amqp_basic_return_t *>(m.decoded);
      PendingReturn r;
      r.reply_code = ret->reply_code;
      r.reply_text = BytesText(ret->reply_text);
      b->pending_return = std::move(r);
      return true;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
      const auto *close = static_cast<const amqp_channel_close_t *>(m.decoded);
      const uint16_t code = close->reply_code;
      const std::string text = BytesText(close->reply_text);
      CloseChannelOk(channel_);
      OnChannelClosed(b, code, text);
      *error = text;
      return false;
    }
    default:
      return true;  // channel.flow and the like: RabbitMQ does not send them to publishers
  }
}

void AmqpSink::Confirm(Batch *b, uint64_t tag, bool multiple, bool ack) {
  auto first = multiple ? b->unconfirmed.begin() : b->unconfirmed.find(tag);
  auto last = multiple ? b->unconfirmed.upper_bound(tag) : first;
  if (!multiple && first != b->unconfirmed.end()) ++last;
  for (auto it = first; it != last; ++it) {
    const size_t i = it->second;
    b->sent_at.erase(it->first);
    if (!ack) {
      // The broker took the message but a queue it was routed to could not
      // (full with x-overflow reject-publish, or unavailable): the target's
      // state, like an unroutable key, not the message's content.
      Settle(b, i, DeliveryStatus::kTargetRefused,
             "the broker refused the message (basic.nack): a queue for routing key \"" +
                 std::string(b->messages[i].target) +
                 "\" cannot take it (full with x-overflow reject-publish, or unavailable)",
             true);
      HoldChain(b, i, kHeldBack);
    } else if (!b->returned[i].empty()) {
      Settle(b, i, b->returned_status[i], std::move(b->returned[i]), true);
      HoldChain(b, i, kHeldBack);
    } else {
      Settle(b, i, DeliveryStatus::kDelivered, std::string(), true);
      const size_t next = b->chain_next[i];
      if (next < b->n) b->ready.push_back(next);
    }
  }
  b->unconfirmed.erase(first, last);
}

void AmqpSink::OnChannelClosed(Batch *b, uint16_t code, const std::string &text) {
  const std::string said = AmqpReplyCodeName(code) + ": " + text;
  const AmqpChannelRefusal refusal = JudgeAmqpChannelClose(code, text);
  if (refusal == AmqpChannelRefusal::kMessageTooLarge) {
    const std::optional<AmqpSizeRefusal> sizes = ParseAmqpSizeRefusal(text);
    max_body_ = sizes->max;
    AddLog(LogLevel::kInfo, "the broker at " + endpoint_ + " refused a message of " +
                                std::to_string(sizes->size) + " bytes (its max is " +
                                std::to_string(sizes->max) +
                                "): larger messages are refused without sending them");
    // The oldest unconfirmed message of that size is the one: the broker
    // handles a channel's publishes in order and stops at the first it
    // refuses. The others on the channel were lost with it.
    bool found = false;
    for (const auto &[tag, i] : b->unconfirmed) {
      if (found || b->body_size[i] != sizes->size) continue;
      found = true;
      Settle(b, i, DeliveryStatus::kRejected, "the broker refused the message: " + said, true);
      HoldChain(b, i, kHeldBack);
    }
    for (const auto &[tag, i] : b->unconfirmed) {
      if (b->settled[i]) continue;
      Settle(b, i, DeliveryStatus::kRetriable,
             "lost when the broker closed the channel over another message (" + said + ")", false);
      b->out[i].connection_lost = true;  // not its doing: tried alone before charged
      HoldChain(b, i, kHeldBack);
    }
    b->unconfirmed.clear();
    b->sent_at.clear();
    return;  // publishing goes on, on a new channel
  }
  // The exchange is missing or may not be written to (every message of this
  // sink would meet the same), or a state of the broker: nothing is the
  // events' fault, and nothing more is sent in this call.
  std::string reason =
      refusal == AmqpChannelRefusal::kSinkConfiguration
          ? "the broker refuses the sink's exchange \"" + options_.exchange + "\": " + said
          : "the broker closed the channel: " + said;
  reason = Masked(std::move(reason));
  NoteDown(reason);
  FailUnsettled(b, reason);
  b->unconfirmed.clear();
  b->sent_at.clear();
}

// Everything without an outcome: the first unsettled message of each chain
// (sent or about to be) is retriable; the rest of its chain, never sent,
// waits behind it.
void AmqpSink::FailUnsettled(Batch *b, const std::string &reason) noexcept {
  std::string held;
  try {
    held = "not sent: " + reason;
  } catch (...) {
  }
  for (size_t i = 0; i < b->n && b->unsettled > 0; ++i) {
    if (b->settled[i]) continue;
    try {
      Settle(b, i, DeliveryStatus::kRetriable, reason, false);
      HoldChain(b, i, held);
    } catch (...) {
      // Out of memory for the texts: the outcomes are what matters.
      b->out[i].status = DeliveryStatus::kRetriable;
      if (!b->settled[i]) {
        b->settled[i] = true;
        --b->unsettled;
      }
    }
  }
}

}  // namespace outbox
