// The NATS sink's class: one libnats connection and its reply inbox, used
// only from the owner's thread. Private to the NATS sink's files:
// nats_sink.cpp publishes a batch and waits for its answers,
// nats_connection.cpp connects and watches the connection, nats_commands.cpp
// sends each message (and the stream lookups), nats_delivery.cpp judges each
// answer into an outcome. Everything else sees only nats_sink.hpp.
//
// Threads: libnats runs its own (a reader and a flusher per connection, the
// reconnect thread, a delivery thread for the inbox's subscription, and the
// library's timer, callback and collector threads). None of them calls
// anything of ours but NatsInbox's handlers (nats_inbox.hpp) and a connected
// callback that does nothing; the connection's state is read on the owner's
// thread (natsConnection_Status, its reconnect count). They are started with
// every signal blocked (nats_connection.cpp), so that a signal for the
// process (PostgreSQL's SIGTERM, SIGUSR1, SIGHUP, SIGURG for latches) is
// never run on one of them.
//
// Every wait is at most kWaitSliceMs, so `interrupted` is checked about every
// 100 ms; no message waits longer than ack_timeout_ms for its answer. The one
// wait that cannot be interrupted is libnats's first attempt to connect
// (each server at most connect_timeout_ms); after it libnats keeps trying in
// the background, and Publish fails at once while it has no connection.
#pragma once

#include <nats/nats.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "core/log_buffer.hpp"
#include "core/sink.hpp"
#include "sinks/nats_inbox.hpp"
#include "sinks/nats_options.hpp"
#include "sinks/nats_replies.hpp"

namespace outbox {

class NatsSink final : public Sink {
 public:
  NatsSink(const std::string &name, NatsOptions options);
  ~NatsSink() override;
  NatsSink(const NatsSink &) = delete;
  NatsSink &operator=(const NatsSink &) = delete;

  void Publish(const OutMessage *messages, size_t n, Delivery *out,
               InterruptCheck interrupted) override;
  void Poll() override;
  std::vector<LogLine> TakeLogs() override;
  bool NeedsRecreate() const override { return false; }  // it reconnects by itself
  std::string State() const override;

 private:
  using Clock = std::chrono::steady_clock;
  using Millis = std::chrono::milliseconds;

  static constexpr int64_t kWaitSliceMs = 100;
  // Messages in flight at once (each with its own reply id); the rest of a
  // batch follows as answers come.
  static constexpr size_t kMaxInFlight = 1024;
  static constexpr size_t kNone = static_cast<size_t>(-1);

  // One message of the current call.
  struct Slot {
    size_t next = kNone;         // the next message of its subject and key, in this call
    uint64_t reply = 0;          // its reply id, once sent
    Clock::time_point deadline;  // once sent: when it stops waiting for an answer
    bool in_flight = false;
    bool settled = false;
    size_t lookup = kNone;  // after "no responders": the stream lookup it waits for
  };
  // A stream lookup ($JS.API.STREAM.NAMES for one subject) of this call.
  struct Lookup {
    std::string subject;
    uint64_t reply = 0;
    Clock::time_point deadline;
    bool done = false;
    // Once done: what it says of the subject's messages.
    DeliveryStatus status = DeliveryStatus::kRetriable;
    std::string error;
    bool answered = false;  // JetStream answered (not a timeout)
  };
  // What a reply id of this call stands for.
  struct Sent {
    bool lookup = false;
    size_t index = 0;  // into slots_ or lookups_
  };

  // nats_sink.cpp: a batch from start to end.
  void PublishBatch(InterruptCheck interrupted);
  void Chain();
  bool Done() const { return settled_count_ == n_; }
  void Settle(size_t i, DeliveryStatus status, std::string error, bool answered);
  void FailRest(const std::string &reason) noexcept;
  void NoteDown(const std::string &reason);
  void NoteUp();
  std::string Masked(std::string text) const;
  void AddLog(LogLevel level, std::string text) noexcept;

  // nats_connection.cpp
  bool EnsureConnection(std::string *error);
  void Disconnect() noexcept;
  bool ConnectionLost(std::string *reason);
  uint64_t Reconnects();
  std::string ConnectionError(const std::string &what);
  static std::string LastErrorText();

  // nats_commands.cpp
  void SendReady();
  bool SendMessage(size_t i);
  bool SendLookup(size_t i);
  bool PublishRaw(const std::string &subject, uint64_t reply, std::string_view body,
                  const std::vector<Header> &headers, natsStatus *status);

  // nats_delivery.cpp
  void Judge(natsMsg *answer);
  void JudgeMessage(size_t i, natsMsg *answer);
  void JudgeLookup(size_t l, natsMsg *answer);
  void LoseConnection(const std::string &reason);
  void NoResponders(size_t i);
  void Expire(Clock::time_point now);
  int64_t MsUntilNextDeadline(Clock::time_point now);

  const std::string client_name_;  // "outbox-<sink name>", as the server lists the connection
  const NatsOptions options_;
  const std::string servers_text_;  // "nats://host:port, ...", for messages

  natsConnection *nc_ = nullptr;
  natsSubscription *sub_ = nullptr;
  NatsInbox *inbox_ = nullptr;  // shared with sub_'s handler (see nats_inbox.hpp)
  std::string inbox_prefix_;    // "_INBOX.<nuid>.": reply id n is inbox_prefix_ + n
  natsStatistics *stats_ = nullptr;
  uint64_t reconnects_seen_ = 0;
  uint64_t next_reply_ = 1;  // never reused: a late answer to an earlier call matches nothing
  bool down_ = false;        // a Publish found the server or JetStream unusable
  bool connected_logged_ = false;
  std::string last_failure_;  // while down: the reason last logged as a warning
  LogBuffer logs_{"NATS sink log line(s)"};

  // The current call (PublishBatch), cleared at its end.
  const OutMessage *messages_ = nullptr;
  Delivery *out_ = nullptr;
  size_t n_ = 0;
  size_t settled_count_ = 0;
  size_t in_flight_ = 0;
  std::vector<Slot> slots_;
  std::deque<size_t> ready_;  // messages that may be sent now, in order
  std::vector<Lookup> lookups_;
  std::vector<Sent> sent_;           // by reply id - first_reply_
  std::deque<size_t> flight_order_;  // messages sent, in order (so by deadline)
  uint64_t first_reply_ = 0;
  bool answered_ = false;         // some answer came in this call
  bool api_silent_ = false;       // JetStream's API had no responders in this call
  bool connection_lost_ = false;  // this call lost the connection: nothing more is sent
  bool timed_out_ = false;        // a message of this call waited in vain
  uint64_t duplicates_ = 0;       // PubAcks with duplicate:true in this call

  // Reused buffers.
  std::vector<NatsMsgPtr> answers_;
  std::vector<Header> headers_;
  std::string header_scratch_;
  std::string body_scratch_;
  std::string subject_;
  std::string reply_;
  std::string name_;
  std::string value_;
};

}  // namespace outbox
