#include "core/dispatch.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/backoff.hpp"
#include "core/fault_points.hpp"
#include "core/route_match.hpp"

namespace outbox {

namespace {

constexpr int64_t kUsecPerMs = 1000;
constexpr std::string_view kWaitingForKey = "waiting for an earlier event with the same key";
// next_attempt_us for events without a route: PostgreSQL's 'infinity'.
constexpr int64_t kInfinityUs = INT64_MAX;

void SetError(RowOutcome *out, std::string_view text) {
  const size_t n = std::min(text.size(), sizeof out->error - 1);
  std::memcpy(out->error, text.data(), n);
  out->error[n] = '\0';
}

// Milliseconds on a clock that only goes forward (ack wait deadlines).
int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Whether an answer came from a broker: delivered or refused by it. A
// transient failure may be the client's own (a message timed out in
// librdkafka's queue) and says nothing of whether the sink answers.
bool FromBroker(const Delivery &d) {
  return d.answered_at_us != 0 &&
         (d.status == DeliveryStatus::kDelivered || d.status == DeliveryStatus::kRejected ||
          d.status == DeliveryStatus::kTargetRefused);
}

std::string Seconds(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(us) / 1e6);
  return buf;
}

}  // namespace

Dispatcher::Dispatcher(SinkFactory factory) : factory_(factory), rng_(std::random_device{}()) {
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

namespace {
// Copy `text` into buf[0..size), cut to fit, NUL-terminated.
void CopyOut(std::string_view text, char *buf, size_t size) noexcept {
  if (size == 0) return;
  const size_t n = std::min(text.size(), size - 1);
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
}
}  // namespace

void Dispatcher::LogFailure(const char *what, const char *why) noexcept {
  try {
    Log(LogLevel::kError, std::string(what) + ": " + why);
  } catch (...) {
    // Out of memory while saying so: the outcomes already tell.
  }
}

double Dispatcher::Random() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

void Dispatcher::Log(LogLevel level, std::string text) { logs_.Add(level, std::move(text)); }

bool Dispatcher::NextLog(LogLevel *level, char *text, size_t size) noexcept {
  try {
    DrainSinkLogs();
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

void Dispatcher::DrainSinkLogs() {
  for (auto &[name, state] : sinks_) {
    if (!state.sink) continue;
    for (LogLine &line : state.sink->TakeLogs()) {
      Log(line.level, "sink \"" + name + "\": " + line.text);
    }
  }
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
    std::vector<Route> fresh;
    for (size_t i = 0; i < nroutes; ++i) {
      fresh.push_back(Route{std::string(routes[i].pattern), std::string(routes[i].sink),
                            routes[i].has_target, std::string(routes[i].target), routes[i].paused,
                            routes[i].format});
      // Say once when a route is paused or resumed (not at start-up).
      for (const Route &old : routes_) {
        if (old.pattern == fresh.back().pattern && old.paused != fresh.back().paused) {
          Log(LogLevel::kInfo, "route \"" + old.pattern + "\" " +
                                   (fresh.back().paused ? "paused: its events wait"
                                                        : "resumed: its events flow again"));
        }
      }
    }
    routes_ = std::move(fresh);
    patterns_.clear();
    for (const Route &r : routes_) patterns_.emplace_back(r.pattern);
    std::set<std::string> seen;
    for (size_t i = 0; i < nsinks; ++i) {
      const std::string name(sinks[i].name);
      SinkOptions options;
      for (size_t j = 0; j < sinks[i].option_count; ++j) {
        const OptionView &o = sinks[i].options[j];
        options.push_back(
            SinkOption{std::string(o.key), o.kind, std::string(o.text), o.from_environment});
      }
      seen.insert(name);
      auto it = sinks_.find(name);
      const bool changed = it == sinks_.end() || it->second.kind != sinks[i].kind ||
                           it->second.privileged != sinks[i].privileged ||
                           it->second.options.size() != options.size() ||
                           !std::equal(options.begin(), options.end(), it->second.options.begin(),
                                       [](const SinkOption &a, const SinkOption &b) {
                                         return a.key == b.key && a.kind == b.kind &&
                                                a.text == b.text &&
                                                a.from_environment == b.from_environment;
                                       });
      if (changed) {
        if (it != sinks_.end()) {
          DrainSinkLogs();                       // while its producer is still under its name
          RetireLateOf(name, &it->second.sink);  // before the sink they wait on goes
        }
        SinkState fresh;
        fresh.kind = std::string(sinks[i].kind);
        fresh.options = std::move(options);
        fresh.privileged = sinks[i].privileged;
        sinks_[name] = std::move(fresh);  // closes the old producer, if any
      }
    }
    for (auto it = sinks_.begin(); it != sinks_.end();) {
      if (seen.count(it->first) == 0) {
        DrainSinkLogs();
        RetireLateOf(it->first, &it->second.sink);
        it = sinks_.erase(it);
      } else {
        ++it;
      }
    }
    guard_.Clear();
    // Late groups kept above still hold their keys back (the caller's
    // rebuild from the database finds their rows parked too).
    for (const Late &late : late_) {
      for (const LateRow &r : late.rows) {
        if (r.has_key) guard_.Block(r.pattern, r.key, r.id, late.parked_until_us);
      }
    }
    behind_down_sinks_.clear();
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
  behind_down_sinks_.clear();
  return false;
}

std::vector<std::string> Dispatcher::DeliverableLikePatterns() const {
  std::vector<std::string> patterns;
  for (const Route &r : routes_) {
    if (!r.paused && sinks_.count(r.sink) != 0) patterns.push_back(LikePatternOf(r.pattern));
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

Sink *Dispatcher::SinkFor(const std::string &name, SinkState *state, bool may_recreate) {
  if (may_recreate && state->sink && state->sink->NeedsRecreate()) {
    Log(LogLevel::kWarning, "sink \"" + name + "\" hit a fatal error; recreating its producer");
    DrainSinkLogs();
    RetireLateOf(name, &state->sink);  // late groups keep pointing at it
    state->sink.reset();
  }
  if (!state->sink) {
    std::string error;
    state->sink = factory_(name, state->kind, state->options, state->privileged, &error);
    if (!state->sink) {
      state->last_error = error.empty() ? "could not create the sink" : error;
      return nullptr;
    }
  }
  return state->sink.get();
}

bool Dispatcher::Dispatch(const EventRow *rows, size_t n, const DispatchSettings &settings,
                          RowOutcome *out, Sink::InterruptCheck interrupted) noexcept {
  const Ticket ticket = Begin(rows, n, settings, out, interrupted);
  return ticket != 0 && Finish(ticket, interrupted);
}

void Dispatcher::Decide(Flight *flight, size_t i, std::set<std::string> *admitted,
                        std::map<std::string, std::vector<size_t>> *groups) {
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
  const Route &route = routes_[r];
  if (route.paused) {
    out[i].outcome = Outcome::kParkNoRoute;
    out[i].next_attempt_us = kInfinityUs;
    SetError(&out[i], "route \"" + route.pattern + "\" is paused");
    return;
  }
  auto sink_it = sinks_.find(route.sink);
  if (sink_it == sinks_.end()) {
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
  SinkState &state = sink_it->second;
  if (state.down && settings.now_us < state.retry_at_us) {
    out[i].outcome = Outcome::kPark;
    out[i].next_attempt_us = state.retry_at_us;
    SetError(&out[i], "sink \"" + route.sink + "\" is unavailable: " + state.last_error);
    if (row.has_key) guard_.Block(route.pattern, row.key, row.id, out[i].next_attempt_us);
    NoteBehindDownSink(row.topic, route.sink);
    return;
  }
  if (!late_.empty() && SinkHeld(route.sink)) {
    // It answers nothing of its earlier groups: nothing more goes to it.
    out[i].outcome = Outcome::kPark;
    out[i].next_attempt_us = settings.now_us + kLateRecheckUs;
    SetError(&out[i], "waiting for sink \"" + route.sink + "\" to answer earlier events");
    if (row.has_key) guard_.Block(route.pattern, row.key, row.id, out[i].next_attempt_us);
    NoteBehindDownSink(row.topic, route.sink);
    return;
  }
  if (ParkBehindEarlier(row, route, admitted, settings.now_us, kWaitingForKey, &out[i])) return;
  admitted->emplace(row.id);
  (*groups)[route.sink].push_back(i);
}

void Dispatcher::SendGroups(Flight *flight, std::map<std::string, std::vector<size_t>> *groups,
                            Sink::InterruptCheck interrupted) {
  flight->groups.reserve(flight->groups.size() + groups->size());  // no Group moves once sent
  for (auto &[name, members] : *groups) {
    flight->groups.emplace_back();
    Group &group = flight->groups.back();
    group.sink_name = name;
    group.members = std::move(members);
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
    std::set<std::string> admitted;
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
          continue;
        }
      }
      Decide(flight, i, &admitted, &groups);
    }
    SendGroups(flight, &groups, interrupted);
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
  for (Group &group : flight.groups) FinishGroup(flight, &group, deadline, interrupted);
  OUTBOX_FAULT_CPP("dispatch.finish");
  if (!flight.deferred.empty()) {
    if (interrupted != nullptr && interrupted()) {
      // Shutting down: the deferred rows get no verdict (kUntouched).
    } else {
      const size_t settled = flight.groups.size();
      std::map<std::string, std::vector<size_t>> groups;
      std::set<std::string> admitted;
      for (size_t i : flight.deferred) {
        // An earlier event of its key left as it was (pending, never
        // tried) must go out first: this one waits with it.
        const EventRow &row = flight.rows[i];
        const int r = flight.route_of[i];
        if (untouched_keys_.count(RouteKey(routes_[r].pattern, std::string(row.key))) != 0) {
          continue;
        }
        Decide(&flight, i, &admitted, &groups);
      }
      SendGroups(&flight, &groups, interrupted);
      for (size_t g = settled; g < flight.groups.size(); ++g) {
        FinishGroup(flight, &flight.groups[g], deadline, interrupted);
      }
    }
  }
  flights_.pop_front();
  ForgetKeysOf(ticket);
  if (flights_.empty()) {
    untouched_keys_.clear();
    window_deadline_ms_ = 0;
  }
}

// Settle a group from its answers, or leave it to late answers when they
// are not in by deadline_ms. Late groups hold copies of their events' ids
// and keys: past kMaxLateGroups (a sink slow for long under a steady
// stream), groups are waited for in full instead, which bounds that memory.
void Dispatcher::FinishGroup(const Flight &flight, Group *group, int64_t deadline_ms,
                             Sink::InterruptCheck interrupted) {
  if (sinks_[group->sink_name].wait_in_full) deadline_ms = 0;
  if (!CollectGroup(group, deadline_ms, flight.settings, interrupted)) {
    const bool unanswered = std::any_of(group->results.begin(), group->results.end(),
                                        [](const Delivery &d) { return d.answered_at_us == 0; });
    if (unanswered && late_.size() < kMaxLateGroups) {
      MakeLate(flight, group, interrupted);
      return;
    }
    (void)CollectGroup(group, 0, flight.settings, interrupted);
  }
  SettleGroup(flight, group, interrupted);
}

// Wait for a group's answers until deadline_ms (SteadyMs; 0: as long as the
// sink takes). True when they are all in. Given up (false) earlier when the
// sink answers (this group, or another within an ack wait before it was
// sent) and every event still unanswered is of a suspect topic (see "Slow
// sinks"), or has waited kStragglerFactor times the slowest recent answer
// for its topic (the sink's, for a topic it never answered), and at least
// kMinGraceMs: a topic the cluster lacks, or a
// partition without a leader, then costs the group's other events a few ms,
// not the ack wait, and a slower broker's topics are waited for as long as
// they usually take, and more.
bool Dispatcher::CollectGroup(Group *group, int64_t deadline_ms, const DispatchSettings &settings,
                              Sink::InterruptCheck interrupted) {
  if (group->sink == nullptr || group->sink_ticket == 0) return true;
  if (deadline_ms == 0) {
    group->sink->Collect(group->sink_ticket, interrupted);
    return true;
  }
  // Looked at this often while stragglers may be given up (the sink
  // answers), else less often: each look wakes the thread.
  constexpr int64_t kPollMs = 5;
  constexpr int64_t kQuietPollMs = 25;
  SinkState &state = sinks_[group->sink_name];
  int64_t now_ms = SteadyMs();
  const bool alive = AnsweredRecently(state, *group, settings);
  bool answered = false;
  for (;;) {
    const int64_t left = std::max<int64_t>(0, deadline_ms - now_ms);
    const int64_t slice = answered || alive ? kPollMs : kQuietPollMs;
    if (group->sink->CollectFor(group->sink_ticket, std::min(left, slice), interrupted)) {
      return true;
    }
    now_ms = SteadyMs();
    if (now_ms >= deadline_ms) return false;
    if (!answered && std::any_of(group->results.begin(), group->results.end(), FromBroker)) {
      answered = true;
      // A sink's first answers measure it (NoteAnsweredTopic refines it).
      if (state.answer_ms == 0) state.answer_ms = std::max<int64_t>(1, now_ms - group->sent_ms);
    }
    if ((answered || alive || OnlySuspectsLeft(*group, now_ms)) &&
        OnlyStragglersLeft(state, *group, now_ms)) {
      return false;
    }
    if (interrupted != nullptr && interrupted()) return false;
  }
}

// Whether every unanswered event of the group is of a suspect topic: then
// the group is given up at once even when the sink answered nothing lately
// (its only events may be retries of such a topic), so that it does not hold
// the cycle for the ack wait. Whether the sink is slow or down is judged as
// for any group (MakeLate): a broker that went down right after a topic
// became suspect answers nothing at all, and must be found down.
bool Dispatcher::OnlySuspectsLeft(const Group &group, int64_t now_ms) const {
  if (suspect_topics_.empty()) return false;
  for (size_t k = 0; k < group.results.size(); ++k) {
    if (group.results[k].answered_at_us != 0) continue;
    if (!IsSuspect(group.messages[k].topic, now_ms)) return false;
  }
  return true;
}

// Whether every unanswered event of the group has waited longer than its
// topic's answers take (see CollectGroup).
bool Dispatcher::OnlyStragglersLeft(const SinkState &state, const Group &group,
                                    int64_t now_ms) const {
  const int64_t waited = now_ms - group.sent_ms;
  for (size_t k = 0; k < group.results.size(); ++k) {
    if (group.results[k].answered_at_us != 0) continue;
    // A topic that went unanswered lately and was not answered since: at once.
    if (IsSuspect(group.messages[k].topic, now_ms)) continue;
    int64_t usual = state.answer_ms;
    auto it = state.answered_topics.find(group.messages[k].topic);
    if (it != state.answered_topics.end()) usual = it->second;
    if (usual == 0) return false;  // nothing known of this sink's answers yet
    if (waited < std::max(kMinGraceMs, kStragglerFactor * usual)) return false;
  }
  return true;
}

// A delivered event's topic, answered after `latency_ms`: the slowest
// recent answer for it (and for the sink) is kept, decaying by 1/16 per
// answer. At most kMaxAnsweredTopics topics are remembered (beyond, the map
// starts afresh: a topic forgotten is judged by the sink's answers). It is
// no longer suspect.
void Dispatcher::NoteAnsweredTopic(SinkState *state, std::string_view topic, int64_t latency_ms) {
  latency_ms = std::max<int64_t>(1, latency_ms);
  auto decay = [latency_ms](int64_t *slowest) {
    *slowest = std::max(latency_ms, *slowest - *slowest / 16);
  };
  decay(&state->answer_ms);
  auto it = state->answered_topics.find(topic);
  if (it == state->answered_topics.end()) {
    if (state->answered_topics.size() >= kMaxAnsweredTopics) state->answered_topics.clear();
    state->answered_topics.emplace(std::string(topic), latency_ms);
  } else {
    decay(&it->second);
  }
  if (!suspect_topics_.empty()) {
    auto s = suspect_topics_.find(topic);
    if (s != suspect_topics_.end()) suspect_topics_.erase(s);
  }
}

bool Dispatcher::AnsweredRecently(const SinkState &state, const Group &group,
                                  const DispatchSettings &settings) const {
  return state.last_answer_ms != 0 && state.last_answer_ms + settings.ack_wait_ms >= group.sent_ms;
}

bool Dispatcher::IsSuspect(std::string_view topic, int64_t now_ms) const {
  if (suspect_topics_.empty()) return false;
  auto it = suspect_topics_.find(topic);
  return it != suspect_topics_.end() && it->second >= now_ms;
}

// The group's sink has not answered all of it in time. What it answered is
// judged now, when the sink answers others (see "Slow sinks"); the rest is
// parked until the sink must have settled it, its keys held back, and what
// is needed to judge its answers when they come is kept (SettleLate). May
// throw (out of memory): the Late is complete (sink_ticket set) only once
// the answers' array has changed hands, so an abandon in between leaves
// nothing the sink could write into after it is freed.
void Dispatcher::MakeLate(const Flight &flight, Group *group, Sink::InterruptCheck interrupted) {
  SinkState &state = sinks_[group->sink_name];
  const int64_t now_ms = SteadyMs();
  std::vector<size_t> answered, unanswered;  // positions in the group
  for (size_t k = 0; k < group->members.size(); ++k) {
    (group->results[k].answered_at_us != 0 ? answered : unanswered).push_back(k);
  }
  const bool broker_answered = std::any_of(answered.begin(), answered.end(), [group](size_t k) {
    return FromBroker(group->results[k]);
  });
  const bool answers_others = broker_answered || AnsweredRecently(state, *group, flight.settings);
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
        NoteAnsweredTopic(&state, group->messages[k].topic,
                          (group->results[k].answered_at_us - group->sent_unix_us) / 1000);
      }
    }
    Judging j;
    j.rows = flight.rows;
    j.route_of = flight.route_of.data();
    j.members = &members;
    j.results = &results;
    j.settings = &flight.settings;
    j.out = flight.out;
    j.sink_name = &group->sink_name;
    j.solo_sink = group->sink;
    j.solo_flight = &flight;
    j.partial = true;
    Judge(j, interrupted);
  }

  late_.emplace_back();
  Late &late = late_.back();
  late.sink_name = group->sink_name;
  late.sink = group->sink;
  late.whole = !answers_others;
  late.sent_unix_us = group->sent_unix_us;
  // From now, not from the cycle's start: it was sent at the latest now.
  const int64_t now_us = flight.settings.clock_us != nullptr
                             ? std::max(flight.settings.now_us, flight.settings.clock_us())
                             : flight.settings.now_us;
  late.parked_until_us = now_us + (group->sink->SettleLimitMs() + kLateMarginMs) * kUsecPerMs;
  late.rows.reserve(unanswered.size());
  late.result_of.reserve(unanswered.size());
  for (size_t k : unanswered) {
    const EventRow &row = flight.rows[group->members[k]];
    late.rows.push_back(LateRow{std::string(row.id), std::string(row.topic), std::string(row.key),
                                routes_[flight.route_of[group->members[k]]].pattern, row.has_key,
                                row.attempts, row.created_at});
    late.result_of.push_back(k);
  }
  const std::string why = "waiting for sink \"" + group->sink_name + "\" to answer";
  std::string new_suspects;
  for (size_t k : unanswered) {
    const size_t i = group->members[k];
    const EventRow &row = flight.rows[i];
    RowOutcome &out = flight.out[i];
    out.outcome = Outcome::kPark;
    out.next_attempt_us = late.parked_until_us;
    SetError(&out, why);
    if (row.has_key) {
      const std::string &pattern = routes_[flight.route_of[i]].pattern;
      guard_.Block(pattern, row.key, row.id, late.parked_until_us);
      late_keys_.emplace(pattern, std::string(row.key));
    }
    if (answers_others) {
      int64_t &until = suspect_topics_[std::string(row.topic)];
      if (until < now_ms &&
          new_suspects.find("\"" + std::string(row.topic) + "\"") == std::string::npos) {
        new_suspects += (new_suspects.empty() ? "\"" : ", \"") + std::string(row.topic) + "\"";
      }
      until = now_ms + kSuspectTopicMs;
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

std::vector<std::string> Dispatcher::LateIds() const {
  std::vector<std::string> ids;
  for (const Late &late : late_) {
    for (const LateRow &row : late.rows) ids.push_back(row.id);
  }
  return ids;
}

bool Dispatcher::LateArrived() noexcept {
  bool any = false;
  for (Late &late : late_) {
    if (!late.complete && late.sink_ticket != 0) {
      late.complete = late.sink->CollectFor(late.sink_ticket, 0, nullptr);
      if (late.complete && !late.retired &&
          std::any_of(late.results.begin(), late.results.end(), FromBroker)) {
        auto it = sinks_.find(late.sink_name);
        if (it != sinks_.end()) it->second.last_answer_ms = SteadyMs();
      }
    }
    any = any || late.complete;
  }
  return any;
}

bool Dispatcher::SettleLate(const DispatchSettings &settings) noexcept {
  late_outcomes_.clear();
  next_late_outcome_ = 0;
  if (late_.empty()) return true;
  try {
    (void)LateArrived();
    for (auto it = late_.begin(); it != late_.end();) {
      if (!it->complete) {
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
        if (r.has_key) {
          // Judged afresh below: the hold MakeLate put on the key (until the
          // sink's whole timeout) goes, and the verdict sets the new one.
          late_keys_.erase(RouteKey(r.pattern, r.key));
          guard_.Release(r.pattern, r.key, r.id);
        }
        for (size_t x = 0; x < routes_.size(); ++x) {
          if (routes_[x].pattern == r.pattern) route_of[k] = static_cast<int>(x);
        }
        if (route_of[k] < 0 &&
            late.results[late.result_of[k]].status == DeliveryStatus::kDelivered) {
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
      if (auto sink_it = sinks_.find(late.sink_name); !late.retired && sink_it != sinks_.end()) {
        for (size_t x = 0; x < members.size(); ++x) {
          if (results[x].status == DeliveryStatus::kDelivered) {
            NoteAnsweredTopic(&sink_it->second, late.rows[members[x]].topic,
                              (results[x].answered_at_us - late.sent_unix_us) / 1000);
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
      Judge(j, nullptr);
      for (size_t k = 0; k < n; ++k) {
        if (out[k].outcome == Outcome::kUntouched) continue;
        LateOutcome o;
        CopyOut(late.rows[k].id, o.id, sizeof o.id);
        o.created_at = late.rows[k].created_at;
        o.attempts = late.rows[k].attempts;
        o.parked_until_us = late.parked_until_us;
        o.answered_at_us = late.results[late.result_of[k]].answered_at_us;
        o.outcome = out[k];
        late_outcomes_.push_back(o);
      }
      it = late_.erase(it);
    }
    FreeRetiredSinks();
    return true;
  } catch (const std::exception &e) {
    LogFailure("could not judge late answers", e.what());
  } catch (...) {
    LogFailure("could not judge late answers", "unexpected error");
  }
  // The guard may hold half of what was judged: the caller reloads it.
  AbandonAll();
  guard_.Clear();
  late_outcomes_.clear();
  return false;
}

bool Dispatcher::NextLateOutcome(LateOutcome *out) noexcept {
  if (next_late_outcome_ >= late_outcomes_.size()) return false;
  *out = late_outcomes_[next_late_outcome_++];
  return true;
}

// The sink's late groups keep its producer (moved to retired_sinks_) and
// go on waiting for their answers; they no longer count as the sink's (the
// new one under its name is not held or slow because of them). May throw
// bad_alloc, only before it changes anything (the room is reserved first):
// then the producer and its late groups stay as they were, and the caller's
// boundary gives up (Configure routes nothing; SinkFor's batch fails).
void Dispatcher::RetireLateOf(const std::string &sink, std::unique_ptr<Sink> *producer) {
  if (*producer == nullptr || !SinkHasLate(sink)) return;
  retired_sinks_.reserve(retired_sinks_.size() + 1);
  retired_sinks_.push_back(std::move(*producer));  // cannot throw now
  for (Late &late : late_) {
    if (!late.retired && late.sink_name == sink) late.retired = true;
  }
}

// Retired producers none of whose late groups is left.
void Dispatcher::FreeRetiredSinks() noexcept {
  for (auto it = retired_sinks_.begin(); it != retired_sinks_.end();) {
    Sink *sink = it->get();
    const bool waited_on =
        std::any_of(late_.begin(), late_.end(), [sink](const Late &l) { return l.sink == sink; });
    it = waited_on ? std::next(it) : retired_sinks_.erase(it);
  }
}

void Dispatcher::DropLate() noexcept {
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
  late_.clear();
  late_keys_.clear();
  retired_sinks_.clear();
}

void Dispatcher::NoteUntouched(const Route &route, const EventRow &row) {
  if (row.has_key) untouched_keys_.emplace(route.pattern, std::string(row.key));
}

void Dispatcher::AbandonAll() noexcept {
  if (!flights_.empty()) {
    // First the sinks, while the Delivery arrays they write into still
    // exist (they belong to our Groups); then the flights, whose rows and
    // outcome arrays are the caller's and are never touched here.
    for (auto &[name, state] : sinks_) {
      if (state.sink) state.sink->AbandonAll("abandoned: the publisher's transaction failed");
    }
    flights_.clear();
  }
  window_deadline_ms_ = 0;
  DropLate();
  keys_in_flight_.clear();
  untouched_keys_.clear();
}

OutMessage Dispatcher::MessageFor(const Flight &flight, size_t i) const {
  const EventRow &row = flight.rows[i];
  const Route &route = routes_[flight.route_of[i]];
  OutMessage m;
  m.id = row.id;
  m.topic = row.topic;
  m.target = route.has_target ? std::string_view(route.target) : row.topic;
  m.has_key = row.has_key;
  m.key = row.key;
  m.payload = row.payload;
  m.headers = row.headers;
  m.header_count = row.header_count;
  m.headers_json = row.headers_json;
  m.format = route.format;
  m.created_at = row.created_at;
  m.source = flight.settings.source;
  return m;
}

void Dispatcher::SendGroup(const Flight &flight, Group *group, Sink::InterruptCheck interrupted) {
  SinkState *state = &sinks_[group->sink_name];
  group->results.resize(group->members.size());
  // A sink with batches in flight is not recreated under them: a failed one
  // refuses this batch at once (retriable), and is recreated once idle.
  // Its late groups keep the failed producer (RetireLateOf).
  Sink *sink = SinkFor(group->sink_name, state, flights_.size() == 1);
  if (sink == nullptr) {
    for (Delivery &d : group->results) d = Delivery{DeliveryStatus::kRetriable, state->last_error};
    return;
  }
  group->messages.reserve(group->members.size());
  for (size_t i : group->members) group->messages.push_back(MessageFor(flight, i));
  group->sink = sink;
  group->sent_ms = SteadyMs();
  group->sent_unix_us = UnixNowUs();
  group->sink_ticket = sink->Send(group->messages.data(), group->messages.size(),
                                  group->results.data(), interrupted);
}

void Dispatcher::SettleGroup(const Flight &flight, Group *group, Sink::InterruptCheck interrupted) {
  SinkState &state = sinks_[group->sink_name];
  state.wait_in_full = false;  // this group's refusals are retried alone
  for (size_t k = 0; k < group->results.size() && k < group->messages.size(); ++k) {
    if (group->results[k].status == DeliveryStatus::kDelivered) {
      NoteAnsweredTopic(&state, group->messages[k].topic,
                        (group->results[k].answered_at_us - group->sent_unix_us) / 1000);
    }
  }
  if (std::any_of(group->results.begin(), group->results.end(), FromBroker)) {
    SinkAnswers(&state, group->sink_name);
  } else if (state.slow && group->sink != nullptr && !SinkHasLate(group->sink_name)) {
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
  j.solo_flight = &flight;
  Judge(j, interrupted);
}

// Per key, a group's events reach the broker in id order, and the broker
// takes or refuses them together, except where librdkafka split them over
// two Produce requests and the broker refused the first and took the second
// (README, Limits): the refused event then arrives after a later one of its
// key, whatever is decided below. Say so, naming the events that will
// arrive late, so that an operator (and the fault suites) can tell this
// known break of per-key order from any other. Never throws: out of memory
// only loses the line.
void Dispatcher::NoteOvertaken(const Judging &j) noexcept {
  try {
    const std::vector<size_t> &members = *j.members;
    const std::vector<Delivery> &results = *j.results;
    std::set<RouteKey> failed;  // keys with an earlier member not delivered
    std::vector<std::string_view> late;
    for (size_t k = 0; k < members.size(); ++k) {
      const EventRow &row = j.rows[members[k]];
      if (!row.has_key) continue;
      RouteKey key(routes_[j.route_of[members[k]]].pattern, std::string(row.key));
      if (results[k].status != DeliveryStatus::kDelivered) {
        failed.insert(std::move(key));
      } else if (failed.count(key) != 0) {
        // Delivered past an earlier event of its key: that one is late.
        for (size_t e = 0; e < k; ++e) {
          const EventRow &earlier = j.rows[members[e]];
          if (results[e].status != DeliveryStatus::kDelivered && earlier.has_key &&
              earlier.key == row.key && j.route_of[members[e]] == j.route_of[members[k]] &&
              std::find(late.begin(), late.end(), earlier.id) == late.end()) {
            late.push_back(earlier.id);
          }
        }
      }
    }
    if (late.empty()) return;
    std::string text = "sink \"" + *j.sink_name + "\": " + std::to_string(late.size()) +
                       " event(s) will arrive after a later event of their key, which the broker" +
                       " took while refusing them (one batch split over two requests): ";
    for (size_t i = 0; i < late.size() && i < kMaxOvertakenNamed; ++i) {
      if (i > 0) text += ", ";
      text += late[i];
    }
    if (late.size() > kMaxOvertakenNamed) text += ", ...";
    Log(LogLevel::kWarning, std::move(text));
  } catch (...) {
    // The line is lost; nothing else depends on it.
  }
}

// Decide a group's rows from its sink's answers (all in).
void Dispatcher::Judge(const Judging &j, Sink::InterruptCheck interrupted) {
  NoteOvertaken(j);
  Sink *sink = j.solo_sink;
  const std::string &sink_name = *j.sink_name;
  // A retired producer's answers say nothing of the sink now under its name
  // (which may not exist: operator[] would make one).
  SinkState retired_state;
  SinkState *state = j.retired ? &retired_state : &sinks_[sink_name];
  const std::vector<size_t> &members = *j.members;
  const std::vector<Delivery> &results = *j.results;
  const EventRow *rows = j.rows;
  const int *route_of = j.route_of;
  const DispatchSettings &settings = *j.settings;
  RowOutcome *out = j.out;

  size_t delivered = 0, transient = 0, held_back = 0, target_refused = 0;
  for (const Delivery &d : results) {
    if (d.status == DeliveryStatus::kDelivered) ++delivered;
    if (d.status == DeliveryStatus::kRetriable) ++transient;
    // Held back behind an earlier failure of its key (which decides).
    if (d.status == DeliveryStatus::kNotSent) ++held_back;
    if (d.status == DeliveryStatus::kTargetRefused) ++target_refused;
  }
  const bool interrupted_now = interrupted != nullptr && interrupted();

  // Nothing delivered and nothing refused, only transient failures (beside
  // targets a broker refused, which say nothing of the others: a refused
  // topic next to a partition without a leader must not make that
  // partition's events count attempts): the sink is down. Park those events
  // until the sink's backoff expires, without counting attempts; the
  // refused targets' events count theirs.
  if (!j.partial && delivered == 0 && transient > 0 &&
      transient + held_back + target_refused == results.size() && !interrupted_now) {
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
        Attempted(rows[i], routes_[route_of[i]], results[k], settings, &out[i]);
        continue;
      }
      out[i].outcome = Outcome::kPark;
      out[i].next_attempt_us = state->retry_at_us;
      SetError(&out[i], results[k].error);
      if (rows[i].has_key) {
        guard_.Block(routes_[route_of[i]].pattern, rows[i].key, rows[i].id, state->retry_at_us);
      }
      NoteBehindDownSink(rows[i].topic, sink_name);
    }
    return;
  }

  if (delivered > 0 || !interrupted_now) {
    if (state->down) {
      Log(LogLevel::kInfo, "sink \"" + sink_name + "\" is available again");
      for (auto it = behind_down_sinks_.begin(); it != behind_down_sinks_.end();) {
        it = it->second == sink_name ? behind_down_sinks_.erase(it) : std::next(it);
      }
    }
    state->down = false;
    state->failures = 0;
  }

  auto stopping = [&] { return interrupted != nullptr && interrupted(); };
  for (size_t k = 0; k < members.size(); ++k) {
    const size_t i = members[k];
    const Route &route = routes_[route_of[i]];
    Delivery result = results[k];
    if (result.status == DeliveryStatus::kRetriable && interrupted_now) {
      out[i].outcome = Outcome::kUntouched;  // shutting down: no verdict
      NoteUntouched(route, rows[i]);
      continue;
    }
    if (result.status == DeliveryStatus::kRetriable && j.partial) {
      // The sink answers others: this event's topic or partition is in
      // trouble (a partition without a leader times out), which is neither
      // the event's fault (no attempt) nor the sink's (it stays up).
      if (ParkBehindEarlier(rows[i], route, nullptr, settings.now_us, kWaitingForKey, &out[i])) {
        continue;
      }
      out[i].outcome = Outcome::kPark;
      out[i].next_attempt_us =
          settings.now_us +
          BackoffMs(1, settings.backoff_min_ms, settings.backoff_max_ms, Random()) * kUsecPerMs;
      SetError(&out[i], result.error);
      if (rows[i].has_key) {
        guard_.Block(route.pattern, rows[i].key, rows[i].id, out[i].next_attempt_us);
      }
      continue;
    }
    if (result.status == DeliveryStatus::kNotSent) {
      // Held back behind an earlier failure of its key in this call (handled
      // above, in id order): wait as long as that one waits, or go at once
      // if it died.
      const std::string_view why = result.error.empty() ? kWaitingForKey : result.error;
      if (!ParkBehindEarlier(rows[i], route, nullptr, settings.now_us, why, &out[i])) {
        out[i].outcome = Outcome::kPark;
        out[i].next_attempt_us = settings.now_us;
        SetError(&out[i], why);
      }
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
        guard_.Block(route.pattern, rows[i].key, rows[i].id, out[i].next_attempt_us);
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
      OutMessage alone = MessageFor(*j.solo_flight, i);
      Delivery solo;
      sink->Publish(&alone, 1, &solo, interrupted);
      if (solo.status == DeliveryStatus::kRetriable && stopping()) {
        out[i].outcome = Outcome::kUntouched;  // interrupted while alone: no verdict
        NoteUntouched(route, rows[i]);
        continue;
      }
      result = solo;
    }
    Attempted(rows[i], route, result, settings, &out[i]);
  }
}

// If an earlier event of row's route and key waits (and is not admitted to
// this batch ahead of it), park row behind it until that one's time, and
// note row as waiting too. Returns whether it parked.
bool Dispatcher::ParkBehindEarlier(const EventRow &row, const Route &route,
                                   const std::set<std::string> *in_batch, int64_t now_us,
                                   std::string_view error, RowOutcome *out) {
  int64_t until = now_us;
  if (!row.has_key || guard_.MayDeliver(route.pattern, row.key, row.id, in_batch, &until)) {
    return false;
  }
  out->outcome = Outcome::kPark;
  out->next_attempt_us = std::max(until, now_us);
  if (!late_keys_.empty() && late_keys_.count(RouteKey(route.pattern, std::string(row.key))) != 0) {
    // Behind an event whose sink has not answered yet: its answer may come
    // any moment (the earlier event is parked for the sink's whole timeout).
    out->next_attempt_us = std::min(out->next_attempt_us, now_us + kLateRecheckUs);
  }
  SetError(out, error);
  guard_.Block(route.pattern, row.key, row.id, out->next_attempt_us);
  return true;
}

void Dispatcher::Attempted(const EventRow &row, const Route &route, const Delivery &delivery,
                           const DispatchSettings &settings, RowOutcome *out) {
  if (delivery.status == DeliveryStatus::kDelivered) {
    out->outcome = Outcome::kPublished;
    if (row.has_key) guard_.Release(route.pattern, row.key, row.id);
    return;
  }
  out->attempts = row.attempts + 1;
  SetError(out, delivery.error);
  if (out->attempts >= settings.max_attempts) {
    out->outcome = Outcome::kDead;
    if (row.has_key) guard_.Release(route.pattern, row.key, row.id);
    Log(LogLevel::kWarning, "event " + std::string(row.id) + " (topic \"" + std::string(row.topic) +
                                "\") is dead after " + std::to_string(out->attempts) +
                                " attempts: " + delivery.error);
    return;
  }
  out->outcome = Outcome::kRetry;
  out->next_attempt_us = settings.now_us + BackoffMs(out->attempts, settings.backoff_min_ms,
                                                     settings.backoff_max_ms, Random()) *
                                               kUsecPerMs;
  if (row.has_key) guard_.Block(route.pattern, row.key, row.id, out->next_attempt_us);
}

void Dispatcher::Poll() noexcept {
  for (auto &[name, state] : sinks_) {
    if (state.sink) state.sink->Poll();  // never throws (sink.hpp)
  }
}

void Dispatcher::NoteBehindDownSink(std::string_view topic, const std::string &sink) {
  if (behind_down_sinks_.size() >= kMaxTopicsBehindDownSinks) return;
  auto it = behind_down_sinks_.find(topic);
  if (it == behind_down_sinks_.end()) behind_down_sinks_.emplace(std::string(topic), sink);
}

bool Dispatcher::SinkHasLate(const std::string &sink) const {
  return std::any_of(late_.begin(), late_.end(),
                     [&sink](const Late &l) { return !l.retired && l.sink_name == sink; });
}

bool Dispatcher::SinkHeld(const std::string &sink) const {
  long whole = 0;
  size_t unanswered = 0;
  for (const Late &l : late_) {
    if (l.retired || l.sink_name != sink) continue;
    if (l.whole) ++whole;
    unanswered += l.rows.size();
  }
  return whole >= kHeldAfterWholeGroups || unanswered >= kHeldAfterLateEvents;
}

// The broker answered this sink's events: its groups that got no answer
// were its topics' trouble, not the sink's (they become partial, their
// topics suspect), and it takes new events.
void Dispatcher::SinkAnswers(SinkState *state, const std::string &sink) {
  state->last_answer_ms = SteadyMs();
  const int64_t until = state->last_answer_ms + kSuspectTopicMs;
  for (Late &late : late_) {
    if (!late.whole || late.retired || late.sink_name != sink) continue;
    late.whole = false;
    for (const LateRow &row : late.rows) suspect_topics_[row.topic] = until;
  }
  if (state->slow) {
    state->slow = false;
    Log(LogLevel::kInfo, "sink \"" + sink + "\" answers within outbox.ack_wait again");
  }
}

std::vector<std::string> Dispatcher::TopicsBehindDownSinks(int64_t now_us) const {
  std::vector<std::string> topics;
  try {
    for (const auto &[topic, sink] : behind_down_sinks_) {
      auto it = sinks_.find(sink);
      if (it == sinks_.end()) continue;
      if ((it->second.down && now_us < it->second.retry_at_us) || SinkHeld(sink)) {
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
  for (const auto &[name, state] : sinks_) {
    const std::string &sink = name;  // a lambda cannot capture a structured binding
    // A retry time that is past, or a sink that owes late answers (tried
    // again once they are in), would wake the idle publisher at once, and
    // again, for claims that take nothing.
    if (state.down && state.retry_at_us > after_us &&
        std::none_of(
            late_.begin(), late_.end(),
            [&sink](const Late &l) { return l.whole && !l.retired && l.sink_name == sink; }) &&
        (next == 0 || state.retry_at_us < next)) {
      next = state.retry_at_us;
    }
  }
  return next;
}

void Dispatcher::SinkStates(char *text, size_t size) const noexcept {
  try {
    std::string s;
    for (const auto &[name, state] : sinks_) {
      if (!s.empty()) s += ", ";
      s += name + "=" +
           (state.down   ? std::string("down")
            : state.sink ? state.sink->State()
                         : std::string("idle"));
    }
    CopyOut(s, text, size);
  } catch (...) {
    CopyOut("", text, size);
  }
}

}  // namespace outbox
