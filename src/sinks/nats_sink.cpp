// The NATS sink: a batch of messages published to JetStream over one
// libnats connection (nats_connection.cpp), each as a core NATS message with
// headers and a reply subject of its own under the sink's inbox
// (nats_commands.cpp), each answer judged as it comes (nats_delivery.cpp,
// nats_replies.*). The class is in nats_sink_class.hpp.
//
// A message is delivered only when its PubAck came: JetStream stored it, or
// had already stored a message with its Nats-Msg-Id (the event id) within
// the stream's duplicate window (duplicate: true). Re-sends that
// at-least-once delivery makes (a lost acknowledgement, a crash before the
// outcome was written) are therefore stored once when they come within that
// window: exactly once into the stream.
//
// Pipelined, per-key ordered: every message that may go is sent at once (up
// to kMaxInFlight), without waiting for the answers before it, except that a
// subject and key has at most one message unacknowledged: its next message
// goes when the previous one's PubAck came, and not at all when that one
// failed (kNotSent: it waits behind it). JetStream answers each message on
// its own, so one refusal never takes its neighbours with it; and since a
// key's next message is sent only after its previous one was stored, no
// refusal or loss can let a later event of a key overtake an earlier one.
// Messages without a key have no order among themselves.
//
// Whatever has no answer when the connection is lost, when its
// acknowledgement timeout passes, or when the call is interrupted is
// kRetriable: JetStream may or may not have stored it (at least once; the
// re-send carries the same Nats-Msg-Id).
#include "sinks/nats_sink.hpp"
#include "sinks/nats_sink_class.hpp"
#include "sinks/sigpipe_guard.hpp"

#include <nats/nats.h>

#include <algorithm>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox {

namespace {

// Shorter secrets are not masked in log and error text: they could not be
// told apart from ordinary words. NATS never echoes a credential anyway; the
// masking only guards against a text we did not foresee.
constexpr size_t kMinMaskedSecret = 4;

std::string ServersText(const NatsOptions &options) {
  std::string text;
  for (const NatsServer &server : options.servers) {
    if (!text.empty()) text += ", ";
    text += NatsServerUrl(server);
  }
  return text;
}

}  // namespace

NatsSink::NatsSink(const std::string &name, NatsOptions options)
    : client_name_("outbox-" + name),
      options_(std::move(options)),
      servers_text_(ServersText(options_)) {}

NatsSink::~NatsSink() {
  Disconnect();
  if (stats_ != nullptr) natsStatistics_Destroy(stats_);
}

void NatsSink::Publish(const OutMessage *messages, size_t n, Delivery *out,
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
    // What was sent may still be answered, but this call can no longer keep
    // track of it; a fresh connection starts clean.
    Disconnect();
    FailRest("out of memory");
  } catch (...) {
    Disconnect();
    FailRest("unexpected error");  // only `interrupted` could throw anything else
  }
  messages_ = nullptr;
  out_ = nullptr;
  n_ = 0;
  ready_.clear();
  flight_order_.clear();
  lookups_.clear();
  sent_.clear();
}

void NatsSink::PublishBatch(InterruptCheck interrupted) {
  if (interrupted != nullptr && interrupted()) {
    FailRest("interrupted");
    return;
  }
  ready_.clear();
  flight_order_.clear();
  lookups_.clear();
  sent_.clear();
  answered_ = false;
  api_silent_ = false;
  connection_lost_ = false;
  timed_out_ = false;
  duplicates_ = 0;
  std::string error;
  if (!EnsureConnection(&error)) {
    NoteDown(error);
    FailRest(error);
    return;
  }
  // Answers to earlier calls that came after those calls gave up: their
  // messages were reported kRetriable and will be sent again.
  inbox_->Take(0, &answers_);
  answers_.clear();
  Chain();
  first_reply_ = next_reply_;

  Clock::time_point checked = Clock::now();
  while (!Done()) {
    SendReady();
    if (Done()) break;
    if (in_flight_ == 0 && ready_.empty()) {
      // Cannot happen: every unsettled message is in flight, ready, or
      // behind one of those. Never wait for nothing.
      FailRest("not sent: lost track of it (a bug in the NATS sink)");
      break;
    }
    const Clock::time_point now = Clock::now();
    inbox_->Take(std::min<int64_t>(kWaitSliceMs, MsUntilNextDeadline(now)), &answers_);
    for (NatsMsgPtr &answer : answers_) Judge(answer.get());
    answers_.clear();
    std::string reason;
    if (!Done() && ConnectionLost(&reason)) {
      LoseConnection(reason);
      break;
    }
    Expire(Clock::now());
    if (interrupted != nullptr && Clock::now() - checked >= Millis(kWaitSliceMs)) {
      checked = Clock::now();
      if (!Done() && interrupted()) {
        FailRest("interrupted");
        return;
      }
    }
  }
  if (duplicates_ > 0) {
    AddLog(LogLevel::kDebug,
           std::to_string(duplicates_) +
               " message(s) were already in their stream (duplicate Nats-Msg-Id): counted as "
               "delivered, stored once");
  }
  if (timed_out_ && !answered_) {
    // Messages went out and nothing at all came back: a connection that no
    // longer carries anything (or half a message, after a write deadline),
    // or a server that stopped answering. Start the next call afresh.
    const std::string reason = "no answer from " + servers_text_ + " within " +
                               std::to_string(options_.ack_timeout_ms) + " ms";
    NoteDown(reason);
    Disconnect();
  }
}

// Links each keyed message to the next one of its subject and key, and
// makes ready the first of each and every message without a key, in order.
void NatsSink::Chain() {
  std::map<std::pair<std::string_view, std::string_view>, size_t> last;
  for (size_t i = 0; i < n_; ++i) {
    const OutMessage &m = messages_[i];
    if (!m.has_key) {
      ready_.push_back(i);
      continue;
    }
    auto [it, first] = last.try_emplace({m.target, m.key}, i);
    if (first) {
      ready_.push_back(i);
    } else {
      slots_[it->second].next = i;
      it->second = i;
    }
  }
}

// Gives message i its outcome. Delivered: its key's next message may go.
// Anything else: its key's later messages of this call wait behind it
// (kNotSent), never sent.
void NatsSink::Settle(size_t i, DeliveryStatus status, std::string error, bool answered) {
  Slot &slot = slots_[i];
  if (slot.settled) return;
  slot.settled = true;
  ++settled_count_;
  if (slot.in_flight) {
    slot.in_flight = false;
    --in_flight_;
  }
  Delivery &d = out_[i];
  d.status = status;
  d.error = std::move(error);
  d.answered_at_us = answered ? UnixNowUs() : 0;
  if (status == DeliveryStatus::kDelivered) {
    if (slot.next != kNone) ready_.push_back(slot.next);
    return;
  }
  for (size_t j = slot.next; j != kNone; j = slots_[j].next) {
    if (slots_[j].settled) continue;
    slots_[j].settled = true;
    ++settled_count_;
    out_[j].status = DeliveryStatus::kNotSent;
    out_[j].error = "held back: an earlier event of its key failed in this batch";
    out_[j].answered_at_us = 0;
  }
}

void NatsSink::FailRest(const std::string &reason) noexcept {
  const bool tracked = slots_.size() == n_;
  for (size_t i = 0; i < n_; ++i) {
    if (tracked && slots_[i].settled) continue;
    out_[i].status = DeliveryStatus::kRetriable;
    out_[i].answered_at_us = 0;
    try {
      out_[i].error = reason;
    } catch (...) {
      out_[i].error.clear();
    }
    if (tracked) slots_[i].settled = true;
  }
  settled_count_ = n_;
}

// The server or JetStream is unusable: one warning per distinct reason,
// repeats (the publisher retries a down sink after backing off) at debug.
void NatsSink::NoteDown(const std::string &reason) {
  const bool repeat = down_ && reason == last_failure_;
  down_ = true;
  AddLog(repeat ? LogLevel::kDebug : LogLevel::kWarning, reason);
  if (!repeat) last_failure_ = reason;
}

// JetStream acknowledged a message: whatever was wrong has passed.
void NatsSink::NoteUp() {
  if (down_) AddLog(LogLevel::kInfo, "JetStream acknowledges messages again");
  down_ = false;
  last_failure_.clear();
}

std::string NatsSink::Masked(std::string text) const {
  for (const std::optional<std::string> *secret : {&options_.password, &options_.token}) {
    if (!*secret || (*secret)->size() < kMinMaskedSecret) continue;
    const std::string &value = **secret;
    for (size_t at = text.find(value); at != std::string::npos; at = text.find(value, at + 3)) {
      text.replace(at, value.size(), "***");
    }
  }
  return text;
}

void NatsSink::AddLog(LogLevel level, std::string text) noexcept {
  try {
    logs_.Add(level, Masked(std::move(text)));
  } catch (...) {
    logs_.CountDropped(1);
  }
}

std::vector<LogLine> NatsSink::TakeLogs() { return logs_.Take(); }

// Late answers (to messages an earlier call gave up on) are dropped while
// idle, so they do not pile up between batches.
void NatsSink::Poll() {
  if (inbox_ == nullptr) return;
  try {
    inbox_->Take(0, &answers_);
  } catch (...) {
    // Out of memory: they stay queued until the next call.
  }
  answers_.clear();
}

// "idle" before the first batch; "connected" while the connection is up
// and JetStream answers; "connecting" while libnats (re)connects and no
// batch has failed for it yet; "down" once a batch found the server
// unreachable or JetStream not answering, until a message is acknowledged.
std::string NatsSink::State() const {
  if (nc_ == nullptr) return down_ ? "down" : "idle";
  switch (natsConnection_Status(nc_)) {
    case NATS_CONN_STATUS_CONNECTED:
      return down_ ? "down" : "connected";
    case NATS_CONN_STATUS_CONNECTING:
    case NATS_CONN_STATUS_RECONNECTING:
      return down_ ? "down" : "connecting";
    default:
      break;
  }
  return "down";
}

std::unique_ptr<Sink> MakeNatsSink(const std::string &name, const SinkOptions &options,
                                   std::string *error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  try {
    // The same checks create_sink() made, so both agree on what is valid.
    NatsOptions parsed;
    if (std::optional<std::string> invalid = ParseNatsOptions(options, &parsed)) {
      *error = std::move(*invalid);
      return nullptr;
    }
    return std::make_unique<NatsSink>(name, std::move(parsed));
  } catch (...) {
    DescribeCurrentException(error);
  }
  return nullptr;
}

}  // namespace outbox
