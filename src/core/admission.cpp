// Admission: which of a batch's rows go out now and which wait (for their
// route, their sink, an earlier event of their key, or a suspect's turn to
// be sent alone). Members of the Dispatcher (dispatch.hpp), kept apart from
// the pipeline in dispatch.cpp that calls them: Begin for the rows it may
// send at once, FinishFront for the rows it deferred behind an earlier
// batch. Everything here runs on the publisher's main thread inside Begin's
// or Finish's exception boundary, and may throw (out of memory): the caller
// then abandons the whole window.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/dispatch.hpp"

namespace outbox {

void Dispatcher::Decide(Flight *flight, size_t i, std::set<std::string> *admitted,
                        std::map<std::string, std::vector<size_t>> *groups,
                        std::vector<size_t> *alone) {
  const EventRow &row = flight->rows[i];
  const DispatchSettings &settings = flight->settings;
  RowOutcome *out = flight->out;
  const int r = flight->route_of[i];
  if (r < 0) {
    out[i].outcome = Outcome::kParkNoRoute;
    out[i].next_attempt_us = kInfinityUs;
    SetError(&out[i], "no route matches topic \"" + std::string(row.topic) + "\"");
    return;
  }
  const DispatchRoute &route = routes_[r];
  if (route.paused) {
    out[i].outcome = Outcome::kParkNoRoute;
    out[i].next_attempt_us = kInfinityUs;
    SetError(&out[i], "route \"" + route.pattern + "\" is paused");
    return;
  }
  SinkState *state = sinks_.Find(route.sink);
  if (state == nullptr) {
    // A route may name a sink that is not there (yet): a restore loads
    // outbox.routes before outbox.sinks (pg_restore -j), or someone deleted
    // the row by hand. Its events wait as unrouted ones do, without an
    // attempt, and get another look when sinks or routes change.
    out[i].outcome = Outcome::kParkNoRoute;
    out[i].next_attempt_us = kInfinityUs;
    SetError(&out[i], "route \"" + route.pattern + "\" names sink \"" + route.sink +
                          "\", which does not exist");
    return;
  }
  if (state->down && settings.now_us < state->retry_at_us) {
    out[i].outcome = Outcome::kPark;
    out[i].next_attempt_us = state->retry_at_us;
    SetError(&out[i], "sink \"" + route.sink + "\" is unavailable: " + state->last_error);
    if (row.has_key) guard_.Block(route.pattern, row.key, row.id, out[i].next_attempt_us);
    sinks_.NoteBehindDown(row.topic, route.sink);
    return;
  }
  // Parked, without an attempt, until the sink's late answers come: looked
  // at again as a key behind a late answer is (LateRecheckDueUs), soon
  // after a sink that was merely slow answers, once a second when it stays
  // silent.
  auto wait_for_late_answers = [&](const std::string &why) {
    out[i].outcome = Outcome::kPark;
    out[i].next_attempt_us = Verdicts::LateRecheckDueUs(
        settings.now_us, settings.now_us - late_.OldestLateUs(route.sink, settings.now_us));
    SetError(&out[i], why);
    if (row.has_key) guard_.Block(route.pattern, row.key, row.id, out[i].next_attempt_us);
  };
  if (!late_.empty() && late_.SinkHeld(route.sink)) {
    // It answers nothing of its earlier groups: nothing more goes to it
    // (its topics are left alone by the claims meanwhile).
    wait_for_late_answers("waiting for sink \"" + route.sink + "\" to answer earlier events");
    sinks_.NoteBehindDown(row.topic, route.sink);
    return;
  }
  if (late_.size() >= kLateGroupsBeforeSuspectsWait &&
      sinks_.IsSuspect(route.sink, row.topic, SteadyMs())) {
    // Many groups await late answers, and its topic is one the sink does not
    // answer just now (a partition without a leader): sent, it would make
    // another late group, and past kMaxLateGroups groups are waited for in
    // full, the sink's other topics with them, for the sink's whole timeout.
    // It waits until those answers thin out.
    wait_for_late_answers("waiting for sink \"" + route.sink +
                          "\" to answer earlier events of topic \"" + std::string(row.topic) +
                          "\"");
    return;
  }
  if (verdicts_.ParkBehindEarlier(row, route, admitted, settings.now_us, kWaitingForKey, &out[i])) {
    if (!flight->held_keys.empty() &&
        out[i].next_attempt_us == settings.now_us + Verdicts::kBehindDueUs &&
        flight->held_keys.count(RouteKey(route.pattern, std::string(row.key))) != 0) {
      // Behind its key's event that this batch sends alone (or parks, a
      // lead, for its turn at once), and nothing else of the key waits for
      // a later time: due once the batch is finished (the next claim finds
      // that one published, or parked again and this one behind it; a lead
      // claimed with it, not without), not Verdicts::kBehindDueUs later, a
      // second per event of a key whose events are all suspects.
      out[i].next_attempt_us = settings.now_us;
      guard_.Block(route.pattern, row.key, row.id, settings.now_us);
    }
    return;
  }
  Suspects &suspects = verdicts_.suspects();
  if (!suspects.empty() && suspects.SendsAlone(row.id, route.sink)) {
    // Lost with others twice: sent alone, one such event per sink at a
    // time, so that a connection lost under it was lost over it.
    if (suspects.WaitsForUntried(route.sink, row.id, SteadyMs(), settings.backoff_max_ms)) {
      WaitBehindUntried(flight, i);
      return;
    }
    uint64_t turn = 0;
    if (suspects.Out(route.sink, SteadyMs(), &turn)) {
      WaitForTurn(flight, i, turn);
      return;
    }
    // The turn is free: a lead later in this batch takes it (NoteLeads).
    auto lead = flight->first_lead.find(route.sink);
    if (lead != flight->first_lead.end() && lead->second > i) {
      flight->lead_jumped.insert(route.sink);
      WaitForTurn(flight, i, flight->ticket);
      return;
    }
    SendAlone(flight, i, alone);
    return;
  }
  admitted->emplace(row.id);
  (*groups)[route.sink].push_back(i);
}

void Dispatcher::NoteLeads(Flight *flight, const std::vector<bool> &deferred) {
  // A suspect waiting for its turn alone holds its key's later events; one
  // heading none holds only itself. A burst of culprits, each on a key of
  // its own, would otherwise hold an innocent key that was lost with them
  // for a whole round of their turns per event of that key (claimed in id
  // order, the burst comes first), that is, for every event it emits. So a
  // suspect heading later events of its key in this batch (a lead) takes a
  // free turn before the suspects claimed ahead of it, and waiting ones
  // are made due ahead of the others. Only every other turn, though: after
  // a lead went ahead of older suspects, the next free turn goes to the
  // oldest claimed (oldest_next_). Culprits given followers are leads too,
  // and would otherwise keep a suspect heading nothing (an innocent key
  // that emitted one event) from its turn for as long as they come.
  const Suspects &suspects = verdicts_.suspects();
  if (suspects.empty()) return;
  std::map<RouteKey, std::pair<size_t, int>> keys;  // first row, how many rows
  for (size_t i = 0; i < flight->n; ++i) {
    const int r = flight->route_of[i];
    if (r < 0 || deferred[i] || !flight->rows[i].has_key) continue;
    auto [it, fresh] = keys.try_emplace(
        RouteKey(routes_[r].pattern, std::string(flight->rows[i].key)), std::make_pair(i, 0));
    ++it->second.second;
  }
  const int64_t now_ms = SteadyMs();
  for (const auto &[route_key, first] : keys) {
    const size_t i = first.first;
    if (first.second < 2) continue;
    const EventRow &row = flight->rows[i];
    const DispatchRoute &route = routes_[flight->route_of[i]];
    if (!suspects.SendsAlone(row.id, route.sink)) continue;
    flight->leads.insert(i);
    ++flight->leads_of_sink[route.sink];
    // A free turn goes to the first lead that may take it: not one waiting
    // behind an earlier event of its key, nor a tried one waiting for the
    // untried (Decide parks those whatever this says).
    int64_t until = 0;
    uint64_t turn = 0;
    if (suspects.Out(route.sink, now_ms, &turn) || oldest_next_.count(route.sink) != 0 ||
        suspects.WaitsForUntried(route.sink, row.id, now_ms, flight->settings.backoff_max_ms) ||
        !guard_.MayDeliver(route.pattern, row.key, row.id, nullptr, &until)) {
      continue;
    }
    auto [chosen, fresh] = flight->first_lead.try_emplace(route.sink, i);
    if (!fresh && i < chosen->second) chosen->second = i;
  }
  // The lead that takes the turn waits for none: the others of its sink
  // are due as many turns later as there are leads that wait.
  for (const auto &[sink, i] : flight->first_lead) --flight->leads_of_sink[sink];
}

void Dispatcher::WaitForTurn(Flight *flight, size_t i, uint64_t turn) {
  // Another one is out alone: this one is due when that one's batch is
  // finished (in this window: at once; a late answer: when it may be in),
  // the ones after it a turn's length apart (TurnSpacingMs), the batch's
  // leads early (NoteLeads). Its key's later events wait behind it.
  const EventRow &row = flight->rows[i];
  const DispatchRoute &route = routes_[flight->route_of[i]];
  RowOutcome *out = flight->out;
  const bool in_window = std::any_of(flights_.begin(), flights_.end(),
                                     [turn](const Flight &f) { return f.ticket == turn; });
  // Leads and the others alternate (places 0, 2, 4 ... and 1, 3, 5 ...)
  // while both last; the others then follow one a place: a burst's
  // innocent leads are due among its first, and culprits made leads keep
  // no other one behind all of them.
  int64_t place = 0;
  if (flight->leads.count(i) != 0) {
    place = 2 * flight->lead_waiters[route.sink]++;
  } else {
    auto leads = flight->leads_of_sink.find(route.sink);
    const int64_t waiting_leads = leads == flight->leads_of_sink.end() ? 0 : leads->second;
    const int64_t n = flight->turn_waiters[route.sink]++;
    place = n + std::min(n + 1, waiting_leads);
  }
  // No later than outbox.backoff_max, as every retry: the spacing is the
  // last turn's length, and one turn that took seconds (a reconnect while
  // the broker restarted, a late answer) would otherwise park a line of
  // hundreds for minutes each time it is claimed, long after the turns are
  // quick again.
  const int64_t spread_ms = std::min(place * verdicts_.suspects().TurnSpacingMs(route.sink),
                                     flight->settings.backoff_max_ms);
  out[i].outcome = Outcome::kPark;
  out[i].next_attempt_us =
      flight->settings.now_us + (in_window ? 0 : kLateRecheckUs) + spread_ms * kUsecPerMs;
  SetError(&out[i], "lost with its connection twice: waiting for its turn to be sent alone");
  if (row.has_key) {
    guard_.Block(route.pattern, row.key, row.id, out[i].next_attempt_us);
    // A lead: its followers come with it to the next claim (Decide).
    if (flight->leads.count(i) != 0) flight->held_keys.emplace(route.pattern, std::string(row.key));
  }
}

void Dispatcher::SendAlone(Flight *flight, size_t i, std::vector<size_t> *alone) {
  // Not admitted: its group goes after the batch's others, so its key's
  // later events in this batch wait behind it (its retry holds the key in
  // the order guard) instead of going ahead in those.
  alone->reserve(alone->size() + 1);
  const EventRow &row = flight->rows[i];
  const DispatchRoute &route = routes_[flight->route_of[i]];
  if (row.has_key) flight->held_keys.emplace(route.pattern, std::string(row.key));
  // A lead that went ahead of older suspects gives the next turn to the
  // oldest (NoteLeads).
  if (flight->lead_jumped.count(route.sink) != 0) {
    oldest_next_.insert(route.sink);
  } else {
    oldest_next_.erase(route.sink);
  }
  verdicts_.suspects().SentAlone(route.sink, row.id, flight->ticket, SteadyMs());
  alone->push_back(i);
}

void Dispatcher::WaitBehindUntried(Flight *flight, size_t i) {
  // Lost alone since its sink last answered, while other suspects of the
  // sink are not tried yet (in this batch, in a later claim, or parked a
  // turn apart): those have their turns first, wherever they are. Sent
  // again now, it would be lost alone again, which with another one tried
  // reads as a broker that closes every connection: the sink judged down
  // for its backoff, every key of it held, while the untried ones could
  // still tell a culprit from a broker.
  const EventRow &row = flight->rows[i];
  const DispatchRoute &route = routes_[flight->route_of[i]];
  RowOutcome *out = &flight->out[i];
  // Until who was tried is forgotten (Suspects::WaitsForUntried), at most
  // a turn's limit, at least outbox.backoff_min: the untried ones have
  // their turns meanwhile, and one of them may never come back (its route
  // paused, its row deleted); parked again every backoff_min, a burst's
  // tried events were claimed and rewritten thousands of times a second
  // all that while. Lost alone while nothing else was answered, they are
  // most likely culprits, for which a try per backoff_max is the pace
  // anyway.
  const DispatchSettings &settings = flight->settings;
  const Suspects &suspects = verdicts_.suspects();
  const int64_t until_ms = suspects.TriedUntilMs(route.sink, settings.backoff_max_ms);
  int64_t wait_ms = until_ms - SteadyMs();
  wait_ms = std::min(std::max(wait_ms, settings.backoff_min_ms), Suspects::kTurnMs);
  out->outcome = Outcome::kPark;
  out->next_attempt_us = settings.now_us + wait_ms * kUsecPerMs;
  SetError(out,
           "lost alone with its connection: waiting for the turns of its sink's other "
           "suspects");
  verdicts_.BackOfTheLine(row, route, route.sink, settings, out);
  if (row.has_key) guard_.Block(route.pattern, row.key, row.id, out->next_attempt_us);
}

}  // namespace outbox
