// The Sink interface: how the publisher hands a batch of events to a broker
// and learns, per event, what became of it. No PostgreSQL header here or in
// any implementation (src/sinks/): sinks are unit-tested against
// brokers on their own, and their threads can never call into PostgreSQL.
//
// Threading: a Sink is created, used and destroyed by one thread (the
// publisher's main thread). Implementations may run threads of their own
// (librdkafka does) but report back only through Publish/Poll/TakeLogs on the
// owner's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/message_format.hpp"
#include "core/sink_option.hpp"

namespace outbox {

struct Header {
  std::string_view name;
  std::string_view value;
};

// One event to deliver. Views point into memory the caller keeps alive for
// the whole Publish call.
struct OutMessage {
  std::string_view id;      // the event id, canonical UUID text
  std::string_view topic;   // the event's topic
  std::string_view target;  // Kafka topic or Redis key to deliver to
  // Which route of the batch it travels on (an index, the same for every
  // message of one route in one call): per-key order holds per route and
  // key, so sinks chain a call's messages by (route, key), whatever their
  // targets, and never hold one route's message behind another route's.
  int route = 0;
  bool has_key = false;
  std::string_view key;
  std::string_view payload;         // compact JSON text
  const Header *headers = nullptr;  // the user's headers, in jsonb order
  size_t header_count = 0;
  std::string_view headers_json;  // the same headers as a compact JSON object ("{}" if none)
  MessageFormat format = MessageFormat::kRaw;  // the route's (message_format.hpp)
  int64_t created_at = 0;                      // timestamptz: microseconds since 2000-01-01 UTC
  std::string_view source;                     // the CloudEvents source (outbox.cloudevents_source)
};

// What chains a call's keyed messages for per-key order: their route and
// key, whatever their targets. Every sink that holds a key's later messages
// back behind an earlier one groups them by this.
using ChainKey = std::pair<int, std::string_view>;
inline ChainKey ChainOf(const OutMessage &m) { return {m.route, m.key}; }

enum class DeliveryStatus {
  kDelivered,      // the broker acknowledged it
  kRetriable,      // transient (broker down, timeout, leader change): back off, retry
  kRejected,       // the broker refused this message (too large, not authorised,
                   // wrong type): counts as a failed attempt once seen alone
  kNotSent,        // deliberately not sent: an earlier message of the same target
                   // and key failed in this call, and sending this one could
                   // overtake it. Not an attempt: it waits behind that message.
  kTargetRefused,  // the broker answered, and its target cannot take messages
                   // now (Kafka: unknown topic, not authorised for it): an
                   // attempt for the event, not retried alone (its neighbours
                   // are not the cause), and never a sign that the sink is down.
  kTargetDown,     // the target's endpoint failed requests for different events
                   // (an HTTP endpoint that refuses connections or answers 503
                   // to all): not the event's fault (no attempt) and not the
                   // sink's (its other targets go on); the event waits, with a
                   // backoff per target that grows while the target stays down.
};

struct Delivery {
  DeliveryStatus status = DeliveryStatus::kRetriable;
  std::string error;  // empty when delivered; a human-readable reason otherwise
  // When the sink had the broker's answer (microseconds since the Unix
  // epoch, the system clock), 0 when unknown: a late answer's event is
  // recorded published as of then, not as of when a later cycle wrote it.
  int64_t answered_at_us = 0;
  // How long the broker asked us to wait before sending this event again
  // (HTTP Retry-After), in ms; 0 when it did not ask. The next try is not
  // earlier than that, up to the dispatcher's backoff maximum.
  int64_t retry_after_ms = 0;
  // kRetriable only: it failed with its connection (or channel), which was
  // lost while other messages were on it, so the loss may be another
  // message's doing (one the broker closes the connection over). Such a
  // failure counts an attempt against the event only once it fails alone.
  bool connection_lost = false;
  // kRetriable only: the message never reached a connection (none could be
  // made, or the one it waited for was lost before its turn), so the
  // failure says nothing of the message. With connection_lost: it is not
  // suspected (the loss was another's or the broker's) and waits as the
  // lost ones do. Alone (Sink::SendAlone): the sink is down, whatever it
  // answered before.
  bool unsent = false;
};

// The system clock as Delivery::answered_at_us counts it.
int64_t UnixNowUs() noexcept;

enum class LogLevel { kDebug, kInfo, kWarning, kError };

struct LogLine {
  LogLevel level;
  std::string text;
};

class Sink {
 public:
  virtual ~Sink() = default;

  // Deliver n messages and wait until each has an outcome. The wait is
  // bounded by the sink's own delivery timeout (Kafka: message.timeout.ms);
  // besides, `interrupted` (may be null) is checked about every 100 ms and,
  // when it returns true, Publish stops waiting and reports what has no
  // outcome yet as kRetriable with error "interrupted". Fills out[0..n).
  // Never throws. Messages with the same route and key are sent in array
  // order and, as far as the broker protocol allows, arrive in that order,
  // whatever their targets (a route without a target sends a key's events
  // to several topics): the sinks that wait for each answer (Redis, AMQP,
  // NATS, MQTT, HTTP) send a route and key's next message, to any target,
  // only after the one before was taken, and never after it failed
  // (kNotSent). Kafka keeps the order per topic and partition only, and
  // holds back a route and key's later messages after one refused on the
  // spot.
  using InterruptCheck = bool (*)();
  virtual void Publish(const OutMessage *messages, size_t n, Delivery *out,
                       InterruptCheck interrupted) = 0;

  // Pipelined delivery: Send hands n messages to the broker and may return
  // before they have outcomes, and returns a ticket for them; Collect(ticket,
  // ...) waits until every message of that Send has its outcome in the `out`
  // it was given, with the same rules as Publish. Tickets are never reused by
  // a sink (a 64-bit counter), so a stale ticket matches nothing; 0 means the
  // Send settled everything itself and there is nothing to collect. Several
  // Sends may be open at once (so requests stay in flight while the owner
  // prepares the next batch); messages with the same route and key keep
  // their order across them. `out` must stay valid until its Collect or
  // AbandonAll, and every Send must be collected or abandoned. Sinks that
  // cannot pipeline deliver within Send (this default).
  virtual uint64_t Send(const OutMessage *messages, size_t n, Delivery *out,
                        InterruptCheck interrupted) {
    Publish(messages, n, out, interrupted);
    return 0;
  }
  virtual void Collect(uint64_t ticket, InterruptCheck interrupted) {}
  // Send one message that must be alone on the sink's connections: the
  // dispatcher sends a suspect so (suspects.hpp) to learn whether a
  // connection lost under it was lost over it. A sink that keeps several
  // messages in flight hands it to the broker once nothing else is in
  // flight, and nothing after it until it has its outcome; one lost
  // connection then loses it alone, and when the connection is lost before
  // it went, it is kNotSent. Sinks that deliver within Send have nothing
  // else in flight (this default).
  virtual uint64_t SendAlone(const OutMessage *message, Delivery *out, InterruptCheck interrupted) {
    return Send(message, 1, out, interrupted);
  }

  // Collect, waiting at most wait_ms (0: only what has arrived): true when
  // every message of the Send has its outcome (the Send is then closed, as
  // after Collect), false when some have none yet. The Send then stays open
  // and its `out` keeps being filled as answers come (from Poll or a later
  // CollectFor); the sink's own delivery timeout still bounds it. Sinks that
  // deliver within Send are always done (this default).
  virtual bool CollectFor(uint64_t ticket, int64_t wait_ms, InterruptCheck interrupted) {
    (void)wait_ms;
    Collect(ticket, interrupted);
    return true;
  }

  // The longest a Send may take to settle every message, in ms, from the
  // Send (its delivery timeout plus margin); 0 for sinks that deliver within
  // Send.
  virtual int64_t SettleLimitMs() const { return 0; }

  // Give up every open Send at once: stop waiting, fill each open Send's
  // missing outcomes as kRetriable with `reason` (their `out` arrays are
  // still valid when this is called), and forget them, so nothing the sink
  // does later writes into those arrays. Messages already handed to the
  // broker may still arrive (at least once). The owner calls it when it
  // abandons its batches (an error in its transaction). Never throws.
  virtual void AbandonAll(const char *reason) noexcept {}

  // Serve background work (log queue, error events) while idle. Never blocks
  // for long; never throws.
  virtual void Poll() = 0;

  // Log lines gathered since the last call, oldest first.
  virtual std::vector<LogLine> TakeLogs() = 0;

  // True after a fatal error (e.g. Kafka's idempotent producer lost its
  // sequence): the owner must destroy this sink and create a new one.
  virtual bool NeedsRecreate() const = 0;
  // True when the sink keeps so much for the targets it wrote to that its
  // owner should replace it with a fresh one when it has nothing in flight
  // (a Kafka producer keeps every topic it ever wrote to). Nothing failed.
  virtual bool Worn() const { return false; }

  // One word for monitoring: "connected", "connecting", "down", ...
  virtual std::string State() const = 0;
};

// A view's data for C libraries that read "no value" into a null pointer or
// copy from it with memcpy: an empty view's data() may be null, this never
// is.
inline const char *NonNull(std::string_view text) {
  return text.data() != nullptr ? text.data() : "";
}

// For sink factories, inside a catch block: describe the exception being
// handled into *error ("out of memory", its what(), or "unexpected error").
void DescribeCurrentException(std::string *error) noexcept;

}  // namespace outbox
