#include "core/late_answers.hpp"

#include <algorithm>
#include <utility>

namespace outbox {

LateAnswers::LateAnswers(const std::vector<DispatchRoute> *routes, OrderGuard *guard,
                         SinkRegistry *sinks, Verdicts *verdicts, LogBuffer *logs)
    : routes_(routes), guard_(guard), sinks_(sinks), verdicts_(verdicts), logs_(logs) {}

// What the sink answered is judged now, when the sink answers others (see
// "Slow sinks"); the rest is parked until the sink must have settled it, its
// keys held back, and what is needed to judge its answers when they come is
// kept (Settle). May throw (out of memory): the Late is complete
// (sink_ticket set) only once the answers' array has changed hands, so an
// abandon in between leaves nothing the sink could write into after it is
// freed.
void LateAnswers::Take(SinkGroup *group, const EventRow *rows, const int *route_of, RowOutcome *out,
                       const DispatchSettings &settings, Sink::InterruptCheck interrupted) {
  SinkState &state = (*sinks_)[group->sink_name];
  const int64_t now_ms = SteadyMs();
  // Judged now: what the broker answered, and what the sink chose not to
  // send (kNotSent is written once and never changes: cut off for want of
  // time, or held back behind its key's failure). Kept late, it would wait
  // parked for the sink's whole settle time although it was never sent, be
  // claimed and sent again when that passed, and its late verdict, dropped
  // by then in the table, would still hold its key in the order guard.
  std::vector<size_t> answered, unanswered;  // positions in the group
  for (size_t k = 0; k < group->members.size(); ++k) {
    const Delivery &d = group->results[k];
    const bool settled = d.answered_at_us != 0 || d.status == DeliveryStatus::kNotSent;
    (settled ? answered : unanswered).push_back(k);
  }
  const bool broker_answered = std::any_of(answered.begin(), answered.end(), [group](size_t k) {
    return FromBroker(group->results[k]);
  });
  const bool answers_others =
      broker_answered || state.AnsweredRecently(group->sent_ms, settings.ack_wait_ms);
  if (broker_answered) SinkAnswers(&state, group->sink_name);
  if (!answered.empty()) {
    std::vector<size_t> members;
    std::vector<Delivery> results;
    members.reserve(answered.size());
    results.reserve(answered.size());
    for (size_t k : answered) {
      members.push_back(group->members[k]);
      results.push_back(group->results[k]);
      if (group->results[k].status == DeliveryStatus::kDelivered) {
        NoteAnswered(&state, group->sink_name, group->messages[k].topic,
                     (group->results[k].answered_at_us - group->sent_unix_us) / 1000,
                     settings.ack_wait_ms);
      }
    }
    Judging j;
    j.rows = rows;
    j.route_of = route_of;
    j.members = &members;
    j.results = &results;
    j.settings = &settings;
    j.out = out;
    j.sink_name = &group->sink_name;
    j.solo_sink = group->sink;
    j.partial = true;
    verdicts_->Judge(j, interrupted);
  }

  late_.emplace_back();
  Late &late = late_.back();
  late.sink_name = group->sink_name;
  late.sink = group->sink;
  late.whole = !answers_others;
  late.alone = group->alone;
  late.sent_unix_us = group->sent_unix_us;
  // From now, not from the cycle's start: it was sent at the latest now.
  const int64_t now_us = settings.clock_us != nullptr
                             ? std::max(settings.now_us, settings.clock_us())
                             : settings.now_us;
  late.parked_until_us = now_us + (group->sink->SettleLimitMs() + kLateMarginMs) * kUsecPerMs;
  late.taken_us = now_us;
  late.rows.reserve(unanswered.size());
  late.handed.assign(unanswered.size(), 0);
  late.result_of.reserve(unanswered.size());
  for (size_t k : unanswered) {
    const EventRow &row = rows[group->members[k]];
    const DispatchRoute &route = (*routes_)[route_of[group->members[k]]];
    late.rows.push_back(LateRow{std::string(row.id), std::string(row.topic), std::string(row.key),
                                route.pattern, row.has_key, row.attempts, row.created_at,
                                std::string(TargetOf(route, row))});
    late.result_of.push_back(k);
  }
  for (size_t k : answered) {
    const EventRow &row = rows[group->members[k]];
    const DeliveryStatus status = group->results[k].status;
    if (!row.has_key || status == DeliveryStatus::kDelivered) continue;
    const DispatchRoute &route = (*routes_)[route_of[group->members[k]]];
    late.failed_earlier.push_back(FailedEarlier{route.pattern, std::string(row.key),
                                                std::string(TargetOf(route, row)),
                                                std::string(row.id)});
  }
  const std::string why = "waiting for sink \"" + group->sink_name + "\" to answer";
  std::string new_suspects;
  for (size_t k : unanswered) {
    const size_t i = group->members[k];
    const EventRow &row = rows[i];
    RowOutcome &row_out = out[i];
    row_out.outcome = Outcome::kPark;
    row_out.next_attempt_us = late.parked_until_us;
    SetError(&row_out, why);
    if (row.has_key) {
      const std::string &pattern = (*routes_)[route_of[i]].pattern;
      guard_->Block(pattern, row.key, row.id, late.parked_until_us);
      late_keys_.try_emplace(RouteKey(pattern, std::string(row.key)), now_us);
    }
    if (answers_others) {
      if (!sinks_->IsSuspect(group->sink_name, row.topic, now_ms) &&
          new_suspects.find("\"" + std::string(row.topic) + "\"") == std::string::npos) {
        new_suspects += (new_suspects.empty() ? "\"" : ", \"") + std::string(row.topic) + "\"";
      }
      sinks_->SetSuspect(group->sink_name, row.topic, now_ms + kSuspectTopicMs);
    }
  }
  if (!answers_others) {
    if (!state.slow) {
      Log(LogLevel::kInfo, "sink \"" + group->sink_name +
                               "\" has not answered within outbox.ack_wait; its outcomes are "
                               "recorded when it answers, the other sinks' go ahead");
    }
    state.slow = true;
  } else if (!new_suspects.empty()) {
    Log(LogLevel::kInfo, "sink \"" + group->sink_name + "\" answers, but not for topic(s) " +
                             new_suspects +
                             " within outbox.ack_wait (a topic the cluster lacks, or a partition "
                             "without a leader?); their outcomes are recorded when it answers, "
                             "and its other topics go ahead");
  }
  late.results.swap(group->results);  // the sink writes here from now on
  late.sink_ticket = group->sink_ticket;
  group->sink = nullptr;  // the group is now the Late's
  group->sink_ticket = 0;
}

std::vector<std::string> LateAnswers::Ids() const {
  std::vector<std::string> ids;
  for (const Late &late : late_) {
    for (size_t k = 0; k < late.rows.size(); ++k) {
      if (!late.handed[k]) ids.push_back(late.rows[k].id);
    }
  }
  return ids;
}

bool LateAnswers::DeliveredEarly(const Late &late, size_t k) noexcept {
  return !late.handed[k] && late.sink_ticket != 0 &&
         late.results[late.result_of[k]].status == DeliveryStatus::kDelivered;
}

bool LateAnswers::Arrived() noexcept {
  bool any = false;
  for (Late &late : late_) {
    if (!late.complete && late.sink_ticket != 0) {
      late.complete = late.sink->CollectFor(late.sink_ticket, 0, nullptr);
      if (late.complete && !late.retired &&
          std::any_of(late.results.begin(), late.results.end(), FromBroker)) {
        SinkState *state = sinks_->Find(late.sink_name);
        if (state != nullptr) state->last_answer_ms = SteadyMs();
      }
    }
    any = any || late.complete;
    for (size_t k = 0; !any && k < late.rows.size(); ++k) any = DeliveredEarly(late, k);
  }
  return any;
}

LateOutcome LateAnswers::OutcomeOf(const Late &late, size_t k, const RowOutcome &outcome) const {
  LateOutcome o;
  CopyOut(late.rows[k].id, o.id, sizeof o.id);
  o.created_at = late.rows[k].created_at;
  o.attempts = late.rows[k].attempts;
  o.parked_until_us = late.parked_until_us;
  o.answered_at_us = late.results[late.result_of[k]].answered_at_us;
  o.outcome = outcome;
  return o;
}

// The broker took these events: published, whatever becomes of the rest of
// their group (a verdict on the group never turns a delivery into anything
// else). Their answers also measure their topics.
void LateAnswers::HandOutDelivered(Late *late, int64_t ack_wait_ms) {
  SinkState *state = late->retired ? nullptr : sinks_->Find(late->sink_name);
  for (size_t k = 0; k < late->rows.size(); ++k) {
    if (!DeliveredEarly(*late, k)) continue;
    const LateRow &r = late->rows[k];
    const Delivery &answer = late->results[late->result_of[k]];
    RowOutcome published;
    published.outcome = Outcome::kPublished;
    published.attempts = r.attempts;
    outcomes_.push_back(OutcomeOf(*late, k, published));
    late->handed[k] = 1;  // after the push: a bad_alloc leaves it to the group's verdict
    if (state != nullptr) {
      state->last_answer_ms = SteadyMs();
      NoteAnswered(state, late->sink_name, r.topic,
                   (answer.answered_at_us - late->sent_unix_us) / 1000, ack_wait_ms);
    }
    if (!r.has_key) continue;
    guard_->Release(r.pattern, r.key, r.id);
    bool key_awaited = false;
    for (size_t x = 0; x < late->rows.size() && !key_awaited; ++x) {
      key_awaited = !late->handed[x] && late->rows[x].has_key && late->rows[x].key == r.key &&
                    late->rows[x].pattern == r.pattern;
    }
    if (!key_awaited) late_keys_.erase(RouteKey(r.pattern, r.key));
  }
}

void LateAnswers::Settle(const DispatchSettings &settings) {
  (void)Arrived();
  for (auto it = late_.begin(); it != late_.end();) {
    if (!it->complete) {
      HandOutDelivered(&*it, settings.ack_wait_ms);
      ++it;
      continue;
    }
    Late &late = *it;
    const size_t n = late.rows.size();
    std::vector<EventRow> rows(n);
    std::vector<int> route_of(n, -1);
    std::vector<size_t> members;
    std::vector<RowOutcome> out(n);
    for (size_t k = 0; k < n; ++k) {
      const LateRow &r = late.rows[k];
      rows[k].id = r.id;
      rows[k].topic = r.topic;
      rows[k].has_key = r.has_key;
      rows[k].key = r.key;
      rows[k].attempts = r.attempts;
      rows[k].created_at = r.created_at;
      out[k].attempts = r.attempts;
      if (r.has_key && !late.handed[k]) {
        // Judged afresh below: the hold Take put on the key (until the
        // sink's whole timeout) goes, and the verdict sets the new one.
        // (A row handed out early freed its key then, if no other row of
        // the key was awaited; a later event of the key may be late in
        // another group by now, and its hold is that group's.)
        late_keys_.erase(RouteKey(r.pattern, r.key));
        guard_->Release(r.pattern, r.key, r.id);
      }
      for (size_t x = 0; x < routes_->size(); ++x) {
        if ((*routes_)[x].pattern == r.pattern) route_of[k] = static_cast<int>(x);
      }
      if (route_of[k] < 0 && late.results[late.result_of[k]].status == DeliveryStatus::kDelivered) {
        // Its route went while the answer was awaited, but the broker
        // took it: published, as it is (sending it again would duplicate).
        out[k].outcome = Outcome::kPublished;
        continue;
      }
      if (route_of[k] < 0) {
        // Its route went while the answer was awaited: no verdict under a
        // route it no longer has; due now, routed afresh.
        out[k].outcome = Outcome::kPark;
        out[k].next_attempt_us = settings.now_us;
        SetError(&out[k], "its route changed while its sink's answer was awaited");
        continue;
      }
      members.push_back(k);
    }
    // Judge reads results member by member, in members' order.
    std::vector<Delivery> results;
    results.reserve(members.size());
    for (size_t k : members) results.push_back(late.results[late.result_of[k]]);
    if (SinkState *state = sinks_->Find(late.sink_name); !late.retired && state != nullptr) {
      for (size_t x = 0; x < members.size(); ++x) {
        if (results[x].status == DeliveryStatus::kDelivered && !late.handed[members[x]]) {
          NoteAnswered(state, late.sink_name, late.rows[members[x]].topic,
                       (results[x].answered_at_us - late.sent_unix_us) / 1000,
                       settings.ack_wait_ms);
        }
      }
    }
    Judging j;
    j.rows = rows.data();
    j.route_of = route_of.data();
    j.members = &members;
    j.results = &results;
    j.settings = &settings;
    j.out = out.data();
    j.sink_name = &late.sink_name;
    j.partial = !late.whole || late.retired;
    j.retired = late.retired;
    j.alone = late.alone;
    j.answered_others = !late.whole;
    verdicts_->Judge(j, nullptr);
    std::vector<char> judged(n, 0);
    for (size_t k : members) judged[k] = 1;
    NoteOvertakenLate(late, &judged);
    if (late.alone) {
      // Judged or not (its route went), its sink's turn alone is over.
      for (const LateRow &r : late.rows) {
        verdicts_->suspects().Judged(late.sink_name, r.id, SteadyMs());
      }
    }
    for (size_t k = 0; k < n; ++k) {
      // Rows handed out early were judged with the group (its verdict
      // reads every answer) but are not handed out twice.
      if (out[k].outcome == Outcome::kUntouched || late.handed[k]) continue;
      outcomes_.push_back(OutcomeOf(late, k, out[k]));
    }
    it = late_.erase(it);
  }
  FreeRetiredSinks();
}

bool LateAnswers::NextOutcome(LateOutcome *out) noexcept {
  if (next_outcome_ >= outcomes_.size()) return false;
  *out = outcomes_[next_outcome_++];
  return true;
}

void LateAnswers::HoldKeys() {
  for (const Late &late : late_) {
    for (size_t k = 0; k < late.rows.size(); ++k) {
      const LateRow &r = late.rows[k];
      if (r.has_key && !late.handed[k]) guard_->Block(r.pattern, r.key, r.id, late.parked_until_us);
    }
  }
}

// The sink's late groups keep its producer (moved to retired_sinks_) and
// go on waiting for their answers; they no longer count as the sink's (the
// new one under its name is not held or slow because of them). May throw
// bad_alloc, only before it changes anything (the room is reserved first):
// then the producer and its late groups stay as they were, and the caller's
// boundary gives up (Configure routes nothing; SinkFor's batch fails).
void LateAnswers::Retire(const std::string &sink, std::unique_ptr<Sink> *producer) {
  if (*producer == nullptr || !SinkHasLate(sink)) return;
  retired_sinks_.reserve(retired_sinks_.size() + 1);
  retired_sinks_.push_back(std::move(*producer));  // cannot throw now
  for (Late &late : late_) {
    if (!late.retired && late.sink_name == sink) late.retired = true;
  }
}

// Retired producers none of whose late groups is left.
void LateAnswers::FreeRetiredSinks() noexcept {
  for (auto it = retired_sinks_.begin(); it != retired_sinks_.end();) {
    Sink *sink = it->get();
    const bool waited_on =
        std::any_of(late_.begin(), late_.end(), [sink](const Late &l) { return l.sink == sink; });
    it = waited_on ? std::next(it) : retired_sinks_.erase(it);
  }
}

void LateAnswers::Drop() noexcept {
  if (late_.empty()) return;
  try {
    Log(LogLevel::kDebug, std::to_string(late_.size()) +
                              " batch(es) awaiting late answers given up; their events wait");
  } catch (...) {
  }
  // The sinks first, while the answer arrays they write into exist.
  for (const Late &late : late_) {
    if (late.sink != nullptr && late.sink_ticket != 0) {
      late.sink->AbandonAll("abandoned: its late answers were given up");
    }
  }
  for (const Late &late : late_) {
    if (late.sink_ticket != 0) NoteOvertakenLate(late, nullptr);
  }
  late_.clear();
  late_keys_.clear();
  retired_sinks_.clear();
}

void LateAnswers::NoteOvertakenLate(const Late &late, const std::vector<char> *judged) noexcept {
  auto delivered = [&late](size_t k) {
    return late.results[late.result_of[k]].status == DeliveryStatus::kDelivered;
  };
  // Rows (late.rows is in id order) a later row of the key may have
  // overtaken among themselves: keyed, not delivered, and not all judged.
  bool failed_late = false;
  for (size_t k = 0; k < late.rows.size() && !failed_late; ++k) {
    failed_late = late.rows[k].has_key && !delivered(k) && (judged == nullptr || !(*judged)[k]);
  }
  if (late.failed_earlier.empty() && !failed_late) return;
  try {
    std::vector<std::string_view> overtaken;
    auto note = [&overtaken](std::string_view id) {
      if (std::find(overtaken.begin(), overtaken.end(), id) == overtaken.end()) {
        overtaken.push_back(id);
      }
    };
    for (size_t k = 0; k < late.rows.size(); ++k) {
      const LateRow &row = late.rows[k];
      if (!row.has_key || !delivered(k)) continue;
      for (const FailedEarlier &f : late.failed_earlier) {
        if (f.key == row.key && f.pattern == row.pattern && f.target == row.target &&
            f.id < row.id) {
          note(f.id);
        }
      }
      if (!failed_late) continue;
      for (size_t e = 0; e < k; ++e) {
        const LateRow &earlier = late.rows[e];
        if (!earlier.has_key || delivered(e) ||
            (judged != nullptr && (*judged)[e] && (*judged)[k])) {
          continue;
        }
        if (earlier.key == row.key && earlier.pattern == row.pattern &&
            earlier.target == row.target) {
          note(earlier.id);
        }
      }
    }
    if (!overtaken.empty()) {
      Log(LogLevel::kWarning, Verdicts::OvertakenLine(late.sink_name, overtaken));
    }
  } catch (...) {
    // The line is lost; nothing else depends on it.
  }
}

bool LateAnswers::SinkHasLate(const std::string &sink) const {
  return std::any_of(late_.begin(), late_.end(),
                     [&sink](const Late &l) { return !l.retired && l.sink_name == sink; });
}

bool LateAnswers::SinkHasWholeLate(const std::string &sink) const noexcept {
  return std::any_of(late_.begin(), late_.end(), [&sink](const Late &l) {
    return l.whole && !l.retired && l.sink_name == sink;
  });
}

bool LateAnswers::SinkHeld(const std::string &sink) const {
  long whole = 0;
  size_t unanswered = 0;
  for (const Late &l : late_) {
    if (l.retired || l.sink_name != sink) continue;
    // A group of nothing but topics already suspect on the sink (a
    // partition without a leader, sent alone while the sink's other topics
    // were quiet) says nothing of the sink: were it counted, the sink's
    // other topics would wait for its answers after every quiet spell. The
    // events it holds still count below, which bounds them.
    const bool only_suspects = std::all_of(l.rows.begin(), l.rows.end(), [&](const LateRow &row) {
      return sinks_->Suspected(sink, row.topic);
    });
    if (l.whole && !only_suspects) ++whole;
    unanswered += static_cast<size_t>(std::count(l.handed.begin(), l.handed.end(), 0));
  }
  return whole >= kHeldAfterWholeGroups || unanswered >= kHeldAfterLateEvents;
}

int64_t LateAnswers::OldestLateUs(const std::string &sink, int64_t now_us) const noexcept {
  int64_t oldest = now_us;
  for (const Late &l : late_) {
    if (!l.retired && l.sink_name == sink) oldest = std::min(oldest, l.taken_us);
  }
  return oldest;
}

void LateAnswers::NoteAnswered(SinkState *state, const std::string &sink, std::string_view topic,
                               int64_t latency_ms, int64_t ack_wait_ms) {
  const bool suspected = sinks_->Suspected(sink, topic);
  bool measured = true;
  if (suspected && ack_wait_ms > 0 && latency_ms > ack_wait_ms) {
    // Answers of the topic that come within the next ack wait are the same
    // backlog's (late groups are settled oldest first), suspect or not by
    // then: this answer may end the suspicion.
    if (state->backlog_until_ms.size() >= SinkRegistry::kMaxAnsweredTopics &&
        state->backlog_until_ms.find(topic) == state->backlog_until_ms.end()) {
      state->backlog_until_ms.clear();
    }
    state->backlog_until_ms.insert_or_assign(std::string(topic), SteadyMs() + ack_wait_ms);
    measured = false;
  } else if (!state->backlog_until_ms.empty()) {
    auto backlog = state->backlog_until_ms.find(topic);
    measured = backlog == state->backlog_until_ms.end() || backlog->second < SteadyMs();
  }
  if (measured) sinks_->NoteAnsweredTopic(state, topic, latency_ms);
  // Looked for only while the topic is suspect on the sink: rare, and
  // bounded by the events awaiting late answers (kMaxLateGroups groups).
  if (suspected && !AwaitsOverdue(*state, sink, topic)) {
    sinks_->EndSuspicion(sink, topic);
  }
}

bool LateAnswers::AwaitsOverdue(const SinkState &state, const std::string &sink,
                                std::string_view topic) const noexcept {
  const int64_t overdue_us = SinkRegistry::OverdueAfterMs(state, topic) * kUsecPerMs;
  const int64_t now_us = UnixNowUs();
  for (const Late &late : late_) {
    // A retired producer's answers never reach the sink's state (its
    // cluster may be another): its events say nothing of the sink's.
    if (late.complete || late.retired || late.sink_name != sink) continue;
    if (now_us - late.sent_unix_us < overdue_us) continue;  // may still answer in time
    for (size_t k = 0; k < late.rows.size(); ++k) {
      if (!late.handed[k] && late.rows[k].topic == topic &&
          late.results[late.result_of[k]].answered_at_us == 0) {
        return true;
      }
    }
  }
  return false;
}

// Its groups that got no answer were its topics' trouble, not the sink's
// (they become partial, their topics suspect), and it takes new events.
void LateAnswers::SinkAnswers(SinkState *state, const std::string &sink) {
  state->last_answer_ms = SteadyMs();
  const int64_t until = state->last_answer_ms + kSuspectTopicMs;
  for (Late &late : late_) {
    if (!late.whole || late.retired || late.sink_name != sink) continue;
    late.whole = false;
    for (const LateRow &row : late.rows) sinks_->SetSuspect(sink, row.topic, until);
  }
  if (state->slow) {
    state->slow = false;
    Log(LogLevel::kInfo, "sink \"" + sink + "\" answers within outbox.ack_wait again");
  }
}

}  // namespace outbox
