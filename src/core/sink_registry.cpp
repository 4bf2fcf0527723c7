#include "core/sink_registry.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <utility>

namespace outbox {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool FromBroker(const Delivery &d) {
  return d.answered_at_us != 0 &&
         (d.status == DeliveryStatus::kDelivered || d.status == DeliveryStatus::kRejected ||
          d.status == DeliveryStatus::kTargetRefused || d.status == DeliveryStatus::kTargetDown);
}

void CopyOut(std::string_view text, char *buf, size_t size) noexcept {
  if (size == 0) return;
  const size_t n = std::min(text.size(), size - 1);
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
}

SinkRegistry::SinkRegistry(SinkFactory factory, LogBuffer *logs, Retire retire)
    : factory_(factory), logs_(logs), retire_(std::move(retire)) {}

void SinkRegistry::Configure(const SinkRow *sinks, size_t n) {
  std::set<std::string> seen;
  for (size_t i = 0; i < n; ++i) {
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
        DrainLogs();                      // while its producer is still under its name
        retire_(name, &it->second.sink);  // before the sink they wait on goes
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
      DrainLogs();
      retire_(it->first, &it->second.sink);
      it = sinks_.erase(it);
    } else {
      ++it;
    }
  }
}

Sink *SinkRegistry::SinkFor(const std::string &name, SinkState *state, bool may_recreate) {
  if (may_recreate && state->sink && (state->sink->NeedsRecreate() || state->sink->Worn())) {
    if (state->sink->NeedsRecreate()) {
      logs_->Add(LogLevel::kWarning,
                 "sink \"" + name + "\" hit a fatal error; recreating its producer");
    } else {
      logs_->Add(LogLevel::kInfo,
                 "sink \"" + name +
                     "\" wrote to more distinct targets than one producer keeps; recreating "
                     "its producer to free what its client library holds for each");
    }
    DrainLogs();
    retire_(name, &state->sink);  // late groups keep pointing at it
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

void SinkRegistry::DrainLogs() {
  for (auto &[name, state] : sinks_) {
    if (!state.sink) continue;
    for (LogLine &line : state.sink->TakeLogs()) {
      logs_->Add(line.level, "sink \"" + name + "\": " + line.text);
    }
  }
}

void SinkRegistry::Poll() noexcept {
  for (auto &[name, state] : sinks_) {
    if (state.sink) state.sink->Poll();  // never throws (sink.hpp)
  }
}

void SinkRegistry::AbandonAll(const char *reason) noexcept {
  for (auto &[name, state] : sinks_) {
    if (state.sink) state.sink->AbandonAll(reason);
  }
}

void SinkRegistry::Describe(char *text, size_t size) const noexcept {
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

void SinkRegistry::NoteBehindDown(std::string_view topic, const std::string &sink) {
  if (behind_down_sinks_.size() >= kMaxTopicsBehindDownSinks) return;
  auto it = behind_down_sinks_.find(topic);
  if (it == behind_down_sinks_.end()) behind_down_sinks_.emplace(std::string(topic), sink);
}

void SinkRegistry::ForgetBehindDown(const std::string &sink) {
  for (auto it = behind_down_sinks_.begin(); it != behind_down_sinks_.end();) {
    it = it->second == sink ? behind_down_sinks_.erase(it) : std::next(it);
  }
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
bool SinkRegistry::CollectGroup(SinkGroup *group, int64_t deadline_ms,
                                const DispatchSettings &settings,
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
  const bool alive = state.AnsweredRecently(group->sent_ms, settings.ack_wait_ms);
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

void SinkRegistry::NoteAnsweredTopic(SinkState *state, std::string_view topic, int64_t latency_ms) {
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
}

void SinkRegistry::EndSuspicion(std::string_view sink, std::string_view topic) {
  auto s = suspect_topics_.find(SuspectKey(sink, topic));
  if (s != suspect_topics_.end()) suspect_topics_.erase(s);
}

void SinkRegistry::SetSuspect(std::string_view sink, std::string_view topic, int64_t until_ms) {
  suspect_topics_[SuspectKey(sink, topic)] = until_ms;
}

bool SinkRegistry::IsSuspect(std::string_view sink, std::string_view topic, int64_t now_ms) const {
  if (suspect_topics_.empty()) return false;
  auto it = suspect_topics_.find(SuspectKey(sink, topic));
  return it != suspect_topics_.end() && it->second >= now_ms;
}

int64_t SinkRegistry::OverdueAfterMs(const SinkState &state, std::string_view topic) {
  int64_t usual = state.answer_ms;
  auto it = state.answered_topics.find(topic);
  if (it != state.answered_topics.end()) usual = it->second;
  if (usual == 0) return 0;
  return std::max(kMinGraceMs, kStragglerFactor * usual);
}

// Then the group is given up at once even when the sink answered nothing
// lately (its only events may be retries of such a topic), so that it does
// not hold the cycle for the ack wait. Whether the sink is slow or down is
// judged as for any group (LateAnswers::Take): a broker that went down right
// after a topic became suspect answers nothing at all, and must be found
// down.
bool SinkRegistry::OnlySuspectsLeft(const SinkGroup &group, int64_t now_ms) const {
  if (suspect_topics_.empty()) return false;
  for (size_t k = 0; k < group.results.size(); ++k) {
    if (group.results[k].answered_at_us != 0) continue;
    if (!IsSuspect(group.sink_name, group.messages[k].topic, now_ms)) return false;
  }
  return true;
}

bool SinkRegistry::OnlyStragglersLeft(const SinkState &state, const SinkGroup &group,
                                      int64_t now_ms) const {
  const int64_t waited = now_ms - group.sent_ms;
  for (size_t k = 0; k < group.results.size(); ++k) {
    if (group.results[k].answered_at_us != 0) continue;
    // A topic that went unanswered lately and was not answered since: at once.
    if (IsSuspect(group.sink_name, group.messages[k].topic, now_ms)) continue;
    const int64_t overdue = OverdueAfterMs(state, group.messages[k].topic);
    if (overdue == 0) return false;  // nothing known of this sink's answers yet
    if (waited < overdue) return false;
  }
  return true;
}

}  // namespace outbox
