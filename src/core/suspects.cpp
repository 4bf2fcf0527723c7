#include "core/suspects.hpp"

namespace outbox {

bool Suspects::LostWithOthers(std::string_view id, std::string_view sink) {
  auto it = by_id_.find(id);
  if (it != by_id_.end() && it->second.sink == sink) {
    it->second.alone = true;
    return true;
  }
  if (it != by_id_.end()) {
    // Noted for another sink (its route changed): this sink starts afresh.
    it->second = Suspect{std::string(sink), false, 0};
    return false;
  }
  by_id_.emplace(std::string(id), Suspect{std::string(sink), false, 0});
  if (by_id_.size() > kMaxSuspects) by_id_.erase(by_id_.begin());  // the oldest id
  return false;
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
  if (it != by_id_.end()) by_id_.erase(it);
}

bool Suspects::LostAloneUnanswered(std::string_view sink, std::string_view id) {
  auto it = unanswered_.find(sink);
  if (it == unanswered_.end()) {
    unanswered_.emplace(std::string(sink), std::string(id));
    return false;
  }
  const bool another = it->second != id;
  it->second = std::string(id);
  return another;
}

void Suspects::SinkAnswered(std::string_view sink) noexcept {
  if (unanswered_.empty()) return;
  auto it = unanswered_.find(sink);
  if (it != unanswered_.end()) unanswered_.erase(it);
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
