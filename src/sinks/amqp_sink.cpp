// The AMQP sink: a batch of messages published on one channel in confirm
// mode (amqp_connection.cpp), each laid out by amqp_commands.cpp, and
// settled as the broker's confirms, returns and refusals arrive
// (amqp_delivery.cpp). The class is in amqp_sink_class.hpp.
//
// An event is delivered only once the broker's basic.ack for it came;
// messages are published with `mandatory`, so one no queue takes comes
// back (basic.return, before its ack) and is the target's refusal.
//
// Per-key order: messages of one route and key form a chain (ChainOf:
// whatever their routing keys), and only a chain's head is ever
// unconfirmed. The next message of a key is published when the previous
// one's ack arrives, and never when it was nacked, returned or lost: a
// broker that refuses one message of a key (a full queue with x-overflow
// reject-publish) may well take the next, which would then overtake it.
// Unlike Kafka's idempotent producer, nothing in AMQP stops a later message
// once an earlier one failed. Messages without a key and heads of different
// chains are all in flight at once, confirmed as the broker goes (often
// several at a time, with `multiple`).
//
// After a lost connection, a timeout or an interruption the connection is
// dropped (a confirm that came later could not be matched to its message):
// what was unconfirmed is retriable, and may or may not have been stored
// (at least once); what was never sent waits behind it.
#include "sinks/amqp_sink.hpp"
#include "sinks/amqp_options.hpp"
#include "sinks/amqp_sink_class.hpp"
#include "sinks/sigpipe_guard.hpp"

#include <algorithm>
#include <chrono>
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

// Shorter passwords are not masked in log and error text: they could not be
// told apart from ordinary words. The broker never echoes a password; the
// masking only guards against a text we did not foresee.
constexpr size_t kMinMaskedPassword = 4;
// While a message waits for room in the socket, how long a wait for the
// broker's frames lasts before looking again.
constexpr int kRoomWaitMs = 5;

std::string Endpoint(const AmqpOptions &options) {
  const bool ipv6 = options.host.find(':') != std::string::npos;
  return (ipv6 ? "[" + options.host + "]" : options.host) + ":" +
         std::to_string(options.EffectivePort());
}

}  // namespace

AmqpSink::AmqpSink(const std::string &name, AmqpOptions options)
    : name_(name), options_(std::move(options)), endpoint_(Endpoint(options_)) {}

void AmqpSink::Publish(const OutMessage *messages, size_t n, Delivery *out,
                       InterruptCheck interrupted) {
  if (n == 0) return;
  SigpipeGuard sigpipe_guard;
  Batch b;
  b.messages = messages;
  b.n = n;
  b.out = out;
  try {
    b.settled.assign(n, false);
    b.unsettled = n;
    PublishBatch(&b, interrupted);
  } catch (const std::bad_alloc &) {
    Abandon(b, "out of memory");
  } catch (...) {
    Abandon(b, "unexpected error");  // only `interrupted` could throw anything else
  }
}

// After an exception in the middle of a batch: frames may be half read or
// half written, so the connection cannot be trusted any more, and what has
// no outcome is retriable.
void AmqpSink::Abandon(const Batch &b, const char *reason) noexcept {
  Disconnect();
  connection_ = Connection::kIdle;
  for (size_t i = 0; i < b.n; ++i) {
    if (i < b.settled.size() && b.settled[i]) continue;
    b.out[i].status = DeliveryStatus::kRetriable;
    try {
      b.out[i].error = reason;
    } catch (...) {
      b.out[i].error.clear();
    }
  }
}

void AmqpSink::PublishBatch(Batch *b, InterruptCheck interrupted) {
  BuildChains(b);  // first: every way out settles chains
  if (interrupted != nullptr && interrupted()) {
    Interrupted(b);
    return;
  }
  if (!EnsureConnected(b, interrupted)) return;

  const Millis timeout(options_.delivery_timeout_ms);
  Clock::time_point checked = Clock::now();
  Clock::time_point progress = checked;  // the last publish or confirm
  Layout layout;
  while (b->unsettled > 0) {
    std::string error;
    if (channel_ == 0) {
      // The broker closed the channel over one message; the others go on.
      const Stop stop =
          OpenChannel(Clock::now() + Millis(options_.connect_timeout_ms), interrupted, &error);
      if (stop == Stop::kInterrupted) {
        Interrupted(b);
        return;
      }
      if (stop == Stop::kFailed) {
        GiveUp(b, Masked("cannot reopen a channel on " + endpoint_ + ": " + error));
        return;
      }
    }
    const size_t sent_before = next_tag_;
    if (SendReady(b, &layout, &error) == Stop::kFailed) {
      GiveUp(b, Masked("connection to " + endpoint_ + " lost: " + error));
      return;
    }
    if (next_tag_ != sent_before) progress = Clock::now();
    if (b->unsettled == 0) break;

    // Wait for the broker's answers: not at all while more can be sent at
    // once, a little while a message waits for room in the socket, a
    // slice otherwise.
    const bool more = b->ready_at < b->ready.size() && !blocked_ && channel_ != 0;
    const int wait = more ? (next_tag_ != sent_before ? 0 : kRoomWaitMs) : kWaitSliceMs;
    amqp_frame_t frame{};
    const int status = ReadFrame(wait, &frame);
    if (status == AMQP_STATUS_OK) {
      const size_t unsettled = b->unsettled;
      if (frame.channel == 0 && frame.frame_type == AMQP_FRAME_METHOD) {
        if (!OnConnectionMethod(frame.payload.method, &error)) {
          GiveUp(b, Masked(error));
          return;
        }
      } else if (frame.channel == channel_ && channel_ != 0) {
        static_cast<void>(OnChannelFrame(b, frame, &error));
        if (channel_ == 0 && b->unsettled > 0 && b->ready_at >= b->ready.size() &&
            b->unconfirmed.empty()) {
          break;  // the channel went with everything there was to send
        }
      }
      if (b->unsettled != unsettled) progress = Clock::now();
    } else if (status != AMQP_STATUS_TIMEOUT) {
      GiveUp(b, Masked("connection to " + endpoint_ + " lost: " + LibraryError(status)));
      return;
    }

    const Clock::time_point now = Clock::now();
    if (interrupted != nullptr && now - checked >= Millis(kWaitSliceMs)) {
      checked = now;
      if (interrupted()) {
        Interrupted(b);
        return;
      }
    }
    // The oldest unconfirmed message waited too long, or nothing could be
    // sent for as long (the broker blocks publishing, or stopped reading).
    const bool late = !b->sent_at.empty() && now - b->sent_at.begin()->second >= timeout;
    if (late || (b->sent_at.empty() && now - progress >= timeout)) {
      std::string reason = late ? "no confirm from " + endpoint_ + " within " +
                                      std::to_string(options_.delivery_timeout_ms) + " ms"
                                : "could not publish to " + endpoint_ + " within " +
                                      std::to_string(options_.delivery_timeout_ms) + " ms";
      if (blocked_) reason += " (the broker blocks publishing: " + blocked_reason_ + ")";
      GiveUp(b, Masked(std::move(reason)));
      return;
    }
  }
  if (b->unsettled > 0) FailUnsettled(b, "not sent: the broker closed the channel");
}

bool AmqpSink::EnsureConnected(Batch *b, InterruptCheck interrupted) {
  std::string error;
  // A broker that restarted, or closed an idle connection, has left it
  // readable (a connection.close, or end of stream): connect afresh before
  // sending a batch into it.
  if (conn_ != nullptr && !Drain(&error)) {
    AddLog(LogLevel::kInfo,
           Masked("the connection to " + endpoint_ + " was closed (" + error + "); reconnecting"));
    Disconnect();
  }
  if (conn_ == nullptr) {
    const Stop stop = Connect(interrupted, &error);
    if (stop != Stop::kNone) {
      Disconnect();
      if (stop == Stop::kInterrupted) {
        Interrupted(b);
      } else {
        error = Masked(std::move(error));
        NoteDown(error);
        FailUnsettled(b, error);
        // None of them reached a connection (Delivery::unsent).
        for (size_t i = 0; i < b->n; ++i) {
          if (b->out[i].status == DeliveryStatus::kRetriable) b->out[i].unsent = true;
        }
      }
      return false;
    }
    connection_ = Connection::kConnected;
    last_failure_.clear();
    AddLog(LogLevel::kInfo, "connected to " + endpoint_ + " vhost \"" + options_.vhost + "\"");
  }
  if (channel_ == 0) {
    // The broker closed the last channel (the exchange was missing, say).
    const Stop stop =
        OpenChannel(Clock::now() + Millis(options_.connect_timeout_ms), interrupted, &error);
    if (stop == Stop::kInterrupted) {
      Interrupted(b);
      return false;
    }
    if (stop == Stop::kFailed) {
      GiveUp(b, Masked(error));
      return false;
    }
  }
  connection_ = Connection::kConnected;  // State() says "blocked" while the broker blocks
  return true;
}

void AmqpSink::BuildChains(Batch *b) {
  const size_t n = b->n;
  b->chain_next.assign(n, n);
  b->returned.assign(n, std::string());
  b->returned_status.assign(n, DeliveryStatus::kTargetRefused);
  b->body_size.assign(n, 0);
  b->ready.clear();
  b->ready.reserve(n);
  b->by_id.reserve(n);
  std::map<ChainKey, size_t> last_of_key;
  for (size_t i = 0; i < n; ++i) {
    const OutMessage &m = b->messages[i];
    b->by_id.emplace(m.id, i);
    if (!m.has_key) {
      b->ready.push_back(i);
      continue;
    }
    const auto [it, first] = last_of_key.try_emplace(ChainOf(m), i);
    if (first) {
      b->ready.push_back(i);
    } else {
      b->chain_next[it->second] = i;
      it->second = i;
    }
  }
}

// Publishes ready messages while the socket has room for them and the
// broker takes publishes. kFailed (with *error) when the connection broke.
AmqpSink::Stop AmqpSink::SendReady(Batch *b, Layout *layout, std::string *error) {
  const amqp_bytes_t exchange{options_.exchange.size(),
                              const_cast<char *>(options_.exchange.data())};
  while (b->ready_at < b->ready.size() && !blocked_ && channel_ != 0) {
    const size_t i = b->ready[b->ready_at];
    const OutMessage &m = b->messages[i];
    DeliveryStatus refusal = DeliveryStatus::kRejected;
    if (std::optional<std::string> why = LayOut(m, layout, &refusal)) {
      Settle(b, i, refusal, std::move(*why), false);
      HoldChain(b, i, "held back: an earlier event of its key failed in this batch");
      ++b->ready_at;
      continue;
    }
    if (!RoomFor(WireSize(*layout, m.target))) break;
    const amqp_bytes_t routing_key{m.target.size(), const_cast<char *>(NonNull(m.target))};
    const int status =
        amqp_basic_publish(conn_, channel_, exchange, routing_key,
                           /*mandatory=*/1, /*immediate=*/0, &layout->properties, layout->body);
    // From here the message may be at the broker, even if the write failed
    // half way: it is unconfirmed until an answer or the connection's end.
    const uint64_t tag = next_tag_++;
    b->unconfirmed.emplace(tag, i);
    b->sent_at.emplace(tag, Clock::now());
    b->body_size[i] = layout->body.len;
    ++b->ready_at;
    if (status != AMQP_STATUS_OK) {
      *error = LibraryError(status);
      return Stop::kFailed;
    }
  }
  return Stop::kNone;
}

// Publish was told to stop (the publisher shuts down): what has no outcome
// is retriable with error "interrupted" (sink.hpp), and the connection goes
// (a confirm that came later could not be matched). Not the broker's fault:
// the next batch simply connects again.
void AmqpSink::Interrupted(Batch *b) {
  Disconnect();
  connection_ = Connection::kIdle;
  for (size_t i = 0; i < b->n; ++i) {
    Settle(b, i, DeliveryStatus::kRetriable, "interrupted", false);
  }
}

// The connection failed or timed out: drop it (a confirm that came later
// could not be matched to its message) and fail what has no outcome.
void AmqpSink::GiveUp(Batch *b, const std::string &reason) {
  Disconnect();
  NoteDown(reason);
  FailUnsettled(b, reason);
}

// The broker is unreachable or unusable: one warning per distinct reason,
// repeats (the publisher retries a down sink after backing off) at debug.
void AmqpSink::NoteDown(const std::string &reason) {
  const bool repeat = connection_ == Connection::kDown && reason == last_failure_;
  connection_ = Connection::kDown;
  AddLog(repeat ? LogLevel::kDebug : LogLevel::kWarning, reason);
  if (!repeat) last_failure_ = reason;
}

void AmqpSink::Poll() {
  if (conn_ == nullptr) return;
  try {
    SigpipeGuard sigpipe_guard;
    std::string error;
    if (!Drain(&error)) {
      AddLog(LogLevel::kInfo, Masked("the connection to " + endpoint_ + " was closed (" + error +
                                     "); the next batch reconnects"));
      Disconnect();
      connection_ = Connection::kIdle;
    }
  } catch (...) {
    Disconnect();
    connection_ = Connection::kIdle;
  }
}

std::string AmqpSink::Masked(std::string text) const {
  const std::string &password = options_.password;
  if (password.size() < kMinMaskedPassword) return text;
  for (size_t at = text.find(password); at != std::string::npos; at = text.find(password, at + 3)) {
    text.replace(at, password.size(), "***");
  }
  return text;
}

void AmqpSink::AddLog(LogLevel level, std::string text) noexcept {
  try {
    logs_.Add(level, Masked(std::move(text)));
  } catch (...) {
    logs_.CountDropped(1);
  }
}

std::vector<LogLine> AmqpSink::TakeLogs() { return logs_.Take(); }

// "idle" before the first connection, after an interrupted batch and after
// the broker closed an idle connection (the next batch connects again);
// "connected" while a connection is believed usable; "blocked" while the
// broker holds publishes back (a resource alarm: memory or disk); "down"
// after a failure until a batch gets through again.
std::string AmqpSink::State() const {
  switch (connection_) {
    case Connection::kConnected:
      return blocked_ ? "blocked" : "connected";
    case Connection::kDown:
      return "down";
    case Connection::kIdle:
      break;
  }
  return "idle";
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
