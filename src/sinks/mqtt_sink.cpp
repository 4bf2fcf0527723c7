// The MQTT sink: a batch of messages published over its libmosquitto
// clients (mqtt_connection.cpp; several connections used as one,
// mqtt_sink_class.hpp) at QoS 1 or 2, each judged when its acknowledgement
// comes (PUBACK, or PUBREC then PUBCOMP). The class is in mqtt_sink_class.hpp.
//
// A message is delivered only when the broker acknowledged it: PUBACK (QoS
// 1) or PUBCOMP (QoS 2) with a reason code below 0x80. A reason code from
// 0x80 on refuses that message alone (MqttReasonOutcome).
//
// Pipelined, per-key ordered (keyed_sink.hpp, keyed_sends.hpp): every
// message that may go is sent at once (up to kMaxInFlight over all open
// Sends, spread over the sink's connections, a key's always on one),
// without waiting for the acknowledgements before it, except that a topic
// and key has at most one message unacknowledged: its next message
// goes when the previous one was acknowledged, and not at all when that one
// failed (kNotSent: it waits behind it). So no refusal, loss or resend can
// let a later event of a key overtake an earlier one. Messages without a
// key have no order among themselves. Send returns once the messages are
// handed over; their acknowledgements are read by CollectFor, Collect and
// Poll (mqtt_delivery.cpp), so a broker that stops answering delays only
// its own Sends.
//
// Sessions are clean (MQTT 5: clean start, no session expiry): the broker
// keeps nothing of a client once it is gone, and libmosquitto never sends a
// message again by itself (the client is thrown away with its connection).
// Whatever has no acknowledgement when the connection is lost, or when its
// acknowledgement timeout passes, is kRetriable and is sent again by a later
// Send on a new connection: at least once. A message that waited in vain,
// and a Send given up (interrupted, abandoned) with messages in flight, drop
// the connection: an acknowledgement can only ever be matched to the message
// it answers, since packet identifiers (16 bits, reused) never name two
// messages on one connection (KeyedSends::MarkSent refuses a second).
#include "sinks/mqtt_sink.hpp"
#include "sinks/mqtt_sink_class.hpp"
#include "sinks/mqtt_library.hpp"

#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox {

namespace {

uint64_t RandomNonce() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

std::vector<std::string> Secrets(const MqttOptions &options) {
  std::vector<std::string> secrets;
  if (options.password) secrets.push_back(*options.password);
  return secrets;
}

}  // namespace

MqttSink::MqttSink(const std::string &name, MqttOptions options)
    : KeyedSink("MQTT sink log line(s)", Secrets(options), options.connect_timeout_ms,
                options.ack_timeout_ms),
      name_(name),
      options_(std::move(options)),
      nonce_(RandomNonce()) {}

MqttSink::~MqttSink() { Disconnect(); }

// A topic as an error may show it: its first 100 bytes, anything but
// printable ASCII as '?'.
std::string MqttSink::ShownTopic(std::string_view topic) {
  std::string shown = "\"";
  for (const char c : topic.substr(0, 100)) {
    const auto u = static_cast<unsigned char>(c);
    shown.push_back(u < 0x20 || u >= 0x7f ? '?' : c);
  }
  return shown + (topic.size() > 100 ? "...\"" : "\"");
}

// Sends what may go now, in order, until kMaxInFlight are in flight.
void MqttSink::SendReady() {
  SendRef ref;
  while (!links_.empty() && connected_ && !lost_ && sends_.in_flight() < kMaxInFlight &&
         sends_.NextReady(&ref)) {
    if (!SendMessage(ref)) return;
  }
}

// Sends message `ref`, or settles it when it cannot be sent as it is. False
// when the connection failed (everything outstanding is then settled).
bool MqttSink::SendMessage(SendRef ref) {
  const OutMessage &m = sends_.Message(ref);
  if (std::optional<std::string> bad = CheckMqttTopic(m.target)) {
    sends_.Settle(ref, DeliveryStatus::kTargetRefused,
                  "cannot publish to topic " + ShownTopic(m.target) + ": " + *bad, false);
    return true;
  }
  if (std::optional<std::string> bad =
          BuildMqttMessage(m, options_.protocol == 5, &body_scratch_, &message_)) {
    sends_.Settle(ref, DeliveryStatus::kRejected, std::move(*bad), false);
    return true;
  }
  topic_.assign(m.target);
  const Link &link = links_[LinkFor(m)];
  int mid = 0;
  const int rc = Publish5(link.mosq, topic_, message_, m.id, &mid);
  if (rc == MOSQ_ERR_SUCCESS) {
    if (sends_.MarkSent(ref, WireId(link.index, mid),
                        Clock::now() + Millis(options_.ack_timeout_ms))) {
      return true;
    }
    // libmosquitto gave it the packet identifier of a message still
    // unacknowledged: an acknowledgement could not be told apart.
    const std::string reason = "packet identifier " + std::to_string(mid) + " reused on " +
                               Where() + " while in flight: the connection starts afresh";
    sends_.Settle(ref, DeliveryStatus::kRetriable, reason, false);
    LoseConnection(reason, KeyedSends::Loss::kNotAMessage);
    return false;
  }
  if (rc == MOSQ_ERR_NOMEM) throw std::bad_alloc();
  if (rc == MOSQ_ERR_OVERSIZE_PACKET || rc == MOSQ_ERR_PAYLOAD_SIZE) {
    sends_.Settle(ref, DeliveryStatus::kRejected,
                  std::string("too large for the broker: ") + mosquitto_strerror(rc), false);
    return true;
  }
  if (rc == MOSQ_ERR_MALFORMED_UTF8 || rc == MOSQ_ERR_INVAL || rc == MOSQ_ERR_DUPLICATE_PROPERTY ||
      rc == MOSQ_ERR_NOT_SUPPORTED) {
    sends_.Settle(ref, DeliveryStatus::kRejected,
                  std::string("libmosquitto refused it: ") + mosquitto_strerror(rc), false);
    return true;
  }
  if (rc == MOSQ_ERR_QOS_NOT_SUPPORTED) {
    // The broker's CONNACK caps QoS below the sink's: every message would
    // fail alike, so the sink is down, not the event at fault.
    const std::string reason =
        Where() + " does not take QoS " + std::to_string(options_.qos) + " (option \"qos\")";
    sends_.Settle(ref, DeliveryStatus::kRetriable, "not sent: " + reason, false);
    LoseConnection(reason, KeyedSends::Loss::kNotAMessage);
    return false;
  }
  const std::string reason =
      "cannot publish to " + Where() + ": " + std::string(mosquitto_strerror(rc));
  sends_.Settle(ref, DeliveryStatus::kRetriable, "not sent: " + reason, false);
  sends_.MarkLost(ref);
  LoseConnection(reason, KeyedSends::Loss::kMaybeAMessage);
  return false;
}

size_t MqttSink::LinkFor(const OutMessage &m) {
  if (m.has_key) return std::hash<std::string_view>{}(m.key) % links_.size();
  const size_t link = next_link_;
  next_link_ = (next_link_ + 1) % links_.size();
  return link;
}

// "idle" before the first batch; "connected" while the connection is up and
// the broker acknowledges; "connecting" while a connection is being made;
// "down" once a batch found the broker unreachable or silent, until a
// message is acknowledged.
std::string MqttSink::State() const {
  if (down()) return "down";
  if (links_.empty()) return ever_connected_ ? "connecting" : "idle";
  return connected_ ? "connected" : "connecting";
}

std::unique_ptr<Sink> MakeMqttSink(const std::string &name, const SinkOptions &options,
                                   std::string *error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  try {
    // The same checks create_sink() made, so both agree on what is valid.
    MqttOptions parsed;
    if (std::optional<std::string> invalid = ParseMqttOptions(options, &parsed)) {
      *error = std::move(*invalid);
      return nullptr;
    }
    return std::make_unique<MqttSink>(name, std::move(parsed));
  } catch (...) {
    DescribeCurrentException(error);
  }
  return nullptr;
}

}  // namespace outbox
