#include "core/suspects.hpp"

namespace outbox {

bool Suspects::LostWithOthers(std::string_view id, std::string_view sink) {
  auto it = by_id_.find(id);
  if (it != by_id_.end() && it->second.sink == sink) {
    if (!it->second.alone) {
      ++alone_[it->second.sink];  // may throw: nothing changed yet
      it->second.alone = true;
    }
    return true;
  }
  if (it != by_id_.end()) {
    // Noted for another sink (its route changed): this sink starts afresh.
    Suspect fresh{std::string(sink), false, 0};
    NotAlone(it);
    it->second = std::move(fresh);
    return false;
  }
  by_id_.emplace(std::string(id), Suspect{std::string(sink), false, 0});
  if (by_id_.size() > kMaxSuspects) {  // the oldest id
    NotAlone(by_id_.begin());
    by_id_.erase(by_id_.begin());
  }
  return false;
}

void Suspects::NotAlone(ById::iterator it) noexcept {
  if (!it->second.alone) return;
  it->second.alone = false;
  auto count = alone_.find(it->second.sink);
  if (count != alone_.end() && --count->second == 0) alone_.erase(count);
  auto tried = tried_.find(it->second.sink);
  if (tried == tried_.end()) return;
  auto at = tried->second.ids.find(it->first);
  if (at == tried->second.ids.end()) return;
  tried->second.ids.erase(at);
  ++tried->second.gone;
}

bool Suspects::SendsAlone(std::string_view id, std::string_view sink) const noexcept {
  auto it = by_id_.find(id);
  return it != by_id_.end() && it->second.alone && it->second.sink == sink;
}

int Suspects::FailedAlone(std::string_view id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return 1;  // forgotten meanwhile: as if for the first time
  return ++it->second.failed_alone;
}

void Suspects::Forget(std::string_view id) noexcept {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  NotAlone(it);
  by_id_.erase(it);
}

bool Suspects::LostAloneUnanswered(std::string_view sink, std::string_view id, int64_t now_ms,
                                   int64_t renew_ms) {
  // Only events sent alone on the sink are kept as tried: what Forget and
  // the bound on suspects take out of them stays out.
  if (!SendsAlone(id, sink)) return false;
  // May throw: nothing changed yet.
  auto [it, first] = tried_.try_emplace(std::string(sink), Tried{IdSet(), 0, now_ms});
  Tried &tried = it->second;
  if (!first && renew_ms > 0 && now_ms - tried.since_ms >= renew_ms) {
    tried = Tried{IdSet(), 0, now_ms};
  }
  if (tried.ids.count(id) != 0) return tried.ids.size() + tried.gone > 1;
  tried.ids.emplace(std::string(id));
  return false;
}

bool Suspects::TriedAlone(std::string_view sink, std::string_view id) const noexcept {
  auto it = tried_.find(sink);
  return it != tried_.end() && it->second.ids.count(id) != 0;
}

size_t Suspects::UntriedAlone(std::string_view sink) const noexcept {
  auto count = alone_.find(sink);
  if (count == alone_.end()) return 0;
  auto tried = tried_.find(sink);
  const size_t done = tried == tried_.end() ? 0 : tried->second.ids.size();
  return count->second > done ? count->second - done : 0;
}

bool Suspects::WaitsForUntried(std::string_view sink, std::string_view id, int64_t now_ms,
                               int64_t renew_ms) const noexcept {
  auto it = tried_.find(sink);
  if (it == tried_.end() || it->second.ids.count(id) == 0) return false;
  if (renew_ms > 0 && now_ms - it->second.since_ms >= renew_ms) return false;
  return UntriedAlone(sink) > 0;
}

int64_t Suspects::TriedUntilMs(std::string_view sink, int64_t renew_ms) const noexcept {
  auto it = tried_.find(sink);
  if (it == tried_.end() || renew_ms <= 0) return 0;
  return it->second.since_ms + renew_ms;
}

void Suspects::SinkAnswered(std::string_view sink) noexcept {
  auto it = tried_.find(sink);
  if (it != tried_.end()) tried_.erase(it);
}

bool Suspects::Out(std::string_view sink, int64_t now_ms, uint64_t *ticket) const noexcept {
  auto it = out_.find(sink);
  if (it == out_.end() || now_ms >= it->second.until_ms) return false;
  *ticket = it->second.ticket;
  return true;
}

void Suspects::SentAlone(std::string_view sink, std::string_view id, uint64_t ticket,
                         int64_t now_ms) {
  Turn turn{std::string(id), ticket, now_ms, now_ms + kTurnMs};
  auto it = out_.find(sink);
  if (it != out_.end()) {
    it->second = std::move(turn);
  } else {
    out_.emplace(std::string(sink), std::move(turn));
  }
}

void Suspects::Judged(std::string_view sink, std::string_view id, int64_t now_ms) noexcept {
  auto it = out_.find(sink);
  if (it == out_.end() || it->second.id != id) return;
  const int64_t took = now_ms - it->second.sent_ms;
  try {
    turn_ms_[it->first] = took;
  } catch (...) {
    // Out of memory: the spacing stays as it was.
  }
  out_.erase(it);
}

int64_t Suspects::TurnSpacingMs(std::string_view sink) const noexcept {
  auto it = turn_ms_.find(sink);
  return it == turn_ms_.end() || it->second < kMinTurnSpacingMs ? kMinTurnSpacingMs : it->second;
}

}  // namespace outbox
