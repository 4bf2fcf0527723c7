#include "core/verdict.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/backoff.hpp"

namespace outbox {

namespace {

std::string Seconds(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(us) / 1e6);
  return buf;
}

}  // namespace

void SetError(RowOutcome *out, std::string_view text) {
  const size_t n = std::min(text.size(), sizeof out->error - 1);
  std::memcpy(out->error, text.data(), n);
  out->error[n] = '\0';
}

OutMessage MessageOf(const EventRow &row, const DispatchRoute &route, int route_index,
                     std::string_view source) {
  OutMessage m;
  m.id = row.id;
  m.topic = row.topic;
  m.target = TargetOf(route, row);
  m.route = route_index;
  m.has_key = row.has_key;
  m.key = row.key;
  m.payload = row.payload;
  m.headers = row.headers;
  m.header_count = row.header_count;
  m.headers_json = row.headers_json;
  m.format = route.format;
  m.created_at = row.created_at;
  m.source = source;
  return m;
}

Verdicts::Verdicts(const std::vector<DispatchRoute> *routes, OrderGuard *guard, SinkRegistry *sinks,
                   const LateKeys *late_keys, LogBuffer *logs, std::mt19937_64 *rng)
    : routes_(routes),
      guard_(guard),
      sinks_(sinks),
      late_keys_(late_keys),
      logs_(logs),
      rng_(rng) {}

double Verdicts::Random() { return std::uniform_real_distribution<double>(0.0, 1.0)(*rng_); }

void Verdicts::NoteUntouched(const DispatchRoute &route, const EventRow &row) {
  if (row.has_key) untouched_keys_.emplace(route.pattern, std::string(row.key));
}

std::string Verdicts::OvertakenLine(const std::string &sink,
                                    const std::vector<std::string_view> &late) {
  std::string text = "sink \"" + sink + "\": " + std::to_string(late.size()) +
                     " event(s) will arrive after a later event of their key, which the broker" +
                     " took while refusing them (one batch split over two requests): ";
  for (size_t i = 0; i < late.size() && i < kMaxOvertakenNamed; ++i) {
    if (i > 0) text += ", ";
    text += late[i];
  }
  if (late.size() > kMaxOvertakenNamed) text += ", ...";
  return text;
}

// Per key and target, a group's events reach the broker in id order, and the broker
// takes or refuses them together, except where librdkafka split them over
// two Produce requests and the broker refused the first and took the second
// (README, Limits): the refused event then arrives after a later one of its
// key, whatever is decided below. Say so, naming the events that will
// arrive late, so that an operator (and the fault suites) can tell this
// known break of per-key order from any other. Never throws: out of memory
// only loses the line.
void Verdicts::NoteOvertaken(const Judging &j) noexcept {
  try {
    const std::vector<size_t> &members = *j.members;
    const std::vector<Delivery> &results = *j.results;
    // Per target too: a route without a target sends a key's events to
    // several topics, and on Kafka one topic's failure does not hold back
    // the others (README, Limits), which is no split request.
    auto target_of = [&](size_t k) {
      return TargetOf((*routes_)[j.route_of[members[k]]], j.rows[members[k]]);
    };
    std::set<std::pair<RouteKey, std::string>> failed;  // with an earlier member not delivered
    std::vector<std::string_view> late;
    for (size_t k = 0; k < members.size(); ++k) {
      const EventRow &row = j.rows[members[k]];
      if (!row.has_key) continue;
      std::pair<RouteKey, std::string> key(
          RouteKey((*routes_)[j.route_of[members[k]]].pattern, std::string(row.key)),
          std::string(target_of(k)));
      if (results[k].status != DeliveryStatus::kDelivered) {
        failed.insert(std::move(key));
      } else if (failed.count(key) != 0) {
        // Delivered past an earlier event of its key: that one is late.
        for (size_t e = 0; e < k; ++e) {
          const EventRow &earlier = j.rows[members[e]];
          if (results[e].status != DeliveryStatus::kDelivered && earlier.has_key &&
              earlier.key == row.key && j.route_of[members[e]] == j.route_of[members[k]] &&
              target_of(e) == target_of(k) &&
              std::find(late.begin(), late.end(), earlier.id) == late.end()) {
            late.push_back(earlier.id);
          }
        }
      }
    }
    if (late.empty()) return;
    Log(LogLevel::kWarning, OvertakenLine(*j.sink_name, late));
  } catch (...) {
    // The line is lost; nothing else depends on it.
  }
}

void Verdicts::Judge(const Judging &j, Sink::InterruptCheck interrupted) {
  NoteOvertaken(j);
  Sink *sink = j.solo_sink;
  const std::string &sink_name = *j.sink_name;
  // A retired producer's answers say nothing of the sink now under its name
  // (which may not exist: operator[] would make one).
  SinkState retired_state;
  SinkState *state = j.retired ? &retired_state : &(*sinks_)[sink_name];
  const std::vector<size_t> &members = *j.members;
  const std::vector<Delivery> &results = *j.results;
  const EventRow *rows = j.rows;
  const int *route_of = j.route_of;
  const DispatchSettings &settings = *j.settings;
  RowOutcome *out = j.out;

  size_t delivered = 0, transient = 0, held_back = 0, target_refused = 0, target_down = 0;
  size_t lost = 0;    // transient failures that came with a lost connection
  size_t unsent = 0;  // transient failures of messages no connection took
  for (const Delivery &d : results) {
    if (d.status == DeliveryStatus::kRetriable && d.unsent) ++unsent;
    if (d.status == DeliveryStatus::kTargetDown) ++target_down;
    if (d.status == DeliveryStatus::kDelivered) ++delivered;
    if (d.status == DeliveryStatus::kRetriable) ++transient;
    if (d.status == DeliveryStatus::kRetriable && d.connection_lost) ++lost;
    // Held back behind an earlier failure of its key (which decides).
    if (d.status == DeliveryStatus::kNotSent) ++held_back;
    if (d.status == DeliveryStatus::kTargetRefused) ++target_refused;
  }
  const bool interrupted_now = interrupted != nullptr && interrupted();
  std::set<std::string> down_counted;  // targets whose backoff this group grew

  // The event out alone on its sink (suspects.hpp) is judged: the sink's
  // turn passes to its next suspect.
  if (j.alone) {
    for (size_t i : members) suspects_.Judged(sink_name, rows[i].id, SteadyMs());
  }
  if (delivered > 0 && !j.retired) suspects_.SinkAnswered(sink_name);

  // Nothing delivered and nothing refused, only transient failures (beside
  // targets a broker refused, which say nothing of the others: a refused
  // topic next to a partition without a leader must not make that
  // partition's events count attempts): the sink is down. Park those events
  // until the sink's backoff expires, without counting attempts; the
  // refused targets' events count theirs. Not when every failure came with
  // a lost connection, which the broker may have closed over one message
  // (the first on every connection; with one connection, any): those
  // events become suspects (below), and the sink is judged by what they do
  // alone. A suspect failing alone while the sink answered nothing else is
  // the sink's trouble when it got no answer; one that no connection took
  // (Delivery::unsent) is, whatever the sink answered before. One lost
  // alone with its connection, answered others or not, is the sink's
  // trouble when it was lost so before since the sink's last answer and
  // another one was too (a broker that closes every connection); otherwise
  // it is the message's doing (a quiet sink, a culprit first in every batch, or a
  // burst of culprits would otherwise keep the sink down for good, charging
  // nobody).
  const bool looks_down = !j.partial && delivered == 0 && transient > 0 &&
                          transient + held_back + target_refused + target_down == results.size() &&
                          !interrupted_now;
  const bool lost_only = lost == transient;
  // Alone and never sent (no connection could be made): the sink's
  // trouble, whatever it answered just before the turn.
  const bool alone_unsent = j.alone && unsent == transient;
  bool down = looks_down && (j.alone ? !j.answered_others || alone_unsent : !lost_only);
  if (looks_down && j.alone && lost_only && !alone_unsent && !j.retired) {
    // Whether or not the sink answered others just before: a broker that
    // starts closing every connection has answered others just before too.
    down = suspects_.LostAloneUnanswered(sink_name, rows[members.front()].id, SteadyMs(),
                                         settings.backoff_max_ms);
  }
  if (down) {
    state->failures++;
    const int64_t wait_ms =
        BackoffMs(state->failures, settings.backoff_min_ms, settings.backoff_max_ms, Random());
    state->retry_at_us = settings.now_us + wait_ms * kUsecPerMs;
    state->last_error = results.empty() ? state->last_error : results.front().error;
    if (!state->down) {
      Log(LogLevel::kWarning, "sink \"" + sink_name + "\" is unavailable (" + state->last_error +
                                  "); its events wait, retrying in " +
                                  Seconds(wait_ms * kUsecPerMs));
    }
    state->down = true;
    for (size_t k = 0; k < members.size(); ++k) {
      const size_t i = members[k];
      if (results[k].status == DeliveryStatus::kTargetRefused) {
        Attempted(rows[i], (*routes_)[route_of[i]], results[k], settings, &out[i]);
        continue;
      }
      if (results[k].status == DeliveryStatus::kTargetDown) {
        TargetDown(rows[i], (*routes_)[route_of[i]], results[k], settings, state, &down_counted,
                   &out[i]);
        continue;
      }
      out[i].outcome = Outcome::kPark;
      out[i].next_attempt_us = state->retry_at_us;
      SetError(&out[i], results[k].error);
      if (rows[i].has_key) {
        guard_->Block((*routes_)[route_of[i]].pattern, rows[i].key, rows[i].id, state->retry_at_us);
      }
      sinks_->NoteBehindDown(rows[i].topic, sink_name);
    }
    return;
  }

  // Lost connections, or a suspect's failure alone, say nothing of whether
  // the sink is back.
  const bool says_nothing = delivered == 0 && transient > 0 && (j.alone || lost_only);
  if (delivered > 0 || (!interrupted_now && !says_nothing)) {
    if (state->down) {
      Log(LogLevel::kInfo, "sink \"" + sink_name + "\" is available again");
      sinks_->ForgetBehindDown(sink_name);
    }
    state->down = false;
    state->failures = 0;
  }

  auto stopping = [&] { return interrupted != nullptr && interrupted(); };
  std::map<RouteKey, int64_t> cut_heads;  // keys with an event not sent: when it is due
  for (size_t k = 0; k < members.size(); ++k) {
    const size_t i = members[k];
    const DispatchRoute &route = (*routes_)[route_of[i]];
    const Delivery &result = results[k];
    if (result.status == DeliveryStatus::kDelivered && !state->down_targets.empty()) {
      const std::string_view target = TargetOf(route, rows[i]);
      auto it = state->down_targets.find(target);
      if (it != state->down_targets.end()) state->down_targets.erase(it);
    }
    if (result.status == DeliveryStatus::kTargetDown) {
      TargetDown(rows[i], route, result, settings, state, &down_counted, &out[i]);
      continue;
    }
    if (result.status == DeliveryStatus::kRetriable && interrupted_now) {
      out[i].outcome = Outcome::kUntouched;  // shutting down: no verdict
      NoteUntouched(route, rows[i]);
      continue;
    }
    if (result.status == DeliveryStatus::kNotSent && rows[i].has_key && !untouched_keys_.empty() &&
        untouched_keys_.count(RouteKey(route.pattern, std::string(rows[i].key))) != 0) {
      // Held back behind an earlier event of its key that was left as it was
      // (interrupted, above in id order): left as it was too. Parked, it
      // would be a due retry ahead of that never-tried event, and a claim
      // after a restart could send it first.
      out[i].outcome = Outcome::kUntouched;
      continue;
    }
    if (result.status == DeliveryStatus::kRetriable && j.alone) {
      // A suspect alone failed while its sink answered others, or was lost
      // alone with its connection (else the sink is down, above): it is the
      // cause. Forgiven kForgivenAlone
      // times in a row (a connection that drops now and then loses an
      // event alone too), then each such failure counts an attempt.
      if (suspects_.FailedAlone(rows[i].id) > kForgivenAlone) {
        Delivery charged = result;
        charged.error += " (sent alone)";
        Attempted(rows[i], route, charged, settings, &out[i]);
      } else {
        ParkWithoutAttempt(rows[i], route, result.error + " (sent alone: not counted yet)",
                           settings, &out[i]);
      }
      BackOfTheLine(rows[i], route, sink_name, settings, &out[i]);
      continue;
    }
    if (result.status == DeliveryStatus::kRetriable && result.connection_lost && result.unsent) {
      // Never on the connection the broker closed over another message:
      // waits as the lost ones do, suspected of nothing.
      ParkWithoutAttempt(rows[i], route, result.error, settings, &out[i]);
      continue;
    }
    if (result.status == DeliveryStatus::kRetriable && result.connection_lost) {
      // Lost with its connection, which the broker may have closed over
      // another message on it (one too large for it, say): not charged.
      // Sent with others once more; lost so again, it is sent alone from
      // then on (suspects.hpp), where it goes through or shows it is the
      // cause, without holding anything but its key meanwhile.
      const bool alone_next = suspects_.LostWithOthers(rows[i].id, sink_name);
      ParkWithoutAttempt(rows[i], route,
                         result.error + (alone_next ? " (lost with others twice: sent alone next)"
                                                    : " (lost with others)"),
                         settings, &out[i]);
      continue;
    }
    if (result.status == DeliveryStatus::kRetriable && j.partial) {
      // The sink answers others: this event's topic or partition is in
      // trouble (a partition without a leader times out), which is neither
      // the event's fault (no attempt) nor the sink's (it stays up).
      ParkWithoutAttempt(rows[i], route, result.error, settings, &out[i]);
      continue;
    }
    if (result.status == DeliveryStatus::kNotSent) {
      // Held back behind an earlier failure of its key in this call (handled
      // above, in id order): wait as long as that one waits, or go at once
      // if it died. Or not sent for want of time (the sink cut its call
      // short after the key's earlier events were delivered): due at once,
      // and its key blocked behind it all the same, or the key's later
      // events, claimed as new, would reach the broker before it.
      const std::string_view why = result.error.empty() ? kWaitingForKey : result.error;
      const bool keyed = rows[i].has_key;
      const RouteKey route_key =
          keyed ? RouteKey(route.pattern, std::string(rows[i].key)) : RouteKey();
      auto head = keyed ? cut_heads.find(route_key) : cut_heads.end();
      if (head == cut_heads.end() &&
          ParkBehindEarlier(rows[i], route, nullptr, settings.now_us, why, &out[i])) {
        continue;
      }
      // The first of its key not sent, or the rest of that chain: due when
      // the first is, so that the next claim takes them together, in id
      // order (every earlier waiting event of theirs is in this call: the
      // batch admitted them). The first is never due after what already
      // waits behind it (parked in earlier cycles): claims take due events
      // in next_attempt_at order, and a key's head must come before its
      // tail.
      int64_t due = settings.now_us;
      if (head != cut_heads.end()) {
        due = head->second;
      } else if (keyed) {
        due = std::min(due, guard_->EarliestUntil(route.pattern, rows[i].key));
        cut_heads.emplace(route_key, due);
      }
      out[i].outcome = Outcome::kPark;
      out[i].next_attempt_us = due;
      SetError(&out[i], why);
      if (keyed) guard_->Block(route.pattern, rows[i].key, rows[i].id, due);
      continue;
    }
    if (result.status == DeliveryStatus::kRejected && members.size() > 1 && sink == nullptr) {
      // A late answer (no payload left to retry it alone): Kafka refuses a
      // whole request for one message, so this may be a neighbour's fault.
      // No attempt; it is sent again soon, and the sink's next group is
      // waited for in full, where a refusal is retried alone.
      state->wait_in_full = true;
      if (ParkBehindEarlier(rows[i], route, nullptr, settings.now_us, kWaitingForKey, &out[i])) {
        continue;
      }
      out[i].outcome = Outcome::kPark;
      out[i].next_attempt_us = settings.now_us + settings.backoff_min_ms * kUsecPerMs;
      SetError(&out[i], result.error + " (sent with others: retried alone)");
      if (rows[i].has_key) {
        guard_->Block(route.pattern, rows[i].key, rows[i].id, out[i].next_attempt_us);
      }
      continue;
    }
    if (result.status == DeliveryStatus::kRejected && members.size() > 1 && sink != nullptr) {
      // Kafka fails every message of a produce request when the broker
      // refuses one (too large, invalid): try this one alone before
      // counting it against the event. Not while shutting down (no verdict,
      // no attempt), and not while an earlier event of its key has just
      // failed in this call: sent alone it would overtake that one, so it
      // waits behind it instead.
      if (interrupted_now || stopping()) {
        out[i].outcome = Outcome::kUntouched;
        NoteUntouched(route, rows[i]);
        continue;
      }
      if (ParkBehindEarlier(rows[i], route, nullptr, settings.now_us, kWaitingForKey, &out[i])) {
        continue;
      }
      const Delivery solo = Alone(rows[i], route, route_of[i], settings, sink, interrupted);
      JudgeAlone(rows[i], route, solo, settings, state, &down_counted, stopping(), &out[i]);
      continue;
    }
    Attempted(rows[i], route, result, settings, &out[i]);
  }
}

Delivery Verdicts::Alone(const EventRow &row, const DispatchRoute &route, int route_index,
                         const DispatchSettings &settings, Sink *sink,
                         Sink::InterruptCheck interrupted) {
  OutMessage alone = MessageOf(row, route, route_index, settings.source);
  Delivery solo;
  sink->Publish(&alone, 1, &solo, interrupted);
  return solo;
}

void Verdicts::JudgeAlone(const EventRow &row, const DispatchRoute &route, const Delivery &solo,
                          const DispatchSettings &settings, SinkState *state,
                          std::set<std::string> *counted, bool stopping, RowOutcome *out) {
  if (solo.status == DeliveryStatus::kRetriable && stopping) {
    out->outcome = Outcome::kUntouched;  // interrupted while alone: no verdict
    NoteUntouched(route, row);
    return;
  }
  if (solo.status == DeliveryStatus::kTargetDown) {
    TargetDown(row, route, solo, settings, state, counted, out);
    return;
  }
  if (solo.status == DeliveryStatus::kNotSent) {
    // Not sent after all (the sink's time ran out): not an attempt.
    ParkWithoutAttempt(row, route, solo.error.empty() ? "not sent" : solo.error, settings, out);
    return;
  }
  Attempted(row, route, solo, settings, out);
}

void Verdicts::ParkWithoutAttempt(const EventRow &row, const DispatchRoute &route,
                                  std::string_view error, const DispatchSettings &settings,
                                  RowOutcome *out) {
  if (ParkBehindEarlier(row, route, nullptr, settings.now_us, kWaitingForKey, out)) return;
  out->outcome = Outcome::kPark;
  out->next_attempt_us =
      settings.now_us +
      BackoffMs(1, settings.backoff_min_ms, settings.backoff_max_ms, Random()) * kUsecPerMs;
  SetError(out, error);
  if (row.has_key) guard_->Block(route.pattern, row.key, row.id, out->next_attempt_us);
}

void Verdicts::BackOfTheLine(const EventRow &row, const DispatchRoute &route,
                             const std::string &sink_name, const DispatchSettings &settings,
                             RowOutcome *out) {
  if (out->outcome != Outcome::kPark && out->outcome != Outcome::kRetry) return;
  const int64_t waiting = static_cast<int64_t>(suspects_.UntriedAlone(sink_name));
  const int64_t behind_ms = std::min(waiting * suspects_.TurnSpacingMs(sink_name),
                                     std::min(settings.backoff_max_ms, Suspects::kTurnMs));
  const int64_t due = settings.now_us + behind_ms * kUsecPerMs;
  if (due <= out->next_attempt_us) return;
  out->next_attempt_us = due;
  if (row.has_key) guard_->Block(route.pattern, row.key, row.id, due);
}

bool Verdicts::ParkBehindEarlier(const EventRow &row, const DispatchRoute &route,
                                 const std::set<std::string> *in_batch, int64_t now_us,
                                 std::string_view error, RowOutcome *out) {
  int64_t until = now_us;
  if (!row.has_key || guard_->MayDeliver(route.pattern, row.key, row.id, in_batch, &until)) {
    return false;
  }
  out->outcome = Outcome::kPark;
  out->next_attempt_us = until > now_us ? until : now_us + kBehindDueUs;
  if (!late_keys_->empty()) {
    // Behind an event whose sink has not answered yet: its answer may come
    // any moment (the earlier event is parked for the sink's whole timeout).
    const auto late = late_keys_->find(RouteKey(route.pattern, std::string(row.key)));
    if (late != late_keys_->end()) {
      out->next_attempt_us =
          std::min(out->next_attempt_us, LateRecheckDueUs(now_us, now_us - late->second));
    }
  }
  SetError(out, error);
  guard_->Block(route.pattern, row.key, row.id, out->next_attempt_us);
  return true;
}

void Verdicts::TargetDown(const EventRow &row, const DispatchRoute &route, const Delivery &delivery,
                          const DispatchSettings &settings, SinkState *state,
                          std::set<std::string> *counted, RowOutcome *out) {
  if (ParkBehindEarlier(row, route, nullptr, settings.now_us, kWaitingForKey, out)) return;
  const std::string_view target = TargetOf(route, row);
  auto it = state->down_targets.find(target);
  if (it == state->down_targets.end()) {
    if (state->down_targets.size() >= kMaxDownTargets) state->down_targets.clear();
    it = state->down_targets.emplace(std::string(target), 0).first;
  }
  // One step of backoff per group that found the target down, not per event.
  if (counted == nullptr || counted->insert(it->first).second) {
    if (it->second < 64) ++it->second;
  }
  const int64_t wait_ms =
      std::max(BackoffMs(it->second, settings.backoff_min_ms, settings.backoff_max_ms, Random()),
               std::min(delivery.retry_after_ms, settings.backoff_max_ms));
  out->outcome = Outcome::kPark;
  out->next_attempt_us = settings.now_us + wait_ms * kUsecPerMs;
  SetError(out, delivery.error);
  if (row.has_key) guard_->Block(route.pattern, row.key, row.id, out->next_attempt_us);
}

void Verdicts::Attempted(const EventRow &row, const DispatchRoute &route, const Delivery &delivery,
                         const DispatchSettings &settings, RowOutcome *out) {
  if (delivery.status == DeliveryStatus::kDelivered) {
    out->outcome = Outcome::kPublished;
    if (row.has_key) guard_->Release(route.pattern, row.key, row.id);
    if (!suspects_.empty()) suspects_.Forget(row.id);
    return;
  }
  out->attempts = row.attempts + 1;
  SetError(out, delivery.error);
  if (out->attempts >= settings.max_attempts) {
    out->outcome = Outcome::kDead;
    if (row.has_key) guard_->Release(route.pattern, row.key, row.id);
    if (!suspects_.empty()) suspects_.Forget(row.id);
    Log(LogLevel::kWarning, "event " + std::string(row.id) + " (topic \"" + std::string(row.topic) +
                                "\") is dead after " + std::to_string(out->attempts) +
                                " attempts: " + delivery.error);
    return;
  }
  out->outcome = Outcome::kRetry;
  // The broker's Retry-After, when longer than our backoff, up to its maximum.
  const int64_t wait_ms =
      std::max(BackoffMs(out->attempts, settings.backoff_min_ms, settings.backoff_max_ms, Random()),
               std::min(delivery.retry_after_ms, settings.backoff_max_ms));
  out->next_attempt_us = settings.now_us + wait_ms * kUsecPerMs;
  if (row.has_key) guard_->Block(route.pattern, row.key, row.id, out->next_attempt_us);
}

}  // namespace outbox
