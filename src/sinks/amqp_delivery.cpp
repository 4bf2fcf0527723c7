// Outcomes as the broker's answers arrive on the connection: basic.ack and
// basic.nack (publisher confirms, one message or all up to a delivery tag),
// basic.return (a mandatory message no queue took, which always precedes
// that message's ack), channel.close (the channel and every unconfirmed
// message on it are lost), and what comes on channel 0. A message's outcome
// settles its chain (keyed_sends.hpp): the next message of its route and key
// becomes ready when it is delivered, and is held back (kNotSent) when it is
// not. Runs on the owner's thread only, from Step.
#include "sinks/amqp_errors.hpp"
#include "sinks/amqp_sink_class.hpp"

#include <cstdint>
#include <string>
#include <utility>

namespace outbox {

namespace {

std::string BytesText(amqp_bytes_t bytes) {
  return bytes.bytes == nullptr ? std::string()
                                : std::string(static_cast<const char *>(bytes.bytes), bytes.len);
}

}  // namespace

// False when the connection is gone (what was on it is settled).
bool AmqpSink::OnFrame(const amqp_frame_t &frame) {
  if (frame.channel == 0) {
    if (frame.frame_type != AMQP_FRAME_METHOD) return true;
    std::string error;
    if (OnConnectionMethod(frame.payload.method, &error)) return true;
    if (sends_.HasOutstanding()) {
      LoseConnection(error);
    } else {
      AddLog(LogLevel::kInfo, "the connection to " + endpoint_ + " was closed (" + error +
                                  "); the next batch reconnects");
      Disconnect();
    }
    return false;
  }
  // A frame of a channel closed earlier is not ours.
  if (channel_ != 0 && frame.channel == channel_) OnChannelFrame(frame);
  return conn_ != nullptr;
}

void AmqpSink::OnChannelFrame(const amqp_frame_t &frame) {
  if (frame.frame_type == AMQP_FRAME_HEADER) {
    if (!pending_return_ || pending_return_->have_header) return;
    PendingReturn &r = *pending_return_;
    r.have_header = true;
    r.body_left = frame.payload.properties.body_size;
    const auto *p = static_cast<const amqp_basic_properties_t *>(frame.payload.properties.decoded);
    if (p != nullptr && (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0) {
      const auto found = tag_of_id_.find(
          std::string_view(static_cast<const char *>(p->message_id.bytes), p->message_id.len));
      SendRef ref;
      if (found != tag_of_id_.end() && sends_.FindSent(WireId(found->second), &ref)) {
        Unconfirmed &u = unconfirmed_.at(found->second);
        u.returned = true;
        u.returned_status = JudgeAmqpReturn(r.reply_code);
        u.returned_why =
            "the broker returned the message as unroutable: " + AmqpReplyCodeName(r.reply_code) +
            ": " + r.reply_text + " (exchange \"" + options_.exchange + "\", routing key \"" +
            std::string(sends_.Message(ref).target) + "\")";
      }
    }
    if (r.body_left == 0) pending_return_.reset();
    return;
  }
  if (frame.frame_type == AMQP_FRAME_BODY) {
    if (pending_return_ && pending_return_->have_header) {
      PendingReturn &r = *pending_return_;
      const uint64_t len = frame.payload.body_fragment.len;
      r.body_left = len >= r.body_left ? 0 : r.body_left - len;
      if (r.body_left == 0) pending_return_.reset();
    }
    return;
  }
  if (frame.frame_type != AMQP_FRAME_METHOD) return;
  const amqp_method_t &m = frame.payload.method;
  switch (m.id) {
    case AMQP_BASIC_ACK_METHOD: {
      const auto *ack = static_cast<const amqp_basic_ack_t *>(m.decoded);
      Confirm(ack->delivery_tag, ack->multiple != 0, true);
      return;
    }
    case AMQP_BASIC_NACK_METHOD: {
      const auto *nack = static_cast<const amqp_basic_nack_t *>(m.decoded);
      Confirm(nack->delivery_tag, nack->multiple != 0, false);
      return;
    }
    case AMQP_BASIC_RETURN_METHOD: {
      const auto *ret = static_cast<const amqp_basic_return_t *>(m.decoded);
      PendingReturn r;
      r.reply_code = ret->reply_code;
      r.reply_text = BytesText(ret->reply_text);
      pending_return_ = std::move(r);
      return;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
      const auto *close = static_cast<const amqp_channel_close_t *>(m.decoded);
      const uint16_t code = close->reply_code;
      const std::string text = BytesText(close->reply_text);
      CloseChannelOk(channel_);
      OnChannelClosed(code, text);
      return;
    }
    default:
      return;  // channel.flow and the like: RabbitMQ does not send them to publishers
  }
}

// Settles the message under `tag`, or (multiple) every one up to it. A tag
// whose Send was given up is only forgotten.
void AmqpSink::Confirm(uint64_t tag, bool multiple, bool ack) {
  auto first = multiple ? unconfirmed_.begin() : unconfirmed_.find(tag);
  auto last = multiple ? unconfirmed_.upper_bound(tag) : first;
  if (!multiple && first != unconfirmed_.end()) ++last;
  for (auto it = first; it != last; ++it) {
    Unconfirmed &u = it->second;
    tag_of_id_.erase(u.id);
    SendRef ref;
    if (!sends_.FindSent(WireId(it->first), &ref)) continue;
    if (!ack) {
      // The broker took the message but a queue it was routed to could not
      // (full with x-overflow reject-publish, or unavailable): the target's
      // state, like an unroutable key, not the message's content.
      sends_.Settle(ref, DeliveryStatus::kTargetRefused,
                    "the broker refused the message (basic.nack): a queue for routing key \"" +
                        std::string(sends_.Message(ref).target) +
                        "\" cannot take it (full with x-overflow reject-publish, or unavailable)",
                    true);
    } else if (u.returned) {
      sends_.Settle(ref, u.returned_status, std::move(u.returned_why), true);
    } else {
      NoteUp();
      sends_.Settle(ref, DeliveryStatus::kDelivered, std::string(), true);
    }
  }
  if (first != last) progress_ = Clock::now();
  unconfirmed_.erase(first, last);
}

// The broker closed the publishing channel (CloseChannelOk was sent):
// every message unconfirmed on it is lost with it.
void AmqpSink::OnChannelClosed(uint16_t code, const std::string &text) {
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
    for (const auto &[tag, u] : unconfirmed_) {
      SendRef ref;
      if (!sends_.FindSent(WireId(tag), &ref)) continue;
      if (!found && u.body_size == sizes->size) {
        found = true;
        sends_.Settle(ref, DeliveryStatus::kRejected, "the broker refused the message: " + said,
                      true);
      } else {
        sends_.Settle(ref, DeliveryStatus::kRetriable,
                      "lost when the broker closed the channel over another message (" + said + ")",
                      false);
      }
    }
    tag_of_id_.clear();
    unconfirmed_.clear();
    pending_return_.reset();
    return;  // publishing goes on, on a new channel (SendReady opens it)
  }
  // The exchange is missing or may not be written to (every message of this
  // sink would meet the same), or a state of the broker: nothing is the
  // events' fault, and nothing more is sent until a new Send opens a
  // channel.
  std::string reason =
      refusal == AmqpChannelRefusal::kSinkConfiguration
          ? "the broker refuses the sink's exchange \"" + options_.exchange + "\": " + said
          : "the broker closed the channel: " + said;
  reason = Masked(std::move(reason));
  sends_.FailOutstanding(reason);
  NoteDown(reason);
  tag_of_id_.clear();
  unconfirmed_.clear();
  pending_return_.reset();
}

}  // namespace outbox
