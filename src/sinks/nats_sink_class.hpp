// The NATS sink's class: one libnats connection and its reply inbox, used
// only from the owner's thread. Private to the NATS sink's files:
// nats_sink.cpp builds it, nats_connection.cpp connects and watches the
// connection, nats_commands.cpp sends each message (and the stream
// lookups), nats_delivery.cpp judges each answer into an outcome as it
// comes. Pipelined (keyed_sink.hpp): several Sends may be open at once on
// the one connection. Everything else sees only nats_sink.hpp.
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
// the background, and Send fails at once while it has no connection. A
// server that stops answering keeps its connection (nats_delivery.cpp), so
// that Send does not make that wait again while it is stopped.
#pragma once

#include <nats/nats.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/sink.hpp"
#include "sinks/keyed_sends.hpp"
#include "sinks/keyed_sink.hpp"
#include "sinks/nats_inbox.hpp"
#include "sinks/nats_options.hpp"
#include "sinks/nats_replies.hpp"

namespace outbox {

class NatsSink final : public KeyedSink {
 public:
  NatsSink(const std::string &name, NatsOptions options);
  ~NatsSink() override;
  NatsSink(const NatsSink &) = delete;
  NatsSink &operator=(const NatsSink &) = delete;

  bool NeedsRecreate() const override { return false; }  // it reconnects by itself
  std::string State() const override;

 private:
  // A stream lookup ($JS.API.STREAM.NAMES for one subject) for a Send's
  // messages that had no responders.
  struct Lookup {
    uint64_t ticket = 0;  // the Send it serves
    std::string subject;
    uint64_t reply = 0;
    Clock::time_point deadline;
    std::vector<SendRef> waiting;  // its messages, awaiting its answer
    bool done = false;
    // Once done: what it says of the subject's messages.
    DeliveryStatus status = DeliveryStatus::kRetriable;
    std::string error;
    bool answered = false;  // JetStream answered (not a timeout)
  };

  // KeyedSink's part (nats_delivery.cpp).
  bool Connect(InterruptCheck interrupted, std::string *error) override;
  void Step(int64_t wait_ms) override;
  std::string UpText() const override;

  // nats_connection.cpp
  bool EnsureConnection(std::string *error);
  void Disconnect() noexcept override;
  bool ConnectionLost(std::string *reason);
  uint64_t Reconnects();
  std::string ConnectionError(const std::string &what);
  static std::string LastErrorText();

  // nats_commands.cpp
  void SendReady();
  bool SendMessage(SendRef ref);
  bool SendLookup(SendRef ref);
  bool PublishRaw(const std::string &subject, uint64_t reply, std::string_view body,
                  const std::vector<Header> &headers, natsStatus *status);

  // nats_delivery.cpp
  void Judge(natsMsg *answer);
  void JudgeMessage(SendRef ref, natsMsg *answer);
  void JudgeLookup(Lookup *lookup, natsMsg *answer);
  void LoseConnection(const std::string &reason, KeyedSends::Loss loss);
  void NoResponders(SendRef ref);
  bool AwaitsLookup(SendRef ref) const;
  void Expire(Clock::time_point now);

  const std::string client_name_;  // "outbox-<sink name>", as the server lists the connection
  const NatsOptions options_;
  const std::string servers_text_;  // "nats://host:port, ...", for messages

  natsConnection *nc_ = nullptr;
  natsSubscription *sub_ = nullptr;
  NatsInbox *inbox_ = nullptr;  // shared with sub_'s handler (see nats_inbox.hpp)
  std::string inbox_prefix_;    // "_INBOX.<nuid>.": reply id n is inbox_prefix_ + n
  natsStatistics *stats_ = nullptr;
  uint64_t reconnects_seen_ = 0;
  uint64_t next_reply_ = 1;  // never reused: a late answer to a Send gone matches nothing
  bool connected_logged_ = false;
  // The last connection error read from libnats that says more than that
  // no server is available (an authorization violation, say): once libnats
  // gives up a connection it reports only the latter. Cleared once connected.
  std::string connect_cause_;
  std::vector<Lookup> lookups_;    // of open Sends
  bool api_silent_ = false;        // JetStream's API had no responders since the last Send
  Clock::time_point last_answer_;  // when the server last answered anything
  uint64_t duplicates_ = 0;        // PubAcks with duplicate:true, not yet logged

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
