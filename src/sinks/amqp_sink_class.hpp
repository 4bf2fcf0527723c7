// The AMQP sink's class: one librabbitmq connection with one channel in
// confirm mode, used only from the owner's thread (librabbitmq runs no
// thread of its own and is not thread-safe). Batches are pipelined
// (keyed_sink.hpp): several Sends may be open, their messages on the one
// channel. Private to the AMQP sink's files: amqp_sink.cpp publishes what is
// ready, amqp_connection.cpp connects and reads frames, amqp_commands.cpp
// lays out each message, and amqp_delivery.cpp turns the broker's answers
// into outcomes. Everything else sees only amqp_sink.hpp.
//
// Waits: nothing waits longer than the Step it is in (at most kWaitSliceMs
// from KeyedSink, so `interrupted` is checked about every 100 ms): the TCP
// connect is ours and non-blocking, and the handshake and every channel are
// made a frame at a time as the broker answers. Two waits are bounded but
// not sliced: a TLS connection, opened by librabbitmq
// (amqp_socket_open_noblock, bounded by connect_timeout_ms), and a write
// into a full socket (see RoomFor in amqp_commands.cpp: a message is
// written only when the socket has room for it, so a write waits only when
// one message is larger than the socket's buffer and the broker stops
// reading in its middle; then for at most delivery_timeout_ms, BoundWrites
// in amqp_connection.cpp). Name resolution is the resolver's.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/sink.hpp"
#include "sinks/amqp_library.hpp"
#include "sinks/amqp_options.hpp"
#include "sinks/keyed_sink.hpp"

namespace outbox {

class AmqpSink final : public KeyedSink {
 public:
  AmqpSink(const std::string &name, AmqpOptions options);
  ~AmqpSink() override { Disconnect(); }
  AmqpSink(const AmqpSink &) = delete;
  AmqpSink &operator=(const AmqpSink &) = delete;

  bool NeedsRecreate() const override { return false; }  // it reconnects by itself
  std::string State() const override;

 private:
  // Where a connection (or a channel) being made stands: each phase waits
  // for one answer of the broker, driven by Step (amqp_connection.cpp).
  enum class Phase {
    kNone,     // not connecting
    kTcp,      // the TCP connect in progress (tcp_fd_)
    kStart,    // the protocol header sent; connection.start awaited
    kTune,     // start-ok sent (the login); connection.tune awaited
    kOpen,     // tune-ok and connection.open sent; open-ok awaited
    kChannel,  // channel.open sent on opening_channel_; open-ok awaited
    kSelect,   // confirm.select sent; select-ok awaited
  };
  // An address to connect to, as the resolver gave it.
  struct Address {
    int family = 0;
    int socktype = 0;
    int protocol = 0;
    sockaddr_storage addr{};
    socklen_t len = 0;
  };

  // While a message waits for room in the socket, how long a wait for the
  // broker's frames lasts before looking again.
  static constexpr int kRoomWaitMs = 5;
  // Frames read in one Step at most, so that a broker that never stops
  // sending cannot keep a Step from returning.
  static constexpr int kMaxFramesPerStep = 4096;

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

  // A message published on the current channel and not confirmed yet.
  // Its KeyedSends wire id is WireId(tag); a message a Send gave up stays
  // here until its confirm or the channel's end (the broker may still
  // answer it, and a `multiple` confirm counts it).
  struct Unconfirmed {
    std::string id;  // the message_id a basic.return names it by
    uint64_t body_size = 0;
    // Set by a basic.return, which precedes the message's confirm.
    bool returned = false;
    DeliveryStatus returned_status = DeliveryStatus::kTargetRefused;
    std::string returned_why;
  };

  // KeyedSink's part (amqp_sink.cpp, amqp_delivery.cpp).
  bool Connect(InterruptCheck interrupted, std::string *error) override;
  void Step(int64_t wait_ms) override;
  void Disconnect() noexcept override;
  void Forgotten() noexcept override;
  std::string UpText() const override;

  // amqp_connection.cpp
  bool StartConnecting(InterruptCheck interrupted, std::string *error);
  bool OpenTlsSocket(std::string *error);
  bool SetUpTls(amqp_socket_t *socket, std::string *error);
  bool ConnectNextAddress(std::string *error);
  void BoundWrites(int fd) const;
  bool TcpConnected(int fd, std::string *error);
  bool SendProtocolHeader(std::string *error);
  void StepConnecting(int64_t wait_ms);
  bool AdvanceConnecting(int64_t wait_ms, std::string *error);
  bool OnHandshakeFrame(const amqp_frame_t &frame, std::string *error);
  bool Advance(const amqp_method_t &m, std::string *error);
  bool SendStartOk(const amqp_method_t &m, std::string *error);
  bool SendTuneOkAndOpen(const amqp_method_t &m, std::string *error);
  bool StartChannel(std::string *error);
  int ReadFrame(int timeout_ms, amqp_frame_t *frame);
  bool OnConnectionMethod(const amqp_method_t &method, std::string *error);
  void CloseChannelOk(amqp_channel_t channel);
  std::string LibraryError(int status) const;

  // amqp_commands.cpp
  std::optional<std::string> LayOut(const OutMessage &m, Layout *layout,
                                    DeliveryStatus *refusal) const;
  size_t WireSize(const Layout &layout, std::string_view routing_key) const;
  bool RoomFor(size_t bytes) const;

  // amqp_delivery.cpp
  bool OnFrame(const amqp_frame_t &frame);
  void OnChannelFrame(const amqp_frame_t &frame);
  void Confirm(uint64_t tag, bool multiple, bool ack);
  void OnChannelClosed(uint16_t code, const std::string &text);
  void LoseConnection(const std::string &reason);

  // amqp_sink.cpp
  bool SendReady();
  bool PublishOne(SendRef ref, const amqp_bytes_t &exchange);
  bool EnsureChannel();
  void CheckStalled();
  // The KeyedSends id of the current channel's delivery tag: channels are
  // numbered anew when one closes, and tags restart at 1 on each.
  uint64_t WireId(uint64_t tag) const { return (channel_epoch_ << 40) | tag; }

  const std::string name_;
  const AmqpOptions options_;
  const std::string endpoint_;  // "host:port", for messages
  amqp_connection_state_t conn_ = nullptr;
  Phase phase_ = Phase::kNone;
  Clock::time_point connect_deadline_;  // of the connection or channel being made
  int tcp_fd_ = -1;                     // while kTcp; then librabbitmq's
  std::vector<Address> addresses_;      // what the resolver gave, tried in turn
  size_t next_address_ = 0;
  bool connection_open_ = false;  // connection.open-ok came on conn_
  amqp_channel_t opening_channel_ = 0;
  amqp_channel_t channel_ = 0;  // 0: no channel open on conn_
  amqp_channel_t last_channel_ = 0;
  uint64_t channel_epoch_ = 0;  // one more for every channel opened
  int channel_max_ = 0;
  int frame_max_ = 0;
  uint64_t next_tag_ = 1;  // the delivery tag of the next publish on channel_
  bool blocked_ = false;   // connection.blocked: the broker stopped taking publishes
  std::string blocked_reason_;
  // The broker's limit on a message's body, learned from its refusal of a
  // larger one on this connection: larger messages are refused here, so
  // that they no longer take their neighbours' channel down with them.
  std::optional<uint64_t> max_body_;
  std::map<uint64_t, Unconfirmed> unconfirmed_;  // by delivery tag, oldest first
  // message_id (a view of its Unconfirmed::id) -> tag, for returns.
  std::unordered_map<std::string_view, uint64_t> tag_of_id_;
  std::optional<PendingReturn> pending_return_;
  // A ready message could not go (the broker blocks publishing, or the
  // socket had no room), and since when nothing was published or confirmed.
  bool stuck_ = false;
  Clock::time_point stuck_since_;
  Clock::time_point progress_;
  Layout layout_;
};

}  // namespace outbox
