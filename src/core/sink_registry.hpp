// The sinks a dispatcher (dispatch.hpp) delivers to, by name: each one's
// definition, its producer (made on first use by the factory, made again
// after a fatal error), and what is known of its health: whether it is
// down and until when, whether it is slow, how long its answers take per
// topic, and which topics went unanswered while it answered others
// (suspect). PostgreSQL-free.
//
// Threading: the publisher's main thread only, as the Dispatcher. Producers
// are replaced or removed only through Configure and SinkFor, and each time
// the Retire hook is told first (late answers keep a producer their groups
// still wait on: late_answers.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dispatch_rows.hpp"
#include "core/log_buffer.hpp"
#include "core/sink.hpp"

namespace outbox {

// Sinks are created by this factory; tests substitute fakes. `privileged`:
// see SinkRow.
using SinkFactory = std::unique_ptr<Sink> (*)(std::string_view name, std::string_view kind,
                                              const SinkOptions &options, bool privileged,
                                              std::string *error);

// Milliseconds on a clock that only goes forward (ack wait deadlines).
int64_t SteadyMs();

// Whether an answer came from a broker: delivered or refused by it. A
// transient failure may be the client's own (a message timed out in
// librdkafka's queue) and says nothing of whether the sink answers.
bool FromBroker(const Delivery &d);

// Copy `text` into buf[0..size), cut to fit, NUL-terminated.
void CopyOut(std::string_view text, char *buf, size_t size) noexcept;

struct SinkState {
  std::string kind;
  SinkOptions options;
  bool privileged = false;
  std::unique_ptr<Sink> sink;
  int failures = 0;         // consecutive calls that delivered nothing
  int64_t retry_at_us = 0;  // while down: when to try again
  bool down = false;
  bool slow = false;  // its last batch was left to late answers, unanswered
  // When it last answered anything (SteadyMs; 0: never): whether a group
  // with nothing answered means the sink is slow or its topics are.
  int64_t last_answer_ms = 0;
  // The slowest recent answer (ms; 0: none yet), and per topic it
  // answered: what an unanswered event is measured by (CollectGroup,
  // NoteAnsweredTopic).
  int64_t answer_ms = 0;
  std::map<std::string, int64_t, std::less<>> answered_topics;
  // Suspect topics that got an answer only after the ack wait, with until
  // when (SteadyMs) their answers are not measured (LateAnswers::NoteAnswered):
  // a partition given a leader again answers its whole backlog at once, and
  // the backlog's youngest events, answered within the wait, say no more of
  // the topic's usual time than the oldest. At most kMaxAnsweredTopics.
  std::map<std::string, int64_t, std::less<>> backlog_until_ms;
  // A late answer refused a message sent with others, which could not be
  // retried alone then (its payload was gone): the sink's next groups are
  // waited for in full, so that such a refusal is retried alone at once.
  bool wait_in_full = false;
  std::string last_error;
  // Targets whose endpoint is down (kTargetDown), with how many groups in a
  // row found it down: their events' backoff. A delivery to one ends it.
  std::map<std::string, int, std::less<>> down_targets;

  // Whether it answered anything within an ack wait before `sent_ms`
  // (SteadyMs): then a group sent at sent_ms that gets no answer is its
  // topics' trouble, not the sink's.
  bool AnsweredRecently(int64_t sent_ms, int64_t ack_wait_ms) const {
    return last_answer_ms != 0 && last_answer_ms + ack_wait_ms >= sent_ms;
  }
};

// A batch's events for one sink, sent together.
struct SinkGroup {
  std::string sink_name;
  std::vector<size_t> members;  // rows of the batch, in id order
  std::vector<OutMessage> messages;
  std::vector<Delivery> results;  // what the sink fills, member by member
  Sink *sink = nullptr;           // null: never sent (no producer)
  uint64_t sink_ticket = 0;       // the sink's Send ticket (0: nothing to collect)
  int64_t sent_ms = 0;            // SteadyMs when it was sent
  int64_t sent_unix_us = 0;       // UnixNowUs then (answers' latency)
  bool alone = false;             // a suspect sent alone (suspects.hpp): one member
};

class SinkRegistry {
 public:
  using States = std::map<std::string, SinkState>;
  // Told before a sink's producer is closed (its definition changed or
  // went, or it hit a fatal error), with the producer: it may take it
  // (move it out) to keep it for answers still awaited. May throw only
  // before it changes anything.
  using Retire = std::function<void(const std::string &name, std::unique_ptr<Sink> *producer)>;

  // `logs` takes the sinks' log lines (DrainLogs) and the registry's own,
  // and must outlive the registry.
  SinkRegistry(SinkFactory factory, LogBuffer *logs, Retire retire);

  // Install the sink definitions. Sinks whose kind or options changed, or
  // that disappeared, are closed (their log lines drained and Retire told
  // first); new ones are created on first use (SinkFor). May throw
  // (out of memory) part-way: the sinks handled so far stay replaced.
  void Configure(const SinkRow *sinks, size_t n);

  // The sink's producer, made now if it has none. A producer that hit a
  // fatal error is closed and made again, unless `may_recreate` is false (a
  // batch in flight still uses it). Null when the factory fails:
  // state->last_error says why. May throw (out of memory).
  Sink *SinkFor(const std::string &name, SinkState *state, bool may_recreate = true);

  // The sink named so, made (empty) if there is none, as std::map's [] does.
  SinkState &operator[](const std::string &name) { return sinks_[name]; }
  // The sink named so, or null.
  SinkState *Find(const std::string &name) {
    auto it = sinks_.find(name);
    return it == sinks_.end() ? nullptr : &it->second;
  }
  const States &states() const { return sinks_; }
  bool Has(const std::string &name) const { return sinks_.count(name) != 0; }

  // Move every producer's log lines to the log buffer, each prefixed with
  // its sink's name. May throw (out of memory): lines not moved wait.
  void DrainLogs();
  // Serve every producer's background work while idle.
  void Poll() noexcept;
  // Give up every open Send of every producer (Sink::AbandonAll).
  void AbandonAll(const char *reason) noexcept;
  // For monitoring: "name=state" for each sink, comma-separated, copied into
  // text[0..size) (cut, NUL-terminated; empty when out of memory).
  void Describe(char *text, size_t size) const noexcept;

  // Topic -> its sink, for topics with events parked while the sink is down
  // (Dispatcher::TopicsBehindDownSinks). At most kMaxTopicsBehindDownSinks are
  // noted; ForgetBehindDown when the sink is back.
  void NoteBehindDown(std::string_view topic, const std::string &sink);
  void ForgetBehindDown(const std::string &sink);
  void ClearBehindDown() { behind_down_sinks_.clear(); }
  const std::map<std::string, std::string, std::less<>> &behind_down() const {
    return behind_down_sinks_;
  }
  static constexpr size_t kMaxTopicsBehindDownSinks = 64;

  // Wait for a group's answers until deadline_ms (SteadyMs; 0: as long as
  // the sink takes), giving up on stragglers (see the definition). True
  // when they are all in.
  bool CollectGroup(SinkGroup *group, int64_t deadline_ms, const DispatchSettings &settings,
                    Sink::InterruptCheck interrupted);

  // A delivered event's topic, answered after `latency_ms`: the slowest
  // recent answer for it (and for the sink) is kept, decaying by 1/16 per
  // answer. At most kMaxAnsweredTopics topics are remembered (beyond, the map
  // starts afresh: a topic forgotten is judged by the sink's answers).
  // Whether it stays suspect is the caller's to say (EndSuspicion).
  void NoteAnsweredTopic(SinkState *state, std::string_view topic, int64_t latency_ms);
  // Suspect topics (see dispatch.hpp, "Slow sinks"), per sink: the topic
  // is suspect on that sink until `until_ms` (SteadyMs), or until
  // EndSuspicion. Another sink's answers for the topic say nothing of this
  // one's cluster (a topic routed elsewhere, a sink's options changed).
  void SetSuspect(std::string_view sink, std::string_view topic, int64_t until_ms);
  bool IsSuspect(std::string_view sink, std::string_view topic, int64_t now_ms) const;
  // Whether the topic was made suspect on the sink and its suspicion not
  // ended (expired or not).
  bool Suspected(std::string_view sink, std::string_view topic) const {
    return !suspect_topics_.empty() &&
           suspect_topics_.find(SuspectKey(sink, topic)) != suspect_topics_.end();
  }
  void EndSuspicion(std::string_view sink, std::string_view topic);
  // How long an answer for `topic` may take before it is overdue: kStragglerFactor
  // times the topic's usual answer time (the sink's, for a topic it never
  // answered), at least kMinGraceMs; 0 while nothing is known of the sink's
  // answers.
  static int64_t OverdueAfterMs(const SinkState &state, std::string_view topic);
  // Whether every unanswered event of the group is of a suspect topic.
  bool OnlySuspectsLeft(const SinkGroup &group, int64_t now_ms) const;
  // Whether every unanswered event of the group has waited longer than its
  // topic's answers take (see CollectGroup).
  bool OnlyStragglersLeft(const SinkState &state, const SinkGroup &group, int64_t now_ms) const;
  static constexpr size_t kMaxAnsweredTopics = 10000;
  static constexpr int64_t kMinGraceMs = 20;
  static constexpr int64_t kStragglerFactor = 4;

 private:
  SinkFactory factory_;
  LogBuffer *logs_;
  Retire retire_;
  States sinks_;
  std::map<std::string, std::string, std::less<>> behind_down_sinks_;
  // Topic -> until when (SteadyMs) it is suspect (see "Slow sinks").
  // Keyed by SuspectKey(sink, topic).
  std::map<std::string, int64_t, std::less<>> suspect_topics_;
  static std::string SuspectKey(std::string_view sink, std::string_view topic) {
    std::string key(sink);
    key += '\0';  // not in a sink name
    key += topic;
    return key;
  }
};

}  // namespace outbox
