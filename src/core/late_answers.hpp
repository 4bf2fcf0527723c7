// Late answers: the groups a slow sink had not answered by the ack wait
// (dispatch.hpp, "Slow sinks"). Taking one parks its unanswered rows until
// the sink must have settled them, holds their keys back, and keeps what is
// needed to judge them later (copies: the batch's rows are the caller's and
// go). Settling judges the groups whose answers are all in into late
// outcomes. PostgreSQL-free.
//
// Threading and ownership: the publisher's main thread only. A late group's
// answer array is written by its sink (its Send's `out`) until the group is
// settled or dropped, so the sink is told to abandon it (Drop) before the
// array goes. A group whose sink was changed or removed keeps its producer
// here (Retire) until its answers are in. Every pointer given to
// LateAnswers is the Dispatcher's and outlives it. Take and Settle may throw
// (out of memory): the Dispatcher gives everything late up then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/dispatch_rows.hpp"
#include "core/log_buffer.hpp"
#include "core/order_guard.hpp"
#include "core/sink.hpp"
#include "core/sink_registry.hpp"
#include "core/verdict.hpp"

namespace outbox {

class LateAnswers {
 public:
  LateAnswers(const std::vector<DispatchRoute> *routes, OrderGuard *guard, SinkRegistry *sinks,
              Verdicts *verdicts, LogBuffer *logs);

  bool empty() const { return late_.empty(); }
  size_t size() const { return late_.size(); }
  // (route, key) of the events awaiting late answers, each with when the
  // first of them was left to its late answer (the cycle's clock).
  const LateKeys &keys() const { return late_keys_; }
  // The ids of the events awaiting late answers (Dispatcher::LateIds).
  std::vector<std::string> Ids() const;  // may throw bad_alloc

  // The group's sink has not answered all of it by the ack wait. What it
  // answered is judged now; the rest is parked, and the group is kept
  // until its answers come. `rows`, `route_of`, `out`: the group's batch.
  void Take(SinkGroup *group, const EventRow *rows, const int *route_of, RowOutcome *out,
            const DispatchSettings &settings, Sink::InterruptCheck interrupted);

  // Gathers what has arrived without waiting; true when some late group is
  // complete, or some event of a group still awaiting others was delivered.
  bool Arrived() noexcept;
  // Judges the complete groups (with this cycle's settings) into late
  // outcomes, which NextOutcome hands out one by one, and forgets them.
  // An event the broker took is handed out as published as soon as its
  // answer is in, without waiting for its group: a healthy topic's events
  // sent with a topic the cluster lacks would otherwise wait for that
  // topic's delivery timeout. Its key goes free once no other event of the
  // key in its group awaits an answer.
  void Settle(const DispatchSettings &settings);
  bool NextOutcome(LateOutcome *out) noexcept;
  void ClearOutcomes() noexcept {
    outcomes_.clear();
    next_outcome_ = 0;
  }

  // Block every late group's keys in the order guard again (after it was
  // cleared): the late groups still hold them back.
  void HoldKeys();
  // The sink's producer is about to be closed: its late groups keep it.
  void Retire(const std::string &sink, std::unique_ptr<Sink> *producer);
  // Give up every late group: their sinks stop writing their answers.
  void Drop() noexcept;

  // Whether the sink (not a retired producer of its name) has late groups.
  bool SinkHasLate(const std::string &sink) const;
  // Whether one of them got no answer at all (the sink is slow as a whole).
  bool SinkHasWholeLate(const std::string &sink) const noexcept;
  // kHeldAfterWholeGroups late groups without an answer (see "Slow sinks";
  // one of topics all suspect on the sink is not counted), or
  // kHeldAfterLateEvents events awaiting late answers: a sink that went
  // down right after it answered would otherwise take a group per cycle,
  // each given up early as its topics' trouble, their messages piling up in
  // its producer (the publisher's memory) until the outage is found.
  bool SinkHeld(const std::string &sink) const;
  // When the oldest of the sink's late groups was left to its late answers
  // (the cycle's clock), or `now_us` when it has none: how long a held
  // sink has been held.
  int64_t OldestLateUs(const std::string &sink, int64_t now_us) const noexcept;
  // The broker answered this sink's events.
  void SinkAnswers(SinkState *state, const std::string &sink);
  // The sink's broker took an event of `topic` after `latency_ms`: the
  // topic's answer time is measured (SinkRegistry::NoteAnsweredTopic), and
  // the topic is no longer suspect on the sink unless another of its events
  // there is overdue (AwaitsOverdue). A Kafka partition without a leader
  // leaves its topic's other partitions answering: those answers say nothing
  // of the partition's events, whose retries would otherwise hold a cycle for
  // outbox.ack_wait again. Events left late only because their topic was
  // suspect, and answered in their usual time, do not keep it suspect.
  // An answer a suspect topic got only after the ack wait is not measured,
  // nor are its answers within the next ack wait (SinkState::backlog_until_ms):
  // a partition that had no leader for seconds answers its backlog when it
  // gets one, and learnt, those answers would make the topic's next groups
  // wait the whole ack wait when its trouble begins again (and the sink's
  // other topics with them). A topic that answers slowly but within the
  // wait is measured, and waited for from then on.
  void NoteAnswered(SinkState *state, const std::string &sink, std::string_view topic,
                    int64_t latency_ms, int64_t ack_wait_ms);
  // Whether an event of `topic` sent through the sink's current producer
  // still has no answer, and waited longer than its answers usually take
  // (SinkRegistry::OverdueAfterMs).
  bool AwaitsOverdue(const SinkState &state, const std::string &sink,
                     std::string_view topic) const noexcept;

  // Added to a sink's SettleLimitMs when parking its late events.
  static constexpr int64_t kLateMarginMs = 2000;
  // Most groups awaiting late answers at once (their events' ids and keys
  // are copied): beyond, a group is waited for in full.
  static constexpr size_t kMaxLateGroups = 64;
  // How long a topic some of whose events went unanswered while its sink
  // answered others stays suspect (see "Slow sinks").
  static constexpr int64_t kSuspectTopicMs = 60000;
  // A sink with one group that got no answer is not held yet: its next
  // group goes, as a probe. If the broker answers that one, the first was
  // its topics' trouble (a topic the cluster lacks, seen first in a quiet
  // moment); if it does not either, the sink is held until answers come.
  static constexpr long kHeldAfterWholeGroups = 2;
  // A sink with this many events awaiting late answers takes no new group
  // either (SinkHeld): what its producer holds stays bounded.
  static constexpr size_t kHeldAfterLateEvents = 1000;

 private:
  // A group whose sink had not answered by the ack wait: what is needed to
  // judge it later, copied (the batch's rows are the caller's and go).
  struct LateRow {
    std::string id, topic, key;
    std::string pattern;  // its route's (routes may be reloaded meanwhile)
    bool has_key = false;
    int attempts = 0;
    int64_t created_at = 0;
    std::string target;  // where it went: its route's target, or its topic
  };
  // An event of the group's answered part that failed, with its key: a
  // later event of that key and target among the late rows, delivered,
  // arrives before it (Kafka split the group over two requests, refused
  // the first and took the second).
  struct FailedEarlier {
    std::string pattern, key, target, id;
  };
  struct Late {
    std::string sink_name;
    Sink *sink = nullptr;
    uint64_t sink_ticket = 0;  // 0 until the group is fully copied
    bool complete = false;     // every answer is in
    int64_t parked_until_us = 0;
    // Nothing of its group was answered: the sink is slow as a whole and
    // takes no new group until this is settled (SinkHeld).
    bool whole = true;
    // Its sink was changed or removed since it was sent: `sink` is a
    // producer kept in retired_sinks_ until its answers are in. Says
    // nothing of the sink now under that name (not held, not slow, not
    // down; see Retire).
    bool retired = false;
    bool alone = false;        // SinkGroup::alone
    int64_t sent_unix_us = 0;  // SinkGroup::sent_unix_us
    int64_t taken_us = 0;      // when it was left to late answers (the cycle's clock)
    std::vector<LateRow> rows;
    std::vector<char> handed;       // per row: handed out already (delivered early)
    std::vector<size_t> result_of;  // per row: its answer's index in results
    std::vector<Delivery> results;  // the sink fills these (its Send's `out`)
    std::vector<FailedEarlier> failed_earlier;
  };

  void Log(LogLevel level, std::string text) { logs_->Add(level, std::move(text)); }
  void FreeRetiredSinks() noexcept;
  // The WARNING Verdicts::NoteOvertaken writes for a judged group, for the
  // failures of a group's answered part that its late rows delivered past,
  // and for late rows not delivered that a later late row of their key was
  // (what has come in so far: also when the group is given up). `judged`
  // (one flag per row, or null): the rows Verdicts::Judge saw together,
  // whose pairs its own NoteOvertaken named already; rows left out of it
  // (their route went meanwhile) and a group given up are looked at here.
  void NoteOvertakenLate(const Late &late, const std::vector<char> *judged) noexcept;
  // Whether row k of `late` was delivered and not handed out yet.
  static bool DeliveredEarly(const Late &late, size_t k) noexcept;
  // Hands out the delivered rows of a group still awaiting others.
  void HandOutDelivered(Late *late, int64_t ack_wait_ms);
  LateOutcome OutcomeOf(const Late &late, size_t k, const RowOutcome &outcome) const;

  const std::vector<DispatchRoute> *routes_;
  OrderGuard *guard_;
  SinkRegistry *sinks_;
  Verdicts *verdicts_;
  LogBuffer *logs_;
  // Groups awaiting late answers, oldest first; the keys of their events.
  std::deque<Late> late_;
  LateKeys late_keys_;
  // Producers of sinks changed or removed while late groups awaited their
  // answers: kept until those answers are in, so that an event the broker
  // took is recorded as published rather than sent again.
  std::vector<std::unique_ptr<Sink>> retired_sinks_;
  std::vector<LateOutcome> outcomes_;
  size_t next_outcome_ = 0;
};

}  // namespace outbox
