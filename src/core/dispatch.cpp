#include "core/dispatch.hpp"

#include <algorithm>
#include <exception>
#include <map>
#include <set>
#include <utility>

#include "core/fault_points.hpp"
#include "core/route_match.hpp"

namespace outbox {

namespace {

// next_attempt_us for events without a route: PostgreSQL's 'infinity'.
constexpr int64_t kInfinityUs = INT64_MAX;

}  // namespace

Dispatcher::Dispatcher(SinkFactory factory)
    : rng_(std::random_device{}()),
      sinks_(factory, &logs_,
             [this](const std::string &name, std::unique_ptr<Sink> *producer) {
               late_.Retire(name, producer);
             }),
      late_(&routes_, &guard_, &sinks_, &verdicts_, &logs_),
      verdicts_(&routes_, &guard_, &sinks_, &late_.keys(), &logs_, &rng_) {
  // The order guard's pair hash gets a secret nobody outside this process
  // knows (order_guard.hpp).
  guard_.SetHashKey(HashKey{rng_(), rng_()});
}

Dispatcher::~Dispatcher() = default;

Dispatcher *Dispatcher::Create(SinkFactory factory) noexcept {
  try {
    return new Dispatcher(factory);
  } catch (...) {
    return nullptr;  // std::bad_alloc, or std::random_device without a source
  }
}

void Dispatcher::LogFailure(const char *what, const char *why) noexcept {
  try {
    Log(LogLevel::kError, std::string(what) + ": " + why);
  } catch (...) {
    // Out of memory while saying so: the outcomes already tell.
  }
}

void Dispatcher::Log(LogLevel level, std::string text) { logs_.Add(level, std::move(text)); }

bool Dispatcher::NextLog(LogLevel *level, char *text, size_t size) noexcept {
  try {
    sinks_.DrainLogs();
  } catch (...) {
    // Out of memory: the sinks' lines wait for the next call.
  }
  if (next_log_ >= taken_logs_.size()) {
    taken_logs_ = logs_.Take();
    next_log_ = 0;
    if (taken_logs_.empty()) return false;
  }
  *level = taken_logs_[next_log_].level;
  CopyOut(taken_logs_[next_log_].text, text, size);
  taken_logs_[next_log_].text.clear();
  ++next_log_;
  return true;
}

bool Dispatcher::Configure(const RouteRow *routes, size_t nroutes, const SinkRow *sinks,
                           size_t nsinks) noexcept {
  // Sinks may be replaced below: no batch may still point at them.
  if (!flights_.empty()) {
    LogFailure("configuration reloaded with batches in flight", "they are abandoned");
  }
  // With batches in flight, everything goes (abandoning them purges the
  // sinks' queues). Otherwise late groups of sinks that stay as they are
  // keep waiting for their answers (they name their routes by pattern);
  // those of sinks replaced or removed go below.
  if (!flights_.empty()) AbandonAll();
  try {
    OUTBOX_FAULT_CPP("dispatch.configure");
    std::vector<DispatchRoute> fresh;
    for (size_t i = 0; i < nroutes; ++i) {
      fresh.push_back(DispatchRoute{std::string(routes[i].pattern), std::string(routes[i].sink),
                                    routes[i].has_target, std::string(routes[i].target),
                                    routes[i].paused, routes[i].format});
      // Say once when a route is paused or resumed (not at start-up).
      for (const DispatchRoute &old : routes_) {
        if (old.pattern == fresh.back().pattern && old.paused != fresh.back().paused) {
          Log(LogLevel::kInfo, "route \"" + old.pattern + "\" " +
                                   (fresh.back().paused ? "paused: its events wait"
                                                        : "resumed: its events flow again"));
        }
      }
    }
    routes_ = std::move(fresh);
    patterns_.clear();
    for (const DispatchRoute &r : routes_) patterns_.emplace_back(r.pattern);
    sinks_.Configure(sinks, nsinks);
    guard_.Clear();
    // Late groups kept above still hold their keys back (the caller's
    // rebuild from the database finds their rows parked too).
    late_.HoldKeys();
    sinks_.ClearBehindDown();
    return true;
  } catch (const std::exception &e) {
    LogFailure("could not load sinks and routes", e.what());
  } catch (...) {
    LogFailure("could not load sinks and routes", "unexpected error");
  }
  // Half-loaded: route nothing rather than by a mix of old and new routes.
  routes_.clear();
  patterns_.clear();
  guard_.Clear();
  sinks_.ClearBehindDown();
  return false;
}

std::vector<std::string> Dispatcher::DeliverableLikePatterns() const {
  std::vector<std::string> patterns;
  for (const DispatchRoute &r : routes_) {
    if (!r.paused && sinks_.Has(r.sink)) patterns.push_back(LikePatternOf(r.pattern));
  }
  std::sort(patterns.begin(), patterns.end());
  return patterns;
}

int Dispatcher::RouteIndex(std::string_view topic) const {
  return BestPatternIndex(patterns_.data(), patterns_.size(), topic);
}

bool Dispatcher::NoteWaiting(const EventRow &event, int64_t until_us) noexcept {
  if (!event.has_key || until_us == kInfinityUs) return true;
  try {
    OUTBOX_FAULT_CPP("dispatch.note_waiting");
    const int r = RouteIndex(event.topic);
    if (r >= 0) guard_.Block(routes_[r].pattern, event.key, event.id, until_us);
    return true;
  } catch (...) {
    LogFailure("could not rebuild the per-key order state", "out of memory");
    return false;  // order state incomplete: the caller loads it all again
  }
}

bool Dispatcher::NoteDead(const EventRow &event) noexcept {
  if (!event.has_key) return true;
  try {
    const int r = RouteIndex(event.topic);
    if (r >= 0) guard_.Release(routes_[r].pattern, event.key, event.id);
    return true;
  } catch (...) {
    return false;
  }
}

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
  if (!late_.empty() && late_.SinkHeld(route.sink)) {
    // It answers nothing of its earlier groups: nothing more goes to it.
    // Looked at again as a key behind a late answer is (LateRecheckDueUs):
    // soon after a sink that was merely slow answers, once a second when
    // it stays silent (its topics are left alone by the claims meanwhile).
    out[i].outcome = Outcome::kPark;
    out[i].next_attempt_us = Verdicts::LateRecheckDueUs(
        settings.now_us, settings.now_us - late_.OldestLateUs(route.sink, settings.now_us));
    SetError(&out[i], "waiting for sink \"" + route.sink + "\" to answer earlier events");
    if (row.has_key) guard_.Block(route.pattern, row.key, row.id, out[i].next_attempt_us);
    sinks_.NoteBehindDown(row.topic, route.sink);
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
  out[i].outcome = Outcome::kPark;
  out[i].next_attempt_us = flight->settings.now_us + (in_window ? 0 : kLateRecheckUs) +
                           place * verdicts_.suspects().TurnSpacingMs(route.sink) * kUsecPerMs;
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

void Dispatcher::SendGroups(Flight *flight, std::map<std::string, std::vector<size_t>> *groups,
                            const std::vector<size_t> &alone, Sink::InterruptCheck interrupted) {
  // No SinkGroup moves once sent.
  flight->groups.reserve(flight->groups.size() + groups->size() + alone.size());
  for (auto &[name, members] : *groups) {
    flight->groups.emplace_back();
    SinkGroup &group = flight->groups.back();
    group.sink_name = name;
    group.members = std::move(members);
    SendGroup(*flight, &group, interrupted);
  }
  for (size_t i : alone) {
    flight->groups.emplace_back();
    SinkGroup &group = flight->groups.back();
    group.sink_name = routes_[flight->route_of[i]].sink;
    group.members.push_back(i);
    group.alone = true;
    SendGroup(*flight, &group, interrupted);
  }
}

Dispatcher::Ticket Dispatcher::Begin(const EventRow *rows, size_t n,
                                     const DispatchSettings &settings, RowOutcome *out,
                                     Sink::InterruptCheck interrupted) noexcept {
  const Ticket ticket = ++last_ticket_;
  for (size_t i = 0; i < n; ++i) {
    out[i] = RowOutcome{};
    out[i].attempts = rows[i].attempts;
  }
  try {
    flights_.emplace_back();
  } catch (...) {
    FailWindow("out of memory");
    return 0;
  }
  Flight *flight = &flights_.back();
  try {
    OUTBOX_FAULT_CPP("dispatch.begin");
    flight->ticket = ticket;
    flight->rows = rows;
    flight->n = n;
    flight->settings = settings;
    flight->out = out;
    flight->route_of.assign(n, -1);
    std::map<std::string, std::vector<size_t>> groups;  // sink name -> rows, in id order
    std::vector<size_t> alone;                          // rows sent each on its own
    std::set<std::string> admitted;
    std::vector<bool> deferred(n, false);
    for (size_t i = 0; i < n; ++i) {
      const EventRow &row = rows[i];
      const int r = RouteIndex(row.topic);
      flight->route_of[i] = r;
      if (r >= 0 && row.has_key) {
        // One batch in flight per route and key: an event of a key that an
        // earlier batch still carries waits for that batch's outcome.
        auto [it, fresh] = keys_in_flight_.try_emplace(
            RouteKey(routes_[r].pattern, std::string(row.key)), KeyInFlight{ticket, false});
        if (!fresh && it->second.ticket != ticket) it->second = KeyInFlight{ticket, true};
        if (it->second.deferred) {  // and so is every later event of it in this batch
          flight->deferred.push_back(i);
          deferred[i] = true;
        }
      }
    }
    NoteLeads(flight, deferred);
    for (size_t i = 0; i < n; ++i) {
      if (!deferred[i]) Decide(flight, i, &admitted, &groups, &alone);
    }
    // The deferred rows are decided later, with the turn as it is then.
    flight->first_lead.clear();
    SendGroups(flight, &groups, alone, interrupted);
  } catch (const std::exception &e) {
    // Out of memory half-way: what this batch and the ones before it
    // decided is incomplete (a key's later events may have been sent while
    // an earlier one got no verdict): the whole window goes.
    FailWindow(e.what());
    return 0;
  }
  return ticket;
}

void Dispatcher::FailWindow(const char *why) noexcept {
  // The outcome arrays are still the caller's (it is inside Begin or Finish):
  // clear every verdict, so that nothing of the window reads as decided.
  for (Flight &flight : flights_) {
    if (flight.out == nullptr) continue;
    for (size_t i = 0; i < flight.n; ++i) {
      flight.out[i] = RowOutcome{};
      flight.out[i].attempts = flight.rows[i].attempts;
    }
  }
  AbandonAll();
  guard_.Clear();  // it may hold decisions of the abandoned batches
  LogFailure("window of batches abandoned, its events stay pending", why);
}

void Dispatcher::ForgetKeysOf(Ticket ticket) noexcept {
  for (auto it = keys_in_flight_.begin(); it != keys_in_flight_.end();) {
    it = it->second.ticket == ticket ? keys_in_flight_.erase(it) : std::next(it);
  }
}

bool Dispatcher::Finish(Ticket ticket, Sink::InterruptCheck interrupted) noexcept {
  const bool known = std::any_of(flights_.begin(), flights_.end(),
                                 [ticket](const Flight &f) { return f.ticket == ticket; });
  if (!known) return true;  // abandoned or finished before
  // Batches are finished in the order begun: any earlier one goes first.
  while (!flights_.empty()) {
    const Ticket front = flights_.front().ticket;
    try {
      FinishFront(interrupted);
    } catch (const std::exception &e) {
      FailWindow(e.what());
      return false;
    } catch (...) {
      FailWindow("unexpected error");
      return false;
    }
    if (front == ticket) break;
  }
  return true;
}

// Settle the oldest batch in flight, then decide and deliver its deferred
// rows, whose earlier events' outcomes are all known now. May throw
// (out of memory): Finish then abandons the whole window.
void Dispatcher::FinishFront(Sink::InterruptCheck interrupted) {
  Flight &flight = flights_.front();
  const Ticket ticket = flight.ticket;
  // One ack wait for the whole window: its batches are finished one after
  // the other, and a slow sink must not hold up the others once per batch.
  if (window_deadline_ms_ == 0 && flight.settings.ack_wait_ms > 0) {
    window_deadline_ms_ = SteadyMs() + flight.settings.ack_wait_ms;
  }
  const int64_t deadline = flight.settings.ack_wait_ms > 0 ? window_deadline_ms_ : 0;
  for (SinkGroup &group : flight.groups) FinishGroup(flight, &group, deadline, interrupted);
  OUTBOX_FAULT_CPP("dispatch.finish");
  if (!flight.deferred.empty()) {
    if (interrupted != nullptr && interrupted()) {
      // Shutting down: the deferred rows get no verdict (kUntouched).
    } else {
      const size_t settled = flight.groups.size();
      std::map<std::string, std::vector<size_t>> groups;
      std::vector<size_t> alone;
      std::set<std::string> admitted;
      for (size_t i : flight.deferred) {
        // An earlier event of its key left as it was (pending, never
        // tried) must go out first: this one waits with it.
        const EventRow &row = flight.rows[i];
        const int r = flight.route_of[i];
        if (verdicts_.untouched().count(RouteKey(routes_[r].pattern, std::string(row.key))) != 0) {
          continue;
        }
        Decide(&flight, i, &admitted, &groups, &alone);
      }
      SendGroups(&flight, &groups, alone, interrupted);
      for (size_t g = settled; g < flight.groups.size(); ++g) {
        FinishGroup(flight, &flight.groups[g], deadline, interrupted);
      }
    }
  }
  flights_.pop_front();
  ForgetKeysOf(ticket);
  if (flights_.empty()) {
    verdicts_.ClearUntouched();
    window_deadline_ms_ = 0;
  }
}

// Settle a group from its answers, or leave it to late answers when they
// are not in by deadline_ms. Late groups hold copies of their events' ids
// and keys: past kMaxLateGroups (a sink slow for long under a steady
// stream), groups are waited for in full instead, which bounds that memory.
void Dispatcher::FinishGroup(const Flight &flight, SinkGroup *group, int64_t deadline_ms,
                             Sink::InterruptCheck interrupted) {
  if (sinks_[group->sink_name].wait_in_full) deadline_ms = 0;
  if (!sinks_.CollectGroup(group, deadline_ms, flight.settings, interrupted)) {
    const bool unanswered = std::any_of(group->results.begin(), group->results.end(),
                                        [](const Delivery &d) { return d.answered_at_us == 0; });
    if (unanswered && late_.size() < kMaxLateGroups) {
      late_.Take(group, flight.rows, flight.route_of.data(), flight.out, flight.settings,
                 interrupted);
      return;
    }
    (void)sinks_.CollectGroup(group, 0, flight.settings, interrupted);
  }
  SettleGroup(flight, group, interrupted);
}

std::vector<std::string> Dispatcher::LateIds() const { return late_.Ids(); }

bool Dispatcher::LateArrived() noexcept { return late_.Arrived(); }

bool Dispatcher::SettleLate(const DispatchSettings &settings) noexcept {
  late_.ClearOutcomes();
  if (late_.empty()) return true;
  try {
    late_.Settle(settings);
    return true;
  } catch (const std::exception &e) {
    LogFailure("could not judge late answers", e.what());
  } catch (...) {
    LogFailure("could not judge late answers", "unexpected error");
  }
  // The guard may hold half of what was judged: the caller reloads it.
  AbandonAll();
  guard_.Clear();
  late_.ClearOutcomes();
  return false;
}

bool Dispatcher::NextLateOutcome(LateOutcome *out) noexcept { return late_.NextOutcome(out); }

void Dispatcher::AbandonAll() noexcept {
  if (!flights_.empty()) {
    // First the sinks, while the Delivery arrays they write into still
    // exist (they belong to our Groups); then the flights, whose rows and
    // outcome arrays are the caller's and are never touched here.
    sinks_.AbandonAll("abandoned: the publisher's transaction failed");
    // What the brokers answered before stays true: a key's later event they
    // took while refusing an earlier one (a Kafka batch split over two
    // requests) arrives first all the same, and the WARNING that says so
    // must not depend on the group having been judged.
    for (const Flight &flight : flights_) {
      for (const SinkGroup &group : flight.groups) {
        if (group.results.size() != group.members.size()) continue;  // never sent
        Judging j;
        j.rows = flight.rows;
        j.route_of = flight.route_of.data();
        j.members = &group.members;
        j.results = &group.results;
        j.sink_name = &group.sink_name;
        verdicts_.NoteOvertaken(j);
      }
    }
    flights_.clear();
  }
  window_deadline_ms_ = 0;
  late_.Drop();
  keys_in_flight_.clear();
  verdicts_.ClearUntouched();
  verdicts_.suspects().ClearTurns();  // nothing sent alone will be judged
}

void Dispatcher::SendGroup(const Flight &flight, SinkGroup *group,
                           Sink::InterruptCheck interrupted) {
  SinkState *state = &sinks_[group->sink_name];
  group->results.resize(group->members.size());
  // A sink with batches in flight is not recreated under them: a failed one
  // refuses this batch at once (retriable), and is recreated once idle.
  // Its late groups keep the failed producer (LateAnswers::Retire).
  Sink *sink = sinks_.SinkFor(group->sink_name, state, flights_.size() == 1);
  if (sink == nullptr) {
    for (Delivery &d : group->results) d = Delivery{DeliveryStatus::kRetriable, state->last_error};
    return;
  }
  group->messages.reserve(group->members.size());
  for (size_t i : group->members) {
    group->messages.push_back(MessageOf(flight.rows[i], routes_[flight.route_of[i]],
                                        flight.route_of[i], flight.settings.source));
  }
  group->sink = sink;
  group->sent_ms = SteadyMs();
  group->sent_unix_us = UnixNowUs();
  // A suspect's group goes alone on the sink's connections: a loss while
  // other messages were on them would say nothing of it.
  group->sink_ticket =
      group->alone && group->messages.size() == 1
          ? sink->SendAlone(group->messages.data(), group->results.data(), interrupted)
          : sink->Send(group->messages.data(), group->messages.size(), group->results.data(),
                       interrupted);
}

void Dispatcher::SettleGroup(const Flight &flight, SinkGroup *group,
                             Sink::InterruptCheck interrupted) {
  SinkState &state = sinks_[group->sink_name];
  state.wait_in_full = false;  // this group's refusals are retried alone
  for (size_t k = 0; k < group->results.size() && k < group->messages.size(); ++k) {
    if (group->results[k].status == DeliveryStatus::kDelivered) {
      late_.NoteAnswered(&state, group->sink_name, group->messages[k].topic,
                         (group->results[k].answered_at_us - group->sent_unix_us) / 1000);
    }
  }
  if (std::any_of(group->results.begin(), group->results.end(), FromBroker)) {
    late_.SinkAnswers(&state, group->sink_name);
  } else if (state.slow && group->sink != nullptr && !late_.SinkHasLate(group->sink_name)) {
    state.slow = false;
    Log(LogLevel::kInfo, "sink \"" + group->sink_name + "\" answers within outbox.ack_wait again");
  }
  Judging j;
  j.rows = flight.rows;
  j.route_of = flight.route_of.data();
  j.members = &group->members;
  j.results = &group->results;
  j.settings = &flight.settings;
  j.out = flight.out;
  j.sink_name = &group->sink_name;
  j.solo_sink = group->sink;
  j.alone = group->alone;
  // Never sent (no producer): its failure is the sink's.
  j.answered_others =
      group->sink != nullptr && state.AnsweredRecently(group->sent_ms, flight.settings.ack_wait_ms);
  verdicts_.Judge(j, interrupted);
}

void Dispatcher::Poll() noexcept { sinks_.Poll(); }

std::vector<std::string> Dispatcher::TopicsBehindDownSinks(int64_t now_us) const {
  std::vector<std::string> topics;
  try {
    for (const auto &[topic, sink] : sinks_.behind_down()) {
      auto it = sinks_.states().find(sink);
      if (it == sinks_.states().end()) continue;
      if ((it->second.down && now_us < it->second.retry_at_us) || late_.SinkHeld(sink)) {
        topics.push_back(topic);
      }
    }
  } catch (const std::exception &) {
    topics.clear();  // out of memory: claim everything, as without the list
  }
  return topics;
}

int64_t Dispatcher::NextSinkRetryUs(int64_t after_us) const noexcept {
  int64_t next = 0;
  for (const auto &[name, state] : sinks_.states()) {
    // A retry time that is past, or a sink that owes late answers (tried
    // again once they are in), would wake the idle publisher at once, and
    // again, for claims that take nothing.
    if (state.down && state.retry_at_us > after_us && !late_.SinkHasWholeLate(name) &&
        (next == 0 || state.retry_at_us < next)) {
      next = state.retry_at_us;
    }
  }
  return next;
}

void Dispatcher::SinkStates(char *text, size_t size) const noexcept { sinks_.Describe(text, size); }

}  // namespace outbox
