// The AMQP sink: batches published on one channel in confirm mode
// (amqp_connection.cpp), pipelined (keyed_sink.hpp: a batch's messages go
// out while earlier batches still wait for confirms), each laid out by
// amqp_commands.cpp, and settled as the broker's confirms, returns and
// refusals arrive (amqp_delivery.cpp). The class is in amqp_sink_class.hpp.
//
// An event is delivered only once the broker's basic.ack for it came;
// messages are published with `mandatory`, so one no queue takes comes
// back (basic.return, before its ack) and is the target's refusal.
//
// Per-key order: messages of one route and key form a chain (ChainOf:
// whatever their routing keys), and only a chain's head is ever
// unconfirmed (keyed_sends.hpp; the dispatcher never has a route and key in
// two open Sends). The next message of a key is published when the previous
// one's ack arrives, and never when it was nacked, returned or lost: a
// broker that refuses one message of a key (a full queue with x-overflow
// reject-publish) may well take the next, which would then overtake it.
// Unlike Kafka's idempotent producer, nothing in AMQP stops a later message
// once an earlier one failed. Messages without a key and heads of different
// chains are all in flight at once (up to kMaxInFlight over every open
// Send), confirmed as the broker goes (often several at a time, with
// `multiple`).
//
// After a lost connection, a confirm that did not come in time, or a batch
// given up with messages in flight (interrupted) the connection is dropped
// (a confirm that came later could not be matched to its message): what was
// unconfirmed is retriable, and may or may not have been stored (at least
// once); what was never sent waits behind it.
#include "sinks/amqp_sink.hpp"
#include "sinks/amqp_options.hpp"
#include "sinks/amqp_sink_class.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace outbox {

namespace {

std::string Endpoint(const AmqpOptions &options) {
  const bool ipv6 = options.host.find(':') != std::string::npos;
  return (ipv6 ? "[" + options.host + "]" : options.host) + ":" +
         std::to_string(options.EffectivePort());
}

}  // namespace

AmqpSink::AmqpSink(const std::string &name, AmqpOptions options)
    : KeyedSink("AMQP sink log line(s)", {options.password}, options.connect_timeout_ms,
                options.delivery_timeout_ms),
      name_(name),
      options_(std::move(options)),
      endpoint_(Endpoint(options_)) {}

std::string AmqpSink::UpText() const {
  return "the broker at " + endpoint_ + " confirms messages again";
}

// A connection for a new Send: the one there is, once what arrived on it
// while it sat idle has been read (a broker that restarted, or closed an
// idle connection, has left it readable: a connection.close, or end of
// stream), or one being made, else a new one started. Nothing here waits
// for the broker (Step makes the connection), but name resolution and a
// TLS connection (amqp_sink_class.hpp).
bool AmqpSink::Connect(InterruptCheck interrupted, std::string *error) {
  if (conn_ != nullptr) Step(0);
  if (conn_ != nullptr) {
    if (channel_ != 0 || phase_ != Phase::kNone) return true;
    // The broker closed the last channel (the exchange was missing, say).
    connect_deadline_ = Clock::now() + Millis(options_.connect_timeout_ms);
    if (StartChannel(error)) return true;
    *error = Masked("cannot reopen a channel on " + endpoint_ + ": " + *error);
    Disconnect();
    return false;
  }
  if (StartConnecting(interrupted, error)) return true;
  *error = Masked("cannot connect to " + endpoint_ + ": " + *error);
  Disconnect();
  return false;
}

// Sends what is ready, reads what the broker said (waiting up to wait_ms, or
// less when a deadline comes sooner, for the first frame; then only what
// has arrived), and settles what it says, what overran its deadline, and
// everything outstanding when the connection is lost.
void AmqpSink::Step(int64_t wait_ms) {
  if (conn_ == nullptr) return;  // nothing is outstanding without a connection
  if (phase_ != Phase::kNone) {
    // Connecting, or opening a channel: nothing is in flight meanwhile.
    StepConnecting(wait_ms);
    if (conn_ == nullptr || phase_ != Phase::kNone) return;
    wait_ms = 0;  // the wait went to the handshake: send, read what came, return
  }
  // A Step may come late: what is past its Send's cut-off is not sent first.
  sends_.CutOff(Clock::now(), CutOffText());
  if (!SendReady()) return;
  int64_t wait = sends_.MsUntilNextDeadline(Clock::now(), wait_ms);
  if (stuck_) wait = std::min<int64_t>(wait, kRoomWaitMs);
  for (int frames = 0; frames < kMaxFramesPerStep; ++frames) {
    amqp_frame_t frame{};
    const int status = ReadFrame(frames == 0 ? static_cast<int>(wait) : 0, &frame);
    if (status == AMQP_STATUS_TIMEOUT) break;
    if (status != AMQP_STATUS_OK) {
      if (sends_.HasOutstanding()) {
        LoseConnection("connection to " + endpoint_ + " lost: " + LibraryError(status));
      } else {
        AddLog(LogLevel::kInfo, "the connection to " + endpoint_ + " was closed (" +
                                    LibraryError(status) + "); the next batch reconnects");
        Disconnect();
      }
      return;
    }
    if (!OnFrame(frame)) return;  // the connection is gone, and what was on it settled
  }
  SendRef overdue;
  Clock::time_point deadline;
  if (sends_.Overdue(Clock::now(), &overdue, &deadline)) {
    std::string reason = "no confirm from " + endpoint_ + " within " +
                         std::to_string(options_.delivery_timeout_ms) + " ms";
    if (blocked_) reason += " (the broker blocks publishing: " + blocked_reason_ + ")";
    LoseConnection(reason);
    return;
  }
  sends_.CutOff(Clock::now(), CutOffText());
  if (!SendReady()) return;  // the followers of what was confirmed
  CheckStalled();
}

// Publishes ready messages while the socket has room for them and the
// broker takes publishes, starting to reopen the channel the broker closed
// over a too large message (the next Steps finish it). False when the
// connection is gone (everything outstanding is then settled).
bool AmqpSink::SendReady() {
  const bool was_stuck = stuck_;
  stuck_ = false;
  if (phase_ != Phase::kNone) return conn_ != nullptr;
  const amqp_bytes_t exchange{options_.exchange.size(),
                              const_cast<char *>(options_.exchange.data())};
  SendRef ref;
  while (conn_ != nullptr && sends_.in_flight() < kMaxInFlight && sends_.NextReady(&ref)) {
    if (channel_ == 0) {
      sends_.PutBack(ref);
      return EnsureChannel();
    }
    if (blocked_ || !PublishOne(ref, exchange)) {
      if (conn_ == nullptr) return false;
      sends_.PutBack(ref);  // no room in the socket yet, or the broker blocks
      stuck_ = true;
      if (!was_stuck) stuck_since_ = Clock::now();
      return true;
    }
  }
  return conn_ != nullptr;
}

// Publishes message `ref`, or settles it when it cannot be sent as it is.
// False when it was not sent: no room in the socket, or the connection
// failed (conn_ is then null and everything outstanding settled).
bool AmqpSink::PublishOne(SendRef ref, const amqp_bytes_t &exchange) {
  const OutMessage &m = sends_.Message(ref);
  DeliveryStatus refusal = DeliveryStatus::kRejected;
  if (std::optional<std::string> why = LayOut(m, &layout_, &refusal)) {
    sends_.Settle(ref, refusal, std::move(*why), false);
    return true;
  }
  if (!RoomFor(WireSize(layout_, m.target))) return false;
  // Recorded before the publish (these may throw; nothing is on the wire
  // yet): from the publish on, the message may be at the broker, even if the
  // write failed half way, so it is unconfirmed until an answer or the
  // connection's end.
  const uint64_t tag = next_tag_;
  auto [it, fresh] = unconfirmed_.try_emplace(tag);
  it->second.id.assign(m.id);
  it->second.body_size = layout_.body.len;
  tag_of_id_[it->second.id] = tag;
  if (!fresh ||
      !sends_.MarkSent(ref, WireId(tag), Clock::now() + Millis(options_.delivery_timeout_ms))) {
    // Tags only grow on a channel, and each channel has its own wire ids.
    sends_.Settle(ref, DeliveryStatus::kRetriable, "delivery tag reused", false);
    LoseConnection("delivery tag " + std::to_string(tag) + " reused on " + endpoint_ +
                   ": the connection starts afresh");
    return false;
  }
  const amqp_bytes_t routing_key{m.target.size(), const_cast<char *>(NonNull(m.target))};
  const int status =
      amqp_basic_publish(conn_, channel_, exchange, routing_key,
                         /*mandatory=*/1, /*immediate=*/0, &layout_.properties, layout_.body);
  ++next_tag_;
  if (status != AMQP_STATUS_OK) {
    LoseConnection("connection to " + endpoint_ + " lost: " + LibraryError(status));
    return false;
  }
  progress_ = Clock::now();
  return true;
}

// Starts a channel for what is ready, after the broker closed the last one
// over a too large message. False when the connection is gone.
bool AmqpSink::EnsureChannel() {
  std::string error;
  connect_deadline_ = Clock::now() + Millis(options_.connect_timeout_ms);
  if (StartChannel(&error)) return true;
  LoseConnection("cannot reopen a channel on " + endpoint_ + ": " + error);
  return false;
}

// Something is ready but nothing could be sent for delivery_timeout_ms (the
// broker blocks publishing, or stopped reading): the connection goes, and
// what is outstanding is retriable.
void AmqpSink::CheckStalled() {
  if (!stuck_) return;
  const Clock::time_point since = std::max(stuck_since_, progress_);
  if (Clock::now() - since < Millis(options_.delivery_timeout_ms)) return;
  std::string reason = "could not publish to " + endpoint_ + " within " +
                       std::to_string(options_.delivery_timeout_ms) + " ms";
  if (blocked_) reason += " (the broker blocks publishing: " + blocked_reason_ + ")";
  LoseConnection(reason);
}

// The connection is gone, or can no longer be trusted: confirms of what was
// sent may never come, or could not be matched. Everything outstanding is
// settled (keyed_sends.hpp: in flight retriable, the rest behind it).
void AmqpSink::LoseConnection(const std::string &reason) {
  const std::string masked = Masked(reason);
  sends_.FailOutstanding(masked);
  NoteDown(masked);
  Disconnect();
}

// A Send was given up with messages in flight (interrupted, or out of
// time): their confirms may still come. The connection goes, and with it
// whatever else is outstanding on it, retriable.
void AmqpSink::Forgotten() noexcept {
  try {
    sends_.FailOutstanding("the connection to " + endpoint_ +
                           " was dropped: a batch given up had messages in flight on it");
  } catch (...) {
    sends_.FailAllRest("the connection was dropped");
  }
  Disconnect();
}

// "idle" before the first connection and after the connection was dropped
// without a failure (a batch given up, or an idle connection the broker
// closed: the next batch connects again); "connected" while a connection is
// believed usable; "blocked" while the broker holds publishes back (a
// resource alarm: memory or disk); "down" after a failure until a message
// is confirmed again.
std::string AmqpSink::State() const {
  if (down()) return "down";
  if (conn_ == nullptr || !connection_open_) return "idle";  // connecting: not usable yet
  return blocked_ ? "blocked" : "connected";
}

std::unique_ptr<Sink> MakeAmqpSink(const std::string &name, const SinkOptions &options,
                                   std::string *error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  try {
    // The same checks create_sink() made, so both agree on what is valid.
    AmqpOptions parsed;
    if (std::optional<std::string> invalid = ParseAmqpOptions(options, &parsed)) {
      *error = std::move(*invalid);
      return nullptr;
    }
    return std::make_unique<AmqpSink>(name, std::move(parsed));
  } catch (...) {
    DescribeCurrentException(error);
  }
  return nullptr;
}

}  // namespace outbox
