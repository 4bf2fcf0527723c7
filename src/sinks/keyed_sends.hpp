// The open Sends of a sink that pipelines over one connection, or several
// used as one (MQTT, NATS): each Send's messages copied, their outcomes
// written into the caller's `out`, the chain of each route and key within a
// Send, what may be sent next, what is in flight under which id of the
// broker's protocol (an MQTT connection's packet identifier, a NATS reply
// id), and when each stops waiting. No client library and no PostgreSQL
// here: the sinks (keyed_sink.hpp) drive their connection and tell this
// what happened; test/unit/keyed_sends_test.cpp checks it alone.
//
// Per-key order: within a Send, a route and key (ChainOf) has at most one
// message in flight, whatever its messages' targets (a route without a
// target sends a key's events to several topics, and their order holds
// across them). Its next one becomes ready when it is delivered, and never
// goes when it fails (kNotSent: it waits behind it). Across Sends nothing
// is chained: the dispatcher never has a route and key in two open Sends.
//
// Lifetime of an `out` array: written only while its Send is open. Close,
// and AbandonAll, forget a Send; nothing writes into its array afterwards,
// whatever its broker still answers (an answer whose id names no open
// message is ignored).
//
// Used from the sink's owner thread only (no lock).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/sink.hpp"

namespace outbox {

// A message of an open Send: the Send's ticket and the message's index in it.
struct SendRef {
  uint64_t ticket = 0;
  size_t index = 0;
};

class KeyedSends {
 public:
  using Clock = std::chrono::steady_clock;

  // The outcome of a message held back behind its key's failed one.
  static constexpr const char *kHeldBack =
      "held back: an earlier event of its key failed in this batch";

  // Opens a Send of messages[0..n), outcomes into out[0..n). Copies the
  // messages (the caller keeps only `out`), chains each keyed message to
  // the next of its route and key, and makes ready the first of each key
  // and every message without a key, in order. Nothing of it is handed out
  // by NextReady after send_until (CutOff). Returns its ticket: never 0,
  // never reused. Throws std::bad_alloc (then nothing is opened).
  // `alone` (one message, Sink::SendAlone): it has the connections to
  // itself; NextReady hands it out once nothing is in flight, and nothing
  // after it until it has its outcome, so that a connection lost while it
  // is out was lost over it or by the broker, never over another message.
  uint64_t Open(const OutMessage *messages, size_t n, Delivery *out, Clock::time_point send_until,
                bool alone = false);

  bool IsOpen(uint64_t ticket) const { return sends_.count(ticket) != 0; }
  // Every message of the Send has its outcome (true for one not open).
  bool Done(uint64_t ticket) const;
  // Forgets the Send: its `out` is never written again.
  void Close(uint64_t ticket) noexcept;
  bool empty() const { return sends_.empty(); }
  // Some open Send has a message without an outcome.
  bool HasOutstanding() const;
  size_t in_flight() const { return in_flight_; }

  // The next message that may be sent now, oldest Send first, each Send's
  // in order; false when there is none. A Send alone not yet done stops
  // the Sends after it (and, once its message is in flight, every Send).
  bool NextReady(SendRef *ref);
  // An open message's copy.
  const OutMessage &Message(SendRef ref) const;
  // Message `ref` was handed to the broker under `wire_id` and waits for
  // its answer until `deadline`. False (and nothing changes) when another
  // message in flight has that id: an answer could not be told apart.
  bool MarkSent(SendRef ref, uint64_t wire_id, Clock::time_point deadline);
  // The message in flight under `wire_id`, if any.
  bool FindSent(uint64_t wire_id, SendRef *ref) const;
  // No answer under its id will settle message `ref` any more (NATS: it
  // awaits a stream lookup); it stays in flight until its deadline.
  void Unbind(SendRef ref);

  // Gives an open message its outcome (a settled or closed one is left
  // alone). Delivered: its key's next message becomes ready. Anything else:
  // its key's later messages in the Send are kNotSent, never sent.
  void Settle(SendRef ref, DeliveryStatus status, std::string error, bool answered);
  // Marks message `ref`, settled kRetriable, as lost with its connection
  // (Delivery::connection_lost): the connection failed as it was sent (the
  // broker may have closed it over that message's first bytes). Call
  // FailOutstanding next: the loss is laid to it, not to the ready ones.
  void MarkLost(SendRef ref) noexcept;

  // The message in flight with the earliest deadline, when that has passed
  // by `now` (with its deadline). Messages are sent with one timeout, so
  // the first sent is the first due.
  bool Overdue(Clock::time_point now, SendRef *ref, Clock::time_point *deadline);
  // How long until the next deadline (a message in flight, or a Send with
  // messages left to send reaching send_until), at most cap_ms, at least 0.
  int64_t MsUntilNextDeadline(Clock::time_point now, int64_t cap_ms);
  // Sends past their send_until: their messages not sent yet are kNotSent
  // with `why` (their keys' earlier messages decide for them).
  void CutOff(Clock::time_point now, const std::string &why);

  // Why a connection is given up, as far as its messages are concerned.
  enum class Loss {
    // The broker closed it, or it failed: maybe over one of the messages
    // on it (one too large for the broker, say), so each is marked
    // connection_lost and is tried alone before it is charged an attempt.
    kMaybeAMessage,
    // A timeout, or a refusal that every message would meet: no message is
    // suspected, and a retry alone would only wait or fail again.
    kNotAMessage,
  };
  // The connection is gone: every message in flight is kRetriable with
  // `reason`, every ready one gets "not sent: " and the reason, and those
  // behind either kNotSent. Every open Send is then done. A ready message
  // was never on the connection, so a loss that may be a message's
  // (kMaybeAMessage) says nothing of it: kRetriable, connection_lost and
  // unsent (it waits as the lost ones do, suspected of nothing), while a
  // Send alone's message not sent yet is kNotSent. Only when no message was
  // on the connection (none in flight, none MarkLost since the last loss)
  // are the ready ones suspected (connection_lost, not unsent): the loss
  // can be laid to nothing else. After kNotAMessage they are kRetriable,
  // not suspected.
  void FailOutstanding(const std::string &reason, Loss loss) noexcept;
  // Every message of one Send, or of all, without an outcome gets
  // kRetriable with `reason`. Returns how many of them were in flight (the
  // broker may still answer them; their ids are forgotten). FailAllRest's
  // `unsent`: none of them was sent (no connection could be made), which
  // Delivery::unsent tells the dispatcher.
  size_t FailRest(uint64_t ticket, const char *reason) noexcept;
  size_t FailAllRest(const char *reason, bool unsent = false) noexcept;
  // FailAllRest, then every Send is forgotten (Close).
  size_t AbandonAll(const char *reason) noexcept;

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  struct Slot {
    size_t next = kNone;  // the next message of its route and key, in its Send
    uint64_t wire_id = 0;
    Clock::time_point deadline;
    bool bound = false;  // wire_id names it in by_wire_
    bool in_flight = false;
    bool settled = false;
    bool alone = false;  // of a Send alone
  };
  struct OpenSend {
    Delivery *out = nullptr;
    size_t settled = 0;
    Clock::time_point send_until;
    std::string bytes;            // every view of the copies points here
    std::vector<Header> headers;  // the copies' headers
    std::vector<OutMessage> messages;
    std::vector<Slot> slots;
    std::deque<size_t> ready;
    bool alone = false;  // Open's `alone`
  };

  OpenSend *Find(uint64_t ticket);
  const OpenSend *Find(uint64_t ticket) const;
  static void Copy(const OutMessage *messages, size_t n, OpenSend *send);
  static void Chain(OpenSend *send);
  void Land(Slot *slot) noexcept;  // no longer in flight
  static void Write(Delivery *d, DeliveryStatus status, const char *error,
                    bool unsent = false) noexcept;
  size_t FailRest(OpenSend *send, const char *reason, bool unsent = false) noexcept;

  std::map<uint64_t, OpenSend> sends_;  // by ticket: oldest first
  std::unordered_map<uint64_t, SendRef> by_wire_;
  std::deque<SendRef> flight_order_;  // as sent (so by deadline); stale ones skipped
  size_t in_flight_ = 0;
  size_t alone_in_flight_ = 0;  // of those, messages of Sends alone
  bool marked_lost_ = false;    // MarkLost since the last FailOutstanding
  uint64_t last_ticket_ = 0;
};

}  // namespace outbox
