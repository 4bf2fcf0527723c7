// The MQTT sink: a batch of messages published over one libmosquitto client
// (mqtt_connection.cpp) at QoS 1 or 2, each judged when its acknowledgement
// comes (PUBACK, or PUBREC then PUBCOMP). The class is in mqtt_sink_class.hpp.
//
// A message is delivered only when the broker acknowledged it: PUBACK (QoS
// 1) or PUBCOMP (QoS 2) with a reason code below 0x80. A reason code from
// 0x80 on refuses that message alone (MqttReasonOutcome).
//
// Pipelined, per-key ordered: every message that may go is sent at once (up
// to kMaxInFlight), without waiting for the acknowledgements before it,
// except that a topic and key has at most one message unacknowledged: its
// next message goes when the previous one was acknowledged, and not at all
// when that one failed (kNotSent: it waits behind it). So no refusal, loss
// or resend can let a later event of a key overtake an earlier one.
// Messages without a key have no order among themselves.
//
// Sessions are clean (MQTT 5: clean start, no session expiry): the broker
// keeps nothing of a client once it is gone, and libmosquitto never sends a
// message again by itself (the client is thrown away with its connection).
// Whatever has no acknowledgement when the connection is lost, when its
// acknowledgement timeout passes, or when the call is interrupted is
// kRetriable and is sent again by a later call on a new connection: at
// least once. And since each call ends with every message it sent either
// acknowledged or its connection dropped (`unsure_`), an acknowledgement
// can only ever be matched to a message of the call that sent it: packet
// identifiers, 16 bits and reused, never name two messages at once.
#include "sinks/mqtt_sink.hpp"
#include "sinks/mqtt_sink_class.hpp"
#include "sinks/mqtt_library.hpp"
#include "sinks/sigpipe_guard.hpp"

#include <algorithm>
#include <map>
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

// Shorter secrets are not masked: they could not be told apart from
// ordinary words. Brokers never echo a password; the masking only guards
// against a text we did not foresee.
constexpr size_t kMinMaskedSecret = 4;

uint64_t RandomNonce() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// A topic as an error may show it: its first 100 bytes, anything but
// printable ASCII as '?'.
std::string ShownTopic(std::string_view topic) {
  std::string shown = "\"";
  for (const char c : topic.substr(0, 100)) {
    const auto u = static_cast<unsigned char>(c);
    shown.push_back(u < 0x20 || u >= 0x7f ? '?' : c);
  }
  return shown + (topic.size() > 100 ? "...\"" : "\"");
}

}  // namespace

MqttSink::MqttSink(const std::string &name, MqttOptions options)
    : name_(name),
      options_(std::move(options)),
      client_id_(MqttClientId(options_.client_id, RandomNonce())) {}

MqttSink::~MqttSink() { Disconnect(); }

void MqttSink::Publish(const OutMessage *messages, size_t n, Delivery *out,
                       InterruptCheck interrupted) {
  if (n == 0) return;
  const SigpipeGuard sigpipe_guard;
  messages_ = messages;
  out_ = out;
  n_ = n;
  settled_count_ = 0;
  in_flight_ = 0;
  slots_.clear();  // FailRest trusts slots_ only when it has one slot per message
  try {
    slots_.assign(n, Slot());
    PublishBatch(interrupted);
  } catch (const std::bad_alloc &) {
    // What was sent may still be acknowledged, but this call can no longer
    // keep track of it; a fresh connection starts clean.
    Disconnect();
    FailRest("out of memory");
  } catch (...) {
    Disconnect();
    FailRest("unexpected error");  // only `interrupted` could throw anything else
  }
  if (unsure_) Disconnect();
  messages_ = nullptr;
  out_ = nullptr;
  n_ = 0;
  ready_.clear();
  flight_order_.clear();
  by_mid_.clear();
}

void MqttSink::PublishBatch(InterruptCheck interrupted) {
  ready_.clear();
  flight_order_.clear();
  by_mid_.clear();
  answered_ = false;
  unsure_ = false;
  callback_failed_ = false;
  if (interrupted != nullptr && interrupted()) {
    FailRest("interrupted");
    return;
  }
  std::string error;
  if (!EnsureConnection(interrupted, &error)) {
    NoteDown(error);
    FailRest(error);
    return;
  }
  Chain();
  Clock::time_point checked = Clock::now();
  while (!Done()) {
    SendReady();
    if (Done()) break;
    if (in_flight_ == 0 && ready_.empty()) {
      // Cannot happen: every unsettled message is in flight, ready, or
      // behind one of those. Never wait for nothing.
      FailRest("not sent: lost track of it (a bug in the MQTT sink)");
      break;
    }
    int64_t wait = kWaitSliceMs;
    if (!flight_order_.empty() && !slots_[flight_order_.front()].settled) {
      const auto left =
          std::chrono::duration_cast<Millis>(slots_[flight_order_.front()].deadline - Clock::now())
              .count();
      wait = std::clamp<int64_t>(left + 1, 0, kWaitSliceMs);
    }
    const bool alive = Drive(wait);
    if (callback_failed_) throw std::bad_alloc();
    if (!alive) {
      LoseConnection(lost_reason_.empty() ? "the connection to " + Where() + " was lost"
                                          : lost_reason_);
      break;
    }
    Expire(Clock::now());
    if (unsure_) break;  // lost or timed out: whatever is unsettled was settled
    if (interrupted != nullptr && Clock::now() - checked >= Millis(kWaitSliceMs)) {
      checked = Clock::now();
      if (!Done() && interrupted()) {
        unsure_ = unsure_ || in_flight_ > 0;
        FailRest("interrupted");
        return;
      }
    }
  }
}

// Links each keyed message to the next one of its topic and key, and makes
// ready the first of each and every message without a key, in order.
void MqttSink::Chain() {
  std::map<std::pair<std::string_view, std::string_view>, size_t> last_of_key;
  for (size_t i = 0; i < n_; ++i) {
    const OutMessage &m = messages_[i];
    if (m.has_key) {
      const auto found = last_of_key.find({m.target, m.key});
      if (found != last_of_key.end()) {
        slots_[found->second].next = i;
        found->second = i;
        continue;
      }
      last_of_key.emplace(std::make_pair(m.target, m.key), i);
    }
    ready_.push_back(i);
  }
}

// Gives message i its outcome. Delivered: its key's next message may go.
// Anything else: its key's later messages of this call wait behind it
// (kNotSent), never sent.
void MqttSink::Settle(size_t i, DeliveryStatus status, std::string error, bool answered) {
  Slot &slot = slots_[i];
  if (slot.settled) return;
  slot.settled = true;
  ++settled_count_;
  if (slot.in_flight) {
    slot.in_flight = false;
    --in_flight_;
  }
  out_[i].status = status;
  out_[i].error = std::move(error);
  out_[i].answered_at_us = answered ? UnixNowUs() : 0;
  size_t next = slot.next;
  if (status == DeliveryStatus::kDelivered) {
    if (next != kNone) ready_.push_back(next);
    return;
  }
  for (; next != kNone; next = slots_[next].next) {
    Slot &behind = slots_[next];
    if (behind.settled) continue;
    behind.settled = true;
    ++settled_count_;
    out_[next] = Delivery{DeliveryStatus::kNotSent,
                          "held back: an earlier event of its key failed in this batch", 0};
  }
}

void MqttSink::FailRest(const std::string &reason) noexcept {
  const bool tracked = slots_.size() == n_;
  for (size_t i = 0; i < n_; ++i) {
    if (tracked && slots_[i].settled) continue;
    Delivery &d = out_[i];
    d.status = DeliveryStatus::kRetriable;
    d.answered_at_us = 0;
    try {
      d.error = reason;
    } catch (...) {
      d.error.clear();
    }
    if (tracked) slots_[i].settled = true;
  }
  settled_count_ = n_;
}

// Sends what may go now, in order, until kMaxInFlight are in flight.
void MqttSink::SendReady() {
  while (!ready_.empty() && in_flight_ < kMaxInFlight) {
    const size_t i = ready_.front();
    ready_.pop_front();
    if (!SendMessage(i)) return;
  }
}

// Sends message i, or settles it when it cannot be sent as it is. False
// when the connection failed (everything unsettled is then settled).
bool MqttSink::SendMessage(size_t i) {
  const OutMessage &m = messages_[i];
  if (std::optional<std::string> bad = CheckMqttTopic(m.target)) {
    Settle(i, DeliveryStatus::kTargetRefused,
           "cannot publish to topic " + ShownTopic(m.target) + ": " + *bad, false);
    return true;
  }
  if (std::optional<std::string> bad =
          BuildMqttMessage(m, options_.protocol == 5, &body_scratch_, &message_)) {
    Settle(i, DeliveryStatus::kRejected, std::move(*bad), false);
    return true;
  }
  topic_.assign(m.target);
  int mid = 0;
  const int rc = Publish5(topic_, message_, m.id, &mid);
  if (rc == MOSQ_ERR_SUCCESS) {
    Slot &slot = slots_[i];
    slot.in_flight = true;
    slot.deadline = Clock::now() + Millis(options_.ack_timeout_ms);
    ++in_flight_;
    flight_order_.push_back(i);
    by_mid_[mid] = i;
    return true;
  }
  if (rc == MOSQ_ERR_NOMEM) throw std::bad_alloc();
  if (rc == MOSQ_ERR_OVERSIZE_PACKET || rc == MOSQ_ERR_PAYLOAD_SIZE) {
    Settle(i, DeliveryStatus::kRejected,
           std::string("too large for the broker: ") + mosquitto_strerror(rc), false);
    return true;
  }
  if (rc == MOSQ_ERR_MALFORMED_UTF8 || rc == MOSQ_ERR_INVAL || rc == MOSQ_ERR_DUPLICATE_PROPERTY ||
      rc == MOSQ_ERR_NOT_SUPPORTED) {
    Settle(i, DeliveryStatus::kRejected,
           std::string("libmosquitto refused it: ") + mosquitto_strerror(rc), false);
    return true;
  }
  if (rc == MOSQ_ERR_QOS_NOT_SUPPORTED) {
    // The broker's CONNACK caps QoS below the sink's: every message would
    // fail alike, so the sink is down, not the event at fault.
    const std::string reason =
        Where() + " does not take QoS " + std::to_string(options_.qos) + " (option \"qos\")";
    Settle(i, DeliveryStatus::kRetriable, "not sent: " + reason, false);
    LoseConnection(reason);
    return false;
  }
  const std::string reason =
      "cannot publish to " + Where() + ": " + std::string(mosquitto_strerror(rc));
  Settle(i, DeliveryStatus::kRetriable, "not sent: " + reason, false);
  LoseConnection(reason);
  return false;
}

// The connection is gone: acknowledgements of what was sent may never come,
// and nothing more is sent in this call.
void MqttSink::LoseConnection(const std::string &reason) {
  unsure_ = true;
  for (size_t i : flight_order_) {
    if (!slots_[i].settled) Settle(i, DeliveryStatus::kRetriable, reason, false);
  }
  while (!ready_.empty()) {
    const size_t i = ready_.front();
    ready_.pop_front();
    if (!slots_[i].settled) Settle(i, DeliveryStatus::kRetriable, "not sent: " + reason, false);
  }
  NoteDown(reason);
}

// A message that waited in vain until now ends the call as a lost
// connection does: the broker may still acknowledge it, on this connection,
// under a packet identifier libmosquitto would give a later message, so
// nothing more is sent on it (the call ends, and the connection with it).
// Messages were sent in flight_order_ with the same timeout, so the first
// unsettled one has the nearest deadline.
void MqttSink::Expire(Clock::time_point now) {
  while (!flight_order_.empty() && slots_[flight_order_.front()].settled) {
    flight_order_.pop_front();
  }
  if (flight_order_.empty() || slots_[flight_order_.front()].deadline > now) return;
  LoseConnection("no acknowledgement from " + Where() + " within " +
                 std::to_string(options_.ack_timeout_ms) + " ms");
}

// The acknowledgement of the message libmosquitto numbered `mid`.
void MqttSink::OnPublish(int mid, int reason_code) noexcept {
  try {
    const auto found = by_mid_.find(mid);
    if (found == by_mid_.end()) return;  // not this call's (cannot happen: see the top)
    const size_t i = found->second;
    by_mid_.erase(found);
    answered_ = true;
    const DeliveryStatus status = MqttReasonOutcome(reason_code);
    if (status == DeliveryStatus::kDelivered) {
      NoteUp();
      Settle(i, status, std::string(), true);
      return;
    }
    if (reason_code == 0x91) unsure_ = true;  // the session is confused: start afresh
    Settle(i, status,
           "the broker refused it: " + MqttReasonText(reason_code) + " (topic " +
               ShownTopic(messages_[i].target) + ")",
           true);
  } catch (...) {
    callback_failed_ = true;
  }
}

// The broker or its connection is unusable: one warning per distinct
// reason, repeats (the publisher retries a down sink after backing off) at
// debug.
void MqttSink::NoteDown(const std::string &reason) {
  const bool repeat = down_ && reason == last_failure_;
  down_ = true;
  AddLog(repeat ? LogLevel::kDebug : LogLevel::kWarning, reason);
  if (!repeat) last_failure_ = reason;
}

// The broker acknowledged a message: whatever was wrong has passed.
void MqttSink::NoteUp() {
  if (down_) AddLog(LogLevel::kInfo, "the MQTT broker " + Where() + " acknowledges messages again");
  down_ = false;
  last_failure_.clear();
}

std::string MqttSink::Masked(std::string text) const {
  if (!options_.password || options_.password->size() < kMinMaskedSecret) return text;
  const std::string &secret = *options_.password;
  for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3)) {
    text.replace(at, secret.size(), "***");
  }
  return text;
}

void MqttSink::AddLog(LogLevel level, std::string text) noexcept {
  try {
    logs_.Add(level, Masked(std::move(text)));
  } catch (...) {
    logs_.CountDropped(1);
  }
}

std::vector<LogLine> MqttSink::TakeLogs() { return logs_.Take(); }

// Keeps an idle connection alive (PINGREQ) and notices its loss.
void MqttSink::Poll() {
  if (mosq_ == nullptr || !connected_) return;
  const SigpipeGuard sigpipe_guard;
  if (!Drive(0)) {
    AddLog(LogLevel::kInfo,
           lost_reason_.empty() ? "the connection to " + Where() + " was lost" : lost_reason_);
    Disconnect();
  }
}

// "idle" before the first batch; "connected" while the connection is up and
// the broker acknowledges; "connecting" while a connection is being made;
// "down" once a batch found the broker unreachable or silent, until a
// message is acknowledged.
std::string MqttSink::State() const {
  if (down_) return "down";
  if (mosq_ == nullptr) return ever_connected_ ? "connecting" : "idle";
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
