#include "core/dispatch.hpp"

#include <algorithm>
#include <exception>
#include <map>
#include <set>
#include <utility>

#include "core/fault_points.hpp"
#include "core/route_match.hpp"

namespace outbox {

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
  // A sink with batches in flight is not recreated under them (another
  // batch's, or this batch's group sent before, awaiting its answers): a
  // failed one refuses this batch at once (retriable), and is recreated
  // once idle. Its late groups keep the old producer (LateAnswers::Retire).
  const Sink *current = state->sink.get();
  const bool idle =
      flights_.size() == 1 &&
      std::none_of(flight.groups.begin(), flight.groups.end(), [current](const SinkGroup &g) {
        return current != nullptr && g.sink == current;
      });
  Sink *sink = sinks_.SinkFor(group->sink_name, state, idle);
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
                         (group->results[k].answered_at_us - group->sent_unix_us) / 1000,
                         flight.settings.ack_wait_ms);
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
