// Verdicts: what a sink's answers make of each row of a group (published,
// retried, dead, parked), what they say of the sink (down, available again),
// and the per-key order rule every verdict keeps (an event never goes ahead
// of an earlier waiting event of its route and key). The rules are the
// Dispatcher's (dispatch.hpp); this applies them to one group at a time.
// PostgreSQL-free.
//
// Threading: the publisher's main thread only. Every pointer given to
// Verdicts is the Dispatcher's, outlives it, and is used by nothing else
// while a verdict is made. Methods may throw (out of memory): the
// Dispatcher's boundaries give up the whole window then.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dispatch_rows.hpp"
#include "core/log_buffer.hpp"
#include "core/order_guard.hpp"
#include "core/sink.hpp"
#include "core/sink_registry.hpp"
#include "core/suspects.hpp"

namespace outbox {

constexpr int64_t kUsecPerMs = 1000;
inline constexpr std::string_view kWaitingForKey = "waiting for an earlier event with the same key";

// A route as the dispatcher keeps it (Configure copies each RouteRow).
struct DispatchRoute {
  std::string pattern;
  std::string sink;
  bool has_target = false;
  std::string target;
  bool paused = false;
  MessageFormat format = MessageFormat::kRaw;
};
using RouteKey = std::pair<std::string, std::string>;  // route pattern, key
// (route, key) pairs whose earlier event awaits a late answer, each with
// when the first of them was left to it (late_answers.hpp).
using LateKeys = std::map<RouteKey, int64_t>;

// Where `row` goes on `route`: the route's target, or else the event's
// topic. Per key, order is kept per target.
inline std::string_view TargetOf(const DispatchRoute &route, const EventRow &row) {
  return route.has_target ? std::string_view(route.target) : row.topic;
}

// Copy `text` into out->error, cut to fit.
void SetError(RowOutcome *out, std::string_view text);

// The message a row becomes on its route: views of the row, the route and
// `source` (the settings' CloudEvents source).
// `route_index` identifies the route within the call (OutMessage::route).
OutMessage MessageOf(const EventRow &row, const DispatchRoute &route, int route_index,
                     std::string_view source);

// What Judge needs to decide a group's rows from its sink's answers.
struct Judging {
  const EventRow *rows = nullptr;
  const int *route_of = nullptr;
  const std::vector<size_t> *members = nullptr;
  const std::vector<Delivery> *results = nullptr;
  const DispatchSettings *settings = nullptr;
  RowOutcome *out = nullptr;
  const std::string *sink_name = nullptr;
  // For retrying a refused message alone; null for late groups (their
  // rows' payloads are gone): a refusal then counts an attempt at once.
  Sink *solo_sink = nullptr;
  // Part of a group whose sink answered others (dispatch.hpp, "Slow sinks"):
  // transient failures are the events' trouble, not the sink's.
  bool partial = false;
  // A suspect sent alone (suspects.hpp): one member. `answered_others`:
  // its sink answered other events within an ack wait of it, so a transient
  // failure alone is the event's, not the sink's.
  bool alone = false;
  bool answered_others = false;
  // A late group of a retired producer: judged without touching the
  // state of the sink now under its name.
  bool retired = false;
};

class Verdicts {
 public:
  // routes: the routes route_of indexes; late_keys: (route, key) pairs
  // whose earlier event awaits a late answer (late_answers.hpp).
  Verdicts(const std::vector<DispatchRoute> *routes, OrderGuard *guard, SinkRegistry *sinks,
           const LateKeys *late_keys, LogBuffer *logs, std::mt19937_64 *rng);

  // Decide a group's rows from its sink's answers (all in), and the sink's
  // state from them. `interrupted`: shutting down leaves rows without a
  // verdict (kUntouched, see untouched()).
  void Judge(const Judging &j, Sink::InterruptCheck interrupted);

  // If an earlier event of row's route and key waits (and is not admitted to
  // this batch ahead of it), park row behind it until that one's time, and
  // note row as waiting too. Returns whether it parked. When that time is
  // now, row is due kBehindDueUs later.
  bool ParkBehindEarlier(const EventRow &row, const DispatchRoute &route,
                         const std::set<std::string> *in_batch, int64_t now_us,
                         std::string_view error, RowOutcome *out);

  // An attempt's verdict: published, retried after a backoff, or dead
  // after settings.max_attempts (which releases its key).
  void Attempted(const EventRow &row, const DispatchRoute &route, const Delivery &delivery,
                 const DispatchSettings &settings, RowOutcome *out);

  // A target's endpoint is down (kTargetDown): park the event without an
  // attempt until the target's backoff (grown once per group in *counted,
  // or always when counted is null) or the broker's Retry-After, up to
  // backoff_max, whichever is later; the sink stays up.
  void TargetDown(const EventRow &row, const DispatchRoute &route, const Delivery &delivery,
                  const DispatchSettings &settings, SinkState *state,
                  std::set<std::string> *counted, RowOutcome *out);

  // (route, key) of events left as they were (interrupted) in the batches
  // finished so far while others are in flight: their deferred successors
  // wait too.
  const std::set<RouteKey> &untouched() const { return untouched_keys_; }
  void ClearUntouched() noexcept { untouched_keys_.clear(); }

  // When a later event of a key waiting behind an event whose sink has not
  // answered yet (or an event of a sink held for its answers) is looked at
  // again: after about as long as that answer has been awaited. The step is
  // kLateRecheckMinUs doubled until it covers the wait, at most
  // kLateRecheckUs; the event is due at the step's next multiple on the
  // clock past half a step from now: between half a step and a step and a
  // half later (half to three times the wait, at least 8 ms, at most
  // 1.5 s). An answer that is merely slow (a loaded machine's straggler,
  // left late after four times its topic's usual time) comes within
  // milliseconds, and the key goes on then, not a second later; one that
  // does not come costs the key's events a few looks, then one a second.
  // The steps divide one another and the second, so all the events waiting
  // the same step are due at one moment, however far apart they were
  // parked: one claim looks at them together, where keys on schedules of
  // their own each cost a wake-up and a transaction.
  static constexpr int64_t kLateRecheckUs = 1000000;
  static constexpr int64_t kLateRecheckMinUs = kLateRecheckUs / 64;
  static int64_t LateRecheckStepUs(int64_t awaited_us) {
    int64_t step = kLateRecheckMinUs;
    while (step < awaited_us && step < kLateRecheckUs) step *= 2;
    return step;
  }
  static int64_t LateRecheckDueUs(int64_t now_us, int64_t awaited_us) {
    const int64_t step = LateRecheckStepUs(awaited_us);
    return (now_us + step / 2) / step * step + step;
  }
  // How much later than now a later event of a key is due when what it
  // waits behind is due now (not sent for want of time, or not claimed in
  // this batch). Claims take due events in next_attempt_at order, up to
  // the batch size: due at the same moment as the events ahead of it, a
  // key's long tail (thousands, each parked again every cycle) was claimed
  // before its head, which then waited a cycle, and the key advanced by a
  // few events per cycle.
  static constexpr int64_t kBehindDueUs = 1000000;
  // Most event ids one NoteOvertaken line names.
  static constexpr size_t kMaxOvertakenNamed = 20;
  // Most targets a sink remembers as down (targets may be events' topics).
  static constexpr size_t kMaxDownTargets = 4096;
  // How many failures alone in a row (while the sink answers others) an
  // event lost with its connection is forgiven before each counts an
  // attempt (suspects.hpp).
  static constexpr int kForgivenAlone = 1;

  // Events lost with a connection, and which of them go alone (suspects.hpp).
  Suspects &suspects() noexcept { return suspects_; }
  const Suspects &suspects() const noexcept { return suspects_; }
  // A suspect that failed alone waits until the suspects of its sink not
  // tried yet (Suspects::UntriedAlone) have had their turns, a turn's length
  // each, if its backoff is shorter: the turns then go round, and a burst of
  // culprits cannot keep an innocent suspect from its turn. At most
  // outbox.backoff_max (and Suspects::kTurnMs), the longest any retry waits:
  // the line is reckoned once, and had drained long before a wait of
  // hundreds of turns ended (a culprit and its key held five minutes).
  void BackOfTheLine(const EventRow &row, const DispatchRoute &route, const std::string &sink_name,
                     const DispatchSettings &settings, RowOutcome *out);
  // A WARNING naming the group's events that will arrive after a later
  // event of their key, which the broker took while refusing them (Judge
  // says so first; a group given up before it was judged, too).
  void NoteOvertaken(const Judging &j) noexcept;
  // That WARNING's text, naming `late` (at most kMaxOvertakenNamed).
  static std::string OvertakenLine(const std::string &sink,
                                   const std::vector<std::string_view> &late);

 private:
  double Random();
  void Log(LogLevel level, std::string text) { logs_->Add(level, std::move(text)); }
  void NoteUntouched(const DispatchRoute &route, const EventRow &row);
  // An event whose failure may not be its own, parked without an attempt
  // (behind an earlier event of its key, or for the first step of backoff).
  void ParkWithoutAttempt(const EventRow &row, const DispatchRoute &route, std::string_view error,
                          const DispatchSettings &settings, RowOutcome *out);
  // One event published alone on `sink` (the group's producer), and the
  // verdict on that: an attempt unless it was not sent, its target is down
  // or the publisher is stopping (then no verdict).
  Delivery Alone(const EventRow &row, const DispatchRoute &route, int route_index,
                 const DispatchSettings &settings, Sink *sink, Sink::InterruptCheck interrupted);
  void JudgeAlone(const EventRow &row, const DispatchRoute &route, const Delivery &solo,
                  const DispatchSettings &settings, SinkState *state,
                  std::set<std::string> *counted, bool stopping, RowOutcome *out);

  const std::vector<DispatchRoute> *routes_;
  OrderGuard *guard_;
  SinkRegistry *sinks_;
  const LateKeys *late_keys_;
  LogBuffer *logs_;
  std::mt19937_64 *rng_;
  std::set<RouteKey> untouched_keys_;
  Suspects suspects_;
};

}  // namespace outbox
