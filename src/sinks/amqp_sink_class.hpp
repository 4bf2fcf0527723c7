// The AMQP sink's class: one librabbitmq connection with one channel in
// confirm mode, used only from the owner's thread (librabbitmq runs no
// thread of its own and is not thread-safe). Private to the AMQP sink's
// files: amqp_sink.cpp publishes batches, amqp_connection.cpp connects and
// waits for frames, amqp_commands.cpp lays out each message, and
// amqp_delivery.cpp turns the broker's answers into outcomes. Everything
// else sees only amqp_sink.hpp.
//
// Waits: every read is amqp_simple_wait_frame_noblock with at most
// kWaitSliceMs, so `interrupted` is checked about every 100 ms, connecting
// included (the TCP connect is ours, non-blocking; the AMQP handshake is
// read frame by frame). Two waits are librabbitmq's own and bounded but not
// sliced: a TLS handshake (amqp_socket_open_noblock, bounded by
// connect_timeout_ms) and a write into a full socket (see RoomFor in
// amqp_sink.cpp: a message is written only when the socket has room for
// it, so a write waits only when one message is larger than the socket's
// buffer and the broker stops reading in its middle; then for at most
// delivery_timeout_ms, BoundWrites in amqp_connection.cpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/log_buffer.hpp"
#include "core/sink.hpp"
#include "sinks/amqp_library.hpp"
#include "sinks/amqp_options.hpp"

namespace outbox {

class AmqpSink final : public Sink {
 public:
  AmqpSink(const std::string &name, AmqpOptions options);
  ~AmqpSink() override { Disconnect(); }
  AmqpSink(const AmqpSink &) = delete;
  AmqpSink &operator=(const AmqpSink &) = delete;

  void Publish(const OutMessage *messages, size_t n, Delivery *out,
               InterruptCheck interrupted) override;
  void Poll() override;
  std::vector<LogLine> TakeLogs() override;
  bool NeedsRecreate() const override { return false; }  // it reconnects by itself
  std::string State() const override;

 private:
  using Clock = std::chrono::steady_clock;
  using Millis = std::chrono::milliseconds;

  // Longest single wait, so `interrupted` is checked this often.
  static constexpr int kWaitSliceMs = 100;

  // What the latest evidence says about the broker (see State()).
  enum class Connection { kIdle, kConnected, kDown };
  // Why an exchange with the broker ended early.
  enum class Stop { kNone, kFailed, kInterrupted };

  // One message's layout at the broker (amqp_commands.cpp): views into the
  // message and into `scratch`, valid until the next Layout.
  struct Layout {
    std::string scratch_body;
    std::string scratch_headers;
    std::vector<Header> headers;
    std::vector<amqp_table_entry_t> entries;
    std::string encoded;  // the properties encoded once, to check that they fit a frame
    amqp_basic_properties_t properties{};
    size_t properties_size = 0;
    amqp_bytes_t body{};
  };

  // A basic.return being read: its method, then a content header (whose
  // message_id names the message), then body frames to skip.
  struct PendingReturn {
    uint16_t reply_code = 0;
    std::string reply_text;
    bool have_header = false;
    uint64_t body_left = 0;
  };

  // The state of one Publish call. Per route and key, messages form a chain
  // in array order; only a chain's head is ever unconfirmed, and the next
  // goes once the head is confirmed (amqp_sink.cpp).
  struct Batch {
    const OutMessage *messages = nullptr;
    size_t n = 0;
    Delivery *out = nullptr;
    std::vector<bool> settled;
    size_t unsettled = 0;
    std::vector<size_t> ready;  // to send, in order; ready_at is the next one
    size_t ready_at = 0;
    std::vector<size_t> chain_next;          // the next message of i's chain, or n
    std::map<uint64_t, size_t> unconfirmed;  // delivery tag -> message, oldest first
    std::map<uint64_t, Clock::time_point> sent_at;
    std::vector<uint64_t> body_size;    // per message, once sent
    std::vector<std::string> returned;  // a basic.return's reason, per message
    std::vector<DeliveryStatus> returned_status;
    std::unordered_map<std::string_view, size_t> by_id;  // message_id -> message
    std::optional<PendingReturn> pending_return;
  };

  // amqp_connection.cpp
  Stop Connect(InterruptCheck interrupted, std::string *error);
  Stop OpenSocket(Clock::time_point deadline, InterruptCheck interrupted, std::string *error);
  Stop ConnectTcp(int *fd, Clock::time_point deadline, InterruptCheck interrupted,
                  std::string *error);
  bool SetUpTls(amqp_socket_t *socket, std::string *error);
  void BoundWrites(int fd) const;
  Stop Handshake(Clock::time_point deadline, InterruptCheck interrupted, std::string *error);
  Stop OpenChannel(Clock::time_point deadline, InterruptCheck interrupted, std::string *error);
  Stop WaitMethod(amqp_channel_t channel, amqp_method_number_t expected, Clock::time_point deadline,
                  InterruptCheck interrupted, amqp_method_t *method, std::string *error);
  int ReadFrame(int timeout_ms, amqp_frame_t *frame);
  bool OnConnectionMethod(const amqp_method_t &method, std::string *error);
  bool Drain(std::string *error);
  void CloseChannelOk(amqp_channel_t channel);
  void Disconnect() noexcept;
  std::string LibraryError(int status) const;

  // amqp_commands.cpp
  std::optional<std::string> LayOut(const OutMessage &m, Layout *layout,
                                    DeliveryStatus *refusal) const;
  size_t WireSize(const Layout &layout, std::string_view routing_key) const;
  bool RoomFor(size_t bytes) const;

  // amqp_delivery.cpp
  bool OnChannelFrame(Batch *b, const amqp_frame_t &frame, std::string *error);
  void Confirm(Batch *b, uint64_t tag, bool multiple, bool ack);
  void OnChannelClosed(Batch *b, uint16_t code, const std::string &text);
  void Settle(Batch *b, size_t i, DeliveryStatus status, std::string error, bool answered);
  void HoldChain(Batch *b, size_t i, const std::string &why);
  void FailUnsettled(Batch *b, const std::string &reason) noexcept;

  // amqp_sink.cpp
  void PublishBatch(Batch *b, InterruptCheck interrupted);
  void Abandon(const Batch &b, const char *reason) noexcept;
  bool EnsureConnected(Batch *b, InterruptCheck interrupted);
  void BuildChains(Batch *b);
  Stop SendReady(Batch *b, Layout *layout, std::string *error);
  void GiveUp(Batch *b, const std::string &reason);
  void Interrupted(Batch *b);
  void NoteDown(const std::string &reason);
  std::string Masked(std::string text) const;
  void AddLog(LogLevel level, std::string text) noexcept;

  const std::string name_;
  const AmqpOptions options_;
  const std::string endpoint_;  // "host:port", for messages
  amqp_connection_state_t conn_ = nullptr;
  amqp_channel_t channel_ = 0;  // 0: no channel open on conn_
  amqp_channel_t last_channel_ = 0;
  int channel_max_ = 0;
  int frame_max_ = 0;
  uint64_t next_tag_ = 1;  // the delivery tag of the next publish on channel_
  bool blocked_ = false;   // connection.blocked: the broker stopped taking publishes
  std::string blocked_reason_;
  // The broker's limit on a message's body, learned from its refusal of a
  // larger one on this connection: larger messages are refused here, so
  // that they no longer take their neighbours' channel down with them.
  std::optional<uint64_t> max_body_;
  Connection connection_ = Connection::kIdle;
  std::string last_failure_;  // while down: the reason last logged as a warning
  LogBuffer logs_{"AMQP sink log line(s)"};
};

}  // namespace outbox
