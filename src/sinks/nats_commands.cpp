// What the NATS sink sends: each message as a core NATS message to its
// subject, with its headers (nats_headers.hpp), its body (the payload, or
// the CloudEvent's data in binary mode) and a reply subject of its own under
// the sink's inbox, where JetStream sends its PubAck; and, after "no
// responders", a lookup of the streams that capture a subject. Runs on the
// owner's thread only.
#include "sinks/nats_sink_class.hpp"

#include <nats/nats.h>

#include <climits>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/message_format.hpp"
#include "sinks/nats_headers.hpp"

namespace outbox {

namespace {

// JetStream's API subject listing the streams whose subjects overlap one.
constexpr const char *kStreamNamesSubject = "$JS.API.STREAM.NAMES";

// A subject as an error may show it: its first 100 bytes, anything but
// printable ASCII as '?'.
std::string Shown(std::string_view subject) {
  std::string shown;
  for (char c : subject.substr(0, 100)) {
    const auto u = static_cast<unsigned char>(c);
    shown.push_back(u < 0x20 || u >= 0x7f ? '?' : c);
  }
  if (subject.size() > 100) shown += "...";
  return "\"" + shown + "\"";
}

}  // namespace

// Sends what may go now, in order, until kMaxInFlight are in flight.
void NatsSink::SendReady() {
  SendRef ref;
  while (nc_ != nullptr && sends_.in_flight() < kMaxInFlight && sends_.NextReady(&ref)) {
    if (!SendMessage(ref)) return;
  }
}

// Sends message `ref`, or settles it when it cannot be sent as it is. False
// when the connection failed (everything outstanding is then settled).
bool NatsSink::SendMessage(SendRef ref) {
  const OutMessage &m = sends_.Message(ref);
  if (!HeaderedFormat(m.format)) {
    sends_.Settle(
        ref, DeliveryStatus::kRejected,
        "the " + std::string(MessageFormatName(m.format)) +
            " format cannot be sent to NATS (routes to NATS sinks take raw or cloudevents)",
        false);
    return true;
  }
  if (std::optional<std::string> bad = CheckNatsSubject(m.target)) {
    sends_.Settle(ref, DeliveryStatus::kTargetRefused,
                  "cannot publish to subject " + Shown(m.target) + ": " + *bad, false);
    return true;
  }
  if (std::optional<std::string> bad = NatsHeaders(m, &header_scratch_, &headers_)) {
    sends_.Settle(ref, DeliveryStatus::kRejected, std::move(*bad), false);
    return true;
  }
  const std::string_view body = HeaderedBody(m, CloudEventsMode::kBinary, &body_scratch_);
  const uint64_t reply = next_reply_++;
  natsStatus status = NATS_OK;
  subject_.assign(m.target);
  if (PublishRaw(subject_, reply, body, headers_, &status)) {
    // Reply ids are never reused: MarkSent cannot refuse it.
    sends_.MarkSent(ref, reply, Clock::now() + Millis(options_.ack_timeout_ms));
    return true;
  }
  if (status == NATS_MAX_PAYLOAD) {
    // libnats compares headers plus body with the max_payload the server
    // announced: the server would close the connection over it.
    sends_.Settle(ref, DeliveryStatus::kRejected, "too large for the server: " + LastErrorText(),
                  false);
    return true;
  }
  if (status == NATS_NO_MEMORY) throw std::bad_alloc();
  if (status == NATS_INVALID_ARG || status == NATS_INVALID_SUBJECT) {
    sends_.Settle(ref, DeliveryStatus::kRejected, "libnats refused it: " + LastErrorText(), false);
    return true;
  }
  const std::string reason =
      ConnectionError("cannot publish to " + servers_text_ + ": " + LastErrorText());
  sends_.Settle(ref, DeliveryStatus::kRetriable, "not sent: " + reason, false);
  sends_.MarkLost(ref);
  LoseConnection(reason, KeyedSends::Loss::kMaybeAMessage);
  return false;
}

// After "no responders" to message `ref`: asks JetStream which streams
// capture its subject (one lookup per subject per Send), unless that is
// known already. False when the connection failed.
bool NatsSink::SendLookup(SendRef ref) {
  const std::string_view subject = sends_.Message(ref).target;
  Lookup lookup;
  lookup.ticket = ref.ticket;
  lookup.subject.assign(subject);
  lookup.reply = next_reply_++;
  lookup.deadline = Clock::now() + Millis(options_.ack_timeout_ms);
  lookup.waiting.push_back(ref);
  lookups_.push_back(std::move(lookup));
  sends_.Unbind(ref);  // its own answer came: the lookup's settles it
  body_scratch_ = "{\"subject\":";
  AppendJsonString(subject, &body_scratch_);
  body_scratch_ += "}";
  headers_.clear();
  natsStatus status = NATS_OK;
  if (PublishRaw(kStreamNamesSubject, lookups_.back().reply, body_scratch_, headers_, &status)) {
    return true;
  }
  if (status == NATS_NO_MEMORY) throw std::bad_alloc();
  lookups_.back().done = true;
  const std::string reason =
      ConnectionError("cannot ask " + servers_text_ + " for streams: " + LastErrorText());
  LoseConnection(reason, KeyedSends::Loss::kMaybeAMessage);
  return false;
}

// Publishes one message with a reply subject under the inbox; false with
// *status when libnats refuses it.
bool NatsSink::PublishRaw(const std::string &subject, uint64_t reply, std::string_view body,
                          const std::vector<Header> &headers, natsStatus *status) {
  if (body.size() > static_cast<size_t>(INT_MAX)) {
    *status = NATS_MAX_PAYLOAD;
    return false;
  }
  reply_ = inbox_prefix_ + std::to_string(reply);
  natsMsg *raw = nullptr;
  *status = natsMsg_Create(&raw, subject.c_str(), reply_.c_str(), NonNull(body),
                           static_cast<int>(body.size()));
  if (*status != NATS_OK) return false;
  const NatsMsgPtr msg(raw);
  for (const Header &h : headers) {
    // Names and values never hold NUL here (nats_headers.hpp): as C
    // strings they are whole.
    name_.assign(h.name);
    value_.assign(h.value);
    *status = natsMsgHeader_Add(msg.get(), name_.c_str(), value_.c_str());
    if (*status != NATS_OK) return false;
  }
  *status = natsConnection_PublishMsg(nc_, msg.get());
  return *status == NATS_OK;
}

}  // namespace outbox
