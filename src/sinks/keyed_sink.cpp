// Pipelined delivery for the MQTT and NATS sinks (keyed_sink.hpp).
#include "sinks/keyed_sink.hpp"

#include <algorithm>
#include <new>
#include <string>
#include <utility>

#include "sinks/sigpipe_guard.hpp"

namespace outbox {

namespace {

// Shorter secrets are not masked: they could not be told apart from
// ordinary words. Brokers never echo a credential; the masking only guards
// against a text we did not foresee.
constexpr size_t kMinMaskedSecret = 4;

// A Send's last chance beyond its own timeouts (SettleLimitMs): the slices
// of waiting that may round up past a deadline.
constexpr int64_t kSettleMarginMs = 1000;

// `unsent`: no connection could be made (Delivery::unsent).
void FailAll(size_t n, Delivery *out, const char *reason, bool unsent = false) noexcept {
  for (size_t i = 0; i < n; ++i) {
    out[i].status = DeliveryStatus::kRetriable;
    out[i].answered_at_us = 0;
    out[i].connection_lost = false;
    out[i].unsent = unsent;
    try {
      out[i].error = reason;
    } catch (...) {
      out[i].error.clear();
    }
  }
}

}  // namespace

KeyedSink::KeyedSink(const char *log_what, std::vector<std::string> secrets, int64_t connect_ms,
                     int64_t ack_timeout_ms)
    : secrets_(std::move(secrets)),
      connect_ms_(connect_ms),
      ack_timeout_ms_(ack_timeout_ms),
      logs_(log_what) {}

// Sending may go on until connect_ms_ + ack_timeout_ms_ after the Send, and
// what was sent then waits ack_timeout_ms_ for its answer.
int64_t KeyedSink::SettleLimitMs() const {
  return connect_ms_ + 2 * ack_timeout_ms_ + kSettleMarginMs;
}

std::string KeyedSink::CutOffText() const {
  return "not sent: the broker took longer than connect_timeout_ms + ack_timeout_ms (" +
         std::to_string(connect_ms_ + ack_timeout_ms_) +
         " ms) to take its batch; an earlier event of its key, if any, decides for it";
}

void KeyedSink::Publish(const OutMessage *messages, size_t n, Delivery *out,
                        InterruptCheck interrupted) {
  const uint64_t ticket = Send(messages, n, out, interrupted);
  if (ticket != 0) Collect(ticket, interrupted);
}

uint64_t KeyedSink::Send(const OutMessage *messages, size_t n, Delivery *out,
                         InterruptCheck interrupted) {
  return Open(messages, n, out, interrupted, false);
}

uint64_t KeyedSink::SendAlone(const OutMessage *message, Delivery *out,
                              InterruptCheck interrupted) {
  return Open(message, 1, out, interrupted, true);
}

uint64_t KeyedSink::Open(const OutMessage *messages, size_t n, Delivery *out,
                         InterruptCheck interrupted, bool alone) {
  if (n == 0) return 0;
  const SigpipeGuard sigpipe_guard;
  uint64_t ticket = 0;
  try {
    if (interrupted != nullptr && interrupted()) {
      FailAll(n, out, "interrupted");
      return 0;
    }
    std::string error;
    if (!Connect(interrupted, &error)) {
      NoteDown(error);
      FailAll(n, out, error.c_str(), /*unsent=*/true);
      return 0;
    }
    ticket =
        sends_.Open(messages, n, out, Clock::now() + Millis(connect_ms_ + ack_timeout_ms_), alone);
    Step(0);
  } catch (...) {
    // Out of memory (only `interrupted` could throw anything else): this
    // Send, opened or not, and every other open one are settled, and the
    // connection starts afresh.
    const char *reason = "out of memory";
    try {
      throw;
    } catch (const std::bad_alloc &) {
    } catch (...) {
      reason = "unexpected error";
    }
    if (ticket == 0) FailAll(n, out, reason);
    Recover(reason);
  }
  if (ticket == 0) return 0;
  if (!sends_.Done(ticket)) return ticket;
  sends_.Close(ticket);
  return 0;
}

void KeyedSink::Collect(uint64_t ticket, InterruptCheck interrupted) {
  (void)Wait(ticket, -1, interrupted);
}

bool KeyedSink::CollectFor(uint64_t ticket, int64_t wait_ms, InterruptCheck interrupted) {
  return Wait(ticket, std::max<int64_t>(0, wait_ms), interrupted);
}

// Collect and CollectFor: wait_ms < 0 waits until the Send is done, which
// its timeouts bound (and, should they fail to, SettleLimitMs).
bool KeyedSink::Wait(uint64_t ticket, int64_t wait_ms, InterruptCheck interrupted) {
  if (!sends_.IsOpen(ticket)) return true;  // settled within Send, or abandoned
  const SigpipeGuard sigpipe_guard;
  const Clock::time_point start = Clock::now();
  const Clock::time_point limit = start + Millis(SettleLimitMs());
  Clock::time_point checked = start;
  try {
    for (bool first = true; !sends_.Done(ticket); first = false) {
      int64_t slice = kWaitSliceMs;
      if (wait_ms >= 0) {
        const int64_t left =
            wait_ms - std::chrono::duration_cast<Millis>(Clock::now() - start).count();
        // Still open: the caller comes back (after one look, however short).
        if (left <= 0 && !first) return false;
        slice = std::clamp<int64_t>(left, 0, kWaitSliceMs);
      }
      Step(slice);
      if (sends_.Done(ticket)) break;
      const Clock::time_point now = Clock::now();
      if (now >= limit) {
        // Cannot happen: its timeouts settle every message before this.
        if (sends_.FailRest(ticket, "timed out: no outcome within the sink's limit") > 0) {
          Forgotten();
        }
        break;
      }
      if (interrupted != nullptr && now - checked >= Millis(kWaitSliceMs)) {
        checked = now;
        if (interrupted()) {
          if (sends_.FailRest(ticket, "interrupted") > 0) Forgotten();
          break;
        }
      }
    }
  } catch (const std::bad_alloc &) {
    Recover("out of memory");
  } catch (...) {
    Recover("unexpected error");
  }
  sends_.Close(ticket);
  return true;
}

// What was sent may still be answered, but the sink can no longer keep
// track of it; a fresh connection starts clean.
void KeyedSink::Recover(const char *reason) noexcept {
  sends_.FailAllRest(reason);
  Disconnect();
}

void KeyedSink::AbandonAll(const char *reason) noexcept {
  if (sends_.AbandonAll(reason) > 0) Forgotten();
}

// Serves the connection without waiting: keepalives, answers to open
// Sends (their `out` filled as they come), passed deadlines.
void KeyedSink::Poll() {
  const SigpipeGuard sigpipe_guard;
  try {
    Step(0);
  } catch (const std::bad_alloc &) {
    Recover("out of memory");
  } catch (...) {
    Recover("unexpected error");
  }
}

void KeyedSink::NoteDown(const std::string &reason) {
  const bool repeat = down_ && reason == last_failure_;
  down_ = true;
  AddLog(repeat ? LogLevel::kDebug : LogLevel::kWarning, reason);
  if (!repeat) last_failure_ = reason;
}

void KeyedSink::NoteUp() {
  if (!down_) return;
  try {
    AddLog(LogLevel::kInfo, UpText());
  } catch (...) {
    // Out of memory: the line is lost, the state is right.
  }
  down_ = false;
  last_failure_.clear();
}

// Every secret's every occurrence, the longest secrets first (a token that
// contains the password is masked whole).
std::string KeyedSink::Masked(std::string text) const {
  std::vector<const std::string *> longest_first;
  for (const std::string &secret : secrets_) {
    if (secret.size() >= kMinMaskedSecret) longest_first.push_back(&secret);
  }
  std::sort(longest_first.begin(), longest_first.end(),
            [](const std::string *a, const std::string *b) { return a->size() > b->size(); });
  for (const std::string *secret : longest_first) {
    size_t at = 0;
    while ((at = text.find(*secret, at)) != std::string::npos) {
      text.replace(at, secret->size(), "***");
      at += 3;
    }
  }
  return text;
}

// LogBuffer::Add never throws; masking may (out of memory), and then the
// line is counted as dropped rather than logged unmasked.
void KeyedSink::AddLog(LogLevel level, std::string text) noexcept {
  std::string masked;
  try {
    masked = Masked(std::move(text));
  } catch (...) {
    logs_.CountDropped(1);
    return;
  }
  logs_.Add(level, std::move(masked));
}

std::vector<LogLine> KeyedSink::TakeLogs() { return logs_.Take(); }

}  // namespace outbox
