// What happens to each claimed event: route it, hold it behind an earlier
// event of its key, hand it to its sink, and turn the broker's answer into
// the row's next state. PostgreSQL-free (unit-tested with a fake sink); the
// publisher's claim code reads rows into EventRow and writes RowOutcome back.
//
// Rules (the contract's, and what the publisher keeps beyond it):
// - No route, or a paused route: the event waits (next_attempt_at =
//   infinity) and flows once routes change (a route added or resumed).
// - Per-key order: an event is never sent while an earlier event of the same
//   route and key waits for a retry (OrderGuard); it is parked behind it.
// - A sink that delivers nothing of a call and reports only transient errors
//   is down: its events are parked until the sink's own backoff expires,
//   without counting attempts (an outage is not the events' fault), and one
//   log line says so; another line says when it is back.
// - Transient errors while the sink delivers other events count an attempt
//   for that event; a message the broker refuses (kRejected) in a call with
//   others is first retried on its own, and counts an attempt only then, so
//   one poison event never takes its neighbours down.
// - A target the broker refuses (kTargetRefused: a Kafka topic the cluster
//   lacks or the producer may not write) counts an attempt per event, never
//   makes the sink down, and is not retried alone.
// - A target whose endpoint is down (kTargetDown: an HTTP endpoint failing
//   requests for different events) parks its events without attempts,
//   with a backoff per target, and never makes the sink down, so the sink's
//   other targets go on. A broker's Retry-After (Delivery::retry_after_ms)
//   delays a retry or a park up to backoff_max.
// - An event lost with its connection (Delivery::connection_lost) counts
//   no attempt and says nothing of the sink: sent with others once more,
//   then alone, in a group of its own, one per sink at a time (the others
//   park, due when that group's batch is finished), handed to the sink as
//   a message alone on its connections (Sink::SendAlone), and charged only
//   for failing alone while the sink answers others (suspects.hpp). Such a
//   group is sent and settled after the sink's other groups of its batch.
// - After outbox.max_attempts failed attempts an event is dead, and stops
//   holding back its key.
//
// - Pipelining: a batch begun while earlier batches are in flight never
//   sends an event whose route and key has an event in one of them. Such
//   events are deferred: decided and sent when their batch is finished,
//   after the earlier batches' outcomes are known (a failure there parks
//   them behind it). So per key at most one batch is in flight, and a later
//   event of a key never reaches a broker before an earlier one's fate is
//   settled.
//
// Threading and errors: used by the publisher's main thread only. No method
// but the constructor throws (use Create): failures are reported through
// outcomes, return values and logs, so every call is its own exception
// boundary. An exception (out of memory) while loading the configuration or
// while a window of batches is in flight leaves no half-made decision
// behind: Configure, NoteWaiting, Begin and Finish say they failed, every
// batch in flight is abandoned (AbandonAll), and the caller gives up the
// whole cycle (its events stay pending; per-key order is rebuilt from the
// database). Deciding what is left of a window after part of it went wrong
// is where order used to break.
//
// Slow sinks: Finish waits at most settings.ack_wait_ms for a sink's answers
// (0: as long as the sink's own delivery timeout). What has not been
// answered by then does not hold up the batch: those events are parked
// until the sink must have settled them (SettleLimitMs plus a margin),
// without an attempt, their keys held back, and the sink's answers, when
// they come, are judged as usual and handed out as late outcomes
// (SettleLate, NextLateOutcome), which the caller writes if the row is still
// as parked. A later event of a key whose earlier event awaits a late
// answer is parked, at a time, for about as long as that answer has been
// awaited (Verdicts::LateRecheckDueUs: 8 ms to 1.5 s, the waiting keys due
// together), and goes once that answer is in. Two cases, told apart by
// whether the sink answers anything:
// - The sink answers others (some of the group, or another group within an
//   ack wait before this one was sent): the trouble is the unanswered
//   events' topic or partition (a topic the cluster lacks, a partition
//   without a leader, which librdkafka holds for message.timeout.ms). The
//   group's answered events are judged at once; only the unanswered ones
//   wait for late answers, and the sink takes new events (but for their
//   keys). Their topics become suspect on the sink for kSuspectTopicMs (an
//   answer for the topic ends that unless one of its events there is
//   overdue: LateAnswers::NoteAnswered): a later group
//   waits for its other events' answers only, not for the ack wait, so the
//   sink's healthy topics are not slowed down by one that is not; a group
//   of nothing but suspect topics is given up at once, even when the sink
//   answered nothing lately (OnlySuspectsLeft), so it does not hold the
//   cycle (whether the sink is slow is judged as for any group).
// - It answers nothing: the sink is slow as a whole (a broker that stopped
//   answering). No new group is sent to it: its events are parked (as a key
//   behind a late answer is) and its topics are left alone by the claims
//   (TopicsBehindDownSinks), so it holds one window's batches, not one per
//   cycle.
// A sink changed or removed (Configure) while some of its groups await late
// answers keeps its old producer for them until they are in (or it gives
// them up at its own deadline); the new sink under that name starts afresh.
// A late answer whose route is gone meanwhile is recorded as it came when
// the broker took the event (published), and sends it again otherwise.
// A refusal in a late answer is not counted against the events sent with it
// (see SinkState::wait_in_full). A transient failure in a late answer of the
// first kind parks its event without an attempt and without making the sink
// down (it answers the others).
//
// Lifetime of a batch: Begin returns a ticket that no later batch reuses;
// the rows and the outcome array stay the caller's and must stay valid until
// Finish(ticket) or AbandonAll(). The caller's memory for them is short-lived
// (a transaction's): when the caller gives up (an ERROR), it calls AbandonAll
// before that memory goes, and nothing of the batch is touched again.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/dispatch_rows.hpp"
#include "core/late_answers.hpp"
#include "core/log_buffer.hpp"
#include "core/order_guard.hpp"
#include "core/sink.hpp"
#include "core/sink_registry.hpp"
#include "core/verdict.hpp"

namespace outbox {

class Dispatcher {
 public:
  using Ticket = uint64_t;

  explicit Dispatcher(SinkFactory factory);
  ~Dispatcher();
  // Never copied: its parts point at each other.
  Dispatcher(const Dispatcher &) = delete;
  Dispatcher &operator=(const Dispatcher &) = delete;
  // A new Dispatcher, or nullptr when it cannot be built (out of memory, no
  // random source). Never throws.
  static Dispatcher *Create(SinkFactory factory) noexcept;

  // Install the routing table and the sink definitions. Sinks whose kind or
  // options changed, or that disappeared, are closed; new ones are created
  // on first use. Clears the order state (the caller re-notes waiting events
  // with NoteWaiting, since routes decide which events share an order).
  // Batches still in flight are abandoned first (see AbandonAll). Returns
  // false when it could not (out of memory): then no route is known (every
  // event would wait for one) until a later call succeeds, and the caller
  // must not decide anything with it.
  bool Configure(const RouteRow *routes, size_t nroutes, const SinkRow *sinks,
                 size_t nsinks) noexcept;

  // An event found waiting for a retry when (re)building the order state.
  // Returns false when it could not be noted (out of memory): the order state
  // is incomplete, and the caller must load the configuration again before
  // deciding anything.
  bool NoteWaiting(const EventRow &event, int64_t until_us) noexcept;

  // Whether some key is held back for an event whose retry time is before
  // `before_us` (OrderGuard::AnyWaitingUntilBefore). The caller reloads the
  // order state from the database when this stays true: an event another
  // publisher recorded (a late answer that reached the publisher that sent
  // it, after the key's slot moved here) never comes back to this one, and
  // would hold its key back forever.
  bool HasOverdueWaiting(int64_t before_us) const noexcept {
    return guard_.AnyWaitingUntilBefore(before_us);
  }

  // An event the caller marks dead without sending it (too large to become
  // a message): it stops holding back its key, as a dead event does (only
  // id, topic, key and has_key are read). False when that failed (out of
  // memory): the caller must load the configuration again.
  bool NoteDead(const EventRow &event) noexcept;

  // Decide and deliver a claimed batch (rows in id order) in two halves, so
  // that several batches can be in flight at once: Begin decides and sends
  // a batch without waiting for the brokers (except for events deferred
  // behind an earlier batch, see above) and returns its ticket;
  // Finish(ticket) waits for that batch's answers and fills its out[0..n).
  // `interrupted` is checked while waiting for brokers. Batches are begun in
  // id order (a later batch holds only later events) and finished in the
  // order begun: finishing a batch first finishes any batch begun before it.
  // A ticket Finish does not know (abandoned, already finished) is ignored.
  // rows, settings' strings and out must stay valid until Finish or
  // AbandonAll.
  // Failure: Begin returns 0, Finish false, when an exception (out of memory)
  // interrupted the work. Every batch in flight has then been abandoned
  // (AbandonAll): the outcome arrays of the whole window say nothing that
  // may be written, and the caller abandons its cycle.
  Ticket Begin(const EventRow *rows, size_t n, const DispatchSettings &settings, RowOutcome *out,
               Sink::InterruptCheck interrupted) noexcept;
  bool Finish(Ticket ticket, Sink::InterruptCheck interrupted) noexcept;

  // Give up every batch in flight: the sinks stop waiting for them and
  // forget them, and neither their rows nor their outcome arrays are read or
  // written again (the caller may already have freed them). Their events
  // stay as the caller's database has them (pending); what the brokers
  // already got may arrive anyway (at least once). The order state may now
  // disagree with the database: the caller reloads (Configure, NoteWaiting)
  // before its next batch.
  void AbandonAll() noexcept;

  // Batches begun and not yet finished or abandoned.
  size_t InFlight() const noexcept { return flights_.size(); }

  // Slow sinks (see above). HasLate: some answers are still awaited.
  // LateArrived: gathers what has arrived without waiting, true when some
  // late group is complete. SettleLate judges the complete ones (with this
  // cycle's settings) into late outcomes, which NextLateOutcome hands out one
  // by one. SettleLate fails (out of memory) like Finish: everything late is
  // abandoned, the order state is cleared, and the caller reloads it before
  // deciding anything. Late outcomes not written (the caller's transaction
  // failed) are lost harmlessly: their rows wait as parked and are sent
  // again when that time is up (at least once).
  bool HasLate() const noexcept { return !late_.empty(); }
  // The ids of the events whose late answers this dispatcher awaits. Rows
  // parked for a late answer that is not among them (their publisher
  // exited, or gave up the key slot) will never get one: the caller makes
  // them due instead of letting them wait out the sink's whole timeout.
  std::vector<std::string> LateIds() const;  // may throw bad_alloc
  bool LateArrived() noexcept;
  bool SettleLate(const DispatchSettings &settings) noexcept;
  bool NextLateOutcome(LateOutcome *out) noexcept;
  // The bounds of "Slow sinks", as verdict.hpp (kLateRecheckUs: the
  // step at which a later event of a key is looked at again, at the most,
  // behind an event of that key whose sink has not answered yet, and at
  // which an event of a sink that answers nothing is) and late_answers.hpp
  // define them.
  static constexpr int64_t kLateRecheckUs = Verdicts::kLateRecheckUs;
  static constexpr int64_t kLateMarginMs = LateAnswers::kLateMarginMs;
  static constexpr size_t kMaxLateGroups = LateAnswers::kMaxLateGroups;
  // With this many groups awaiting late answers, events of topics suspect
  // on their sink are not sent (Decide): the rest of kMaxLateGroups stays
  // for groups of the sinks' other topics.
  static constexpr size_t kLateGroupsBeforeSuspectsWait = kMaxLateGroups / 2;
  static constexpr int64_t kSuspectTopicMs = LateAnswers::kSuspectTopicMs;
  static constexpr long kHeldAfterWholeGroups = LateAnswers::kHeldAfterWholeGroups;
  static constexpr size_t kHeldAfterLateEvents = LateAnswers::kHeldAfterLateEvents;

  // Serve the sinks' background work while idle.
  void Poll() noexcept;

  // The earliest time after `after_us` at which a sink that is down should
  // be tried again, or 0. The claims leave its topics alone until then
  // (TopicsBehindDownSinks); a time the last claims were made after has been
  // acted on (its topics were claimed), and what is left of its events wakes
  // the publisher through their own retry times. A sink that owes late
  // answers has none: they wake the publisher.
  int64_t NextSinkRetryUs(int64_t after_us = 0) const noexcept;

  // The patterns of the routes that are not paused, as LIKE patterns
  // (route_match.hpp), sorted: the claims take only events of topics one of
  // them matches, and leave the others (no route, or a paused one) in place.
  // A topic whose best route is paused but which an unpaused route also
  // matches is claimed, and parked (kParkNoRoute).
  std::vector<std::string> DeliverableLikePatterns() const;  // may throw bad_alloc

  // Topics whose events were parked because their sink is down, while that
  // sink is still down and not due for another try at now_us. The claims
  // leave these topics' events alone until then: claiming them would only
  // park them again, rewriting every waiting event once per sink backoff
  // (a day-long outage would rewrite the backlog thousands of times). So an
  // outage costs one probe batch per backoff, and events emitted meanwhile
  // are not written at all until the sink is back. At most
  // kMaxTopicsBehindDownSinks topics are tracked; beyond that the others are
  // claimed and parked as before.
  std::vector<std::string> TopicsBehindDownSinks(int64_t now_us) const;  // may throw bad_alloc
  static constexpr size_t kMaxTopicsBehindDownSinks = SinkRegistry::kMaxTopicsBehindDownSinks;

  // The next log line, oldest first, copied into text[0..size) (cut on a
  // byte boundary, NUL-terminated); false when there is none.
  bool NextLog(LogLevel *level, char *text, size_t size) noexcept;

  // For monitoring: "name=state" for each sink, comma-separated, copied into
  // text[0..size) (cut, NUL-terminated; empty when out of memory).
  void SinkStates(char *text, size_t size) const noexcept;

 private:
  // A batch between Begin and Finish.
  struct Flight {
    Ticket ticket = 0;
    const EventRow *rows = nullptr;
    size_t n = 0;
    DispatchSettings settings;
    RowOutcome *out = nullptr;
    std::vector<int> route_of;  // per row: index in routes_, or -1
    std::vector<SinkGroup> groups;
    // Rows whose route and key had an event in an earlier batch in flight
    // when this one began: decided and sent by Finish, in id order.
    std::vector<size_t> deferred;
    // By sink: how many of its events this batch parked waiting for their
    // turn alone (suspects.hpp), which spaces their due times; leads
    // (below) and the others counted apart.
    std::map<std::string, int64_t> turn_waiters;
    std::map<std::string, int64_t> lead_waiters;
    // Suspects that head later events of their key in this batch (leads),
    // how many of them each sink has, and by sink the first lead that may
    // take the turn now (NoteLeads).
    std::set<size_t> leads;
    std::map<std::string, int64_t> leads_of_sink;
    std::map<std::string, size_t> first_lead;
    // The keys whose event this batch sends alone, or parks as a lead for
    // its turn: their later events in it are due with it (Decide).
    std::set<RouteKey> held_keys;
    // The sinks whose free turn a lead took ahead of older suspects.
    std::set<std::string> lead_jumped;
  };

  // Find the flight's leads (Flight::leads) among the rows not deferred.
  void NoteLeads(Flight *flight, const std::vector<bool> &deferred);
  // A suspect of the flight (row i) waits for its sink's turn alone, held
  // by batch `turn`.
  void WaitForTurn(Flight *flight, size_t i, uint64_t turn);
  // Row i takes its sink's turn alone: a group of its own, sent after the
  // batch's others.
  void SendAlone(Flight *flight, size_t i, std::vector<size_t> *alone);
  // Row i, a suspect tried alone since its sink last answered, waits while
  // others of the sink are not tried yet (Verdicts::BackOfTheLine).
  void WaitBehindUntried(Flight *flight, size_t i);
  int RouteIndex(std::string_view topic) const;
  void Log(LogLevel level, std::string text);
  void LogFailure(const char *what, const char *why) noexcept;
  void FinishFront(Sink::InterruptCheck interrupted);
  void FailWindow(const char *why) noexcept;
  void ForgetKeysOf(Ticket ticket) noexcept;
  // Decide row i of the flight: an outcome now (no route, paused, sink down,
  // behind an earlier event of its key, a suspect waiting for its sink's
  // turn alone) or a place in `groups` (sink name -> rows to send, in id
  // order) or in `alone` (suspects sent each in a group of its own).
  // `admitted` holds the ids already sent in this batch ahead of it.
  void Decide(Flight *flight, size_t i, std::set<std::string> *admitted,
              std::map<std::string, std::vector<size_t>> *groups, std::vector<size_t> *alone);
  // Send `groups`, then each of `alone` in a group of its own: those are
  // settled after the others, whose answers tell whether the sink answers.
  void SendGroups(Flight *flight, std::map<std::string, std::vector<size_t>> *groups,
                  const std::vector<size_t> &alone, Sink::InterruptCheck interrupted);
  void SendGroup(const Flight &flight, SinkGroup *group, Sink::InterruptCheck interrupted);
  void SettleGroup(const Flight &flight, SinkGroup *group, Sink::InterruptCheck interrupted);
  void FinishGroup(const Flight &flight, SinkGroup *group, int64_t deadline_ms,
                   Sink::InterruptCheck interrupted);

  std::vector<DispatchRoute> routes_;
  // Views of routes_[i].pattern, built once per Configure for route lookups.
  std::vector<std::string_view> patterns_;
  LogBuffer logs_{"publisher log line(s)"};
  std::mt19937_64 rng_;
  OrderGuard guard_;
  SinkRegistry sinks_;
  // late_ before verdicts_, which reads its keys; verdicts_ is only pointed
  // at until then.
  LateAnswers late_;
  Verdicts verdicts_;
  std::deque<Flight> flights_;  // begun, not finished; oldest first
  Ticket last_ticket_ = 0;      // never reused: a 64-bit counter
  // While a window is being finished: when its ack wait ends (SteadyMs), 0
  // before its first Finish.
  int64_t window_deadline_ms_ = 0;
  // (route, key) -> the last batch in flight that carries an event of it,
  // and whether that batch defers its events of the key. Empty when nothing
  // is in flight.
  struct KeyInFlight {
    Ticket ticket;
    bool deferred;
  };
  std::map<RouteKey, KeyInFlight> keys_in_flight_;
  std::vector<LogLine> taken_logs_;  // being handed out by NextLog
  // Sinks whose next free turn alone goes to the oldest suspect claimed, not
  // a lead: the last one went to a lead ahead of older ones (NoteLeads).
  std::set<std::string> oldest_next_;
  size_t next_log_ = 0;
};

}  // namespace outbox
