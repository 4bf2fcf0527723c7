// What the MQTT and NATS sinks share: pipelined delivery over one
// connection, or several used as one (Send, CollectFor, Collect, AbandonAll, Publish as Send plus
// Collect, Poll) around their open Sends (keyed_sends.hpp), and the record
// of the broker being down or up in their logs. A sink derived from it
// connects, sends what is ready and serves its connection (Connect,
// SendReady, Step); this class decides when, and for how long.
//
// So a broker that keeps the connection but stops answering holds nothing
// but its own Sends: Send returns once the messages are handed over, and
// CollectFor returns within its wait whatever the broker does. Each
// message still waits for its answer at most ack_timeout_ms after it was
// sent, and no message of a Send is sent later than connect_timeout_ms +
// ack_timeout_ms after the Send (its unsent rest is kNotSent then), so
// every Send settles within SettleLimitMs.
//
// Used from the owner's thread only; the derived sinks' library threads
// never reach this class (nats_inbox.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/log_buffer.hpp"
#include "core/sink.hpp"
#include "sinks/keyed_sends.hpp"

namespace outbox {

class KeyedSink : public Sink {
 public:
  // A Send's life, in order.
  // Connects if need be (without waiting for the broker), copies the
  // messages and hands over what may go; 0 when everything settled at once
  // (a connection that cannot even be started, out of memory).
  uint64_t Send(const OutMessage *messages, size_t n, Delivery *out,
                InterruptCheck interrupted) override;
  // Send, with the connections to itself (KeyedSends::Open's `alone`).
  uint64_t SendAlone(const OutMessage *message, Delivery *out, InterruptCheck interrupted) override;
  // Serves the connection for up to wait_ms, filling any open Send's `out`
  // as answers come.
  bool CollectFor(uint64_t ticket, int64_t wait_ms, InterruptCheck interrupted) override;
  void Collect(uint64_t ticket, InterruptCheck interrupted) override;
  void AbandonAll(const char *reason) noexcept override;
  // connect_ms + 2 * ack_timeout_ms + a margin (see the top of this file).
  int64_t SettleLimitMs() const override;
  // Send and Collect.
  void Publish(const OutMessage *messages, size_t n, Delivery *out,
               InterruptCheck interrupted) override;
  // Step without waiting: keepalives, answers, deadlines.
  void Poll() override;
  std::vector<LogLine> TakeLogs() override;

 protected:
  using Clock = std::chrono::steady_clock;
  using Millis = std::chrono::milliseconds;

  // Every wait is at most this long, so `interrupted` is checked about this
  // often.
  static constexpr int64_t kWaitSliceMs = 100;
  // Messages in flight at once, over all open Sends; the rest follow as
  // answers come.
  static constexpr size_t kMaxInFlight = 1024;

  // `log_what` names the sink's log lines (LogBuffer); `secrets` are masked
  // in every log line (those shorter than 4 bytes are not: they could not
  // be told apart from ordinary words).
  KeyedSink(const char *log_what, std::vector<std::string> secrets, int64_t connect_ms,
            int64_t ack_timeout_ms);

  // The derived sink's part, on the owner's thread. Each may throw
  // std::bad_alloc; this class then fails every open Send's rest and calls
  // Disconnect.
  // Connect: a usable connection for a new Send's messages (made now, or
  // kept; a lost one settles the open Sends first); false with *error.
  virtual bool Connect(InterruptCheck interrupted, std::string *error) = 0;
  // Step: sends what is ready, waits up to wait_ms for answers (less when
  // a deadline comes sooner) and settles what they say, what overran its
  // deadline, and everything outstanding when the connection is lost.
  virtual void Step(int64_t wait_ms) = 0;
  // Drop the connection. Never throws.
  virtual void Disconnect() noexcept = 0;
  // Messages still in flight were given up (interrupted, abandoned, or
  // their Send out of time): the broker may still answer them. A sink whose
  // protocol reuses ids (MQTT) drops the connection. Never throws.
  virtual void Forgotten() noexcept {}

  // The broker is unusable: one warning per distinct reason, repeats (the
  // publisher retries a down sink after backing off) at debug.
  void NoteDown(const std::string &reason);
  // The broker acknowledged a message: whatever was wrong has passed
  // (UpText is logged when it was down).
  void NoteUp();
  virtual std::string UpText() const = 0;
  bool down() const { return down_; }
  std::string Masked(std::string text) const;
  void AddLog(LogLevel level, std::string text) noexcept;

  int64_t ack_timeout_ms() const { return ack_timeout_ms_; }
  // What a Send's messages not sent in time are told (KeyedSends::CutOff).
  std::string CutOffText() const;

  KeyedSends sends_;

 private:
  uint64_t Open(const OutMessage *messages, size_t n, Delivery *out, InterruptCheck interrupted,
                bool alone);
  bool Wait(uint64_t ticket, int64_t wait_ms, InterruptCheck interrupted);
  void Recover(const char *reason) noexcept;

  const std::vector<std::string> secrets_;
  const int64_t connect_ms_;
  const int64_t ack_timeout_ms_;
  bool down_ = false;
  std::string last_failure_;  // while down: the reason last logged as a warning
  LogBuffer logs_;
};

}  // namespace outbox
