#include "core/order_guard.hpp"

#include <algorithm>
#include <cstdio>

namespace outbox {

namespace {
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

OrderGuard::Id OrderGuard::IdOf(std::string_view text) {
  Id id{};
  size_t n = 0;
  bool canonical = text.size() == 36;
  for (size_t i = 0; canonical && i < text.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      canonical = text[i] == '-';
      continue;
    }
    const int hi = HexValue(text[i]);
    const int lo = i + 1 < text.size() ? HexValue(text[i + 1]) : -1;
    if (hi < 0 || lo < 0 || n >= id.size()) {
      canonical = false;
      break;
    }
    id[n++] = static_cast<unsigned char>(hi * 16 + lo);
    ++i;
  }
  if (canonical && n == id.size()) return id;
  // Not an id the publisher makes: a stable stand-in (order among such
  // values is by hash, not by emit time).
  const uint64_t a = SipHash24(HashKey{}, text.data(), text.size());
  const uint64_t b = SipHash24(HashKey{a, ~a}, text.data(), text.size());
  for (int i = 0; i < 8; ++i) {
    id[i] = static_cast<unsigned char>(a >> (56 - 8 * i));
    id[8 + i] = static_cast<unsigned char>(b >> (56 - 8 * i));
  }
  return id;
}

std::string OrderGuard::TextOf(const Id &id) {
  char buf[37];
  std::snprintf(buf, sizeof buf,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", id[0],
                id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11],
                id[12], id[13], id[14], id[15]);
  return buf;
}

void OrderGuard::Block(std::string_view route, std::string_view key, std::string_view id,
                       int64_t until) {
  Waiting &w = waiting_[PairOf(route, key)];
  const auto [event, added] = w.ids.try_emplace(IdOf(id), until);
  if (!added) {
    if (event->second == until) return;
    Forget(&w, event->second);
    event->second = until;  // the latest decision about this event
  }
  ++w.times[until];
}

void OrderGuard::Release(std::string_view route, std::string_view key, std::string_view id) {
  auto it = waiting_.find(PairOf(route, key));
  if (it == waiting_.end()) return;
  Waiting &w = it->second;
  auto event = w.ids.find(IdOf(id));
  if (event == w.ids.end()) return;
  Forget(&w, event->second);
  w.ids.erase(event);
  if (w.ids.empty()) waiting_.erase(it);
}

void OrderGuard::Forget(Waiting *w, int64_t until) {
  auto time = w->times.find(until);
  if (time != w->times.end() && --time->second == 0) w->times.erase(time);
}

int64_t OrderGuard::EarliestUntil(std::string_view route, std::string_view key) const {
  int64_t earliest = INT64_MAX;
  auto it = waiting_.find(PairOf(route, key));
  if (it == waiting_.end()) return earliest;
  for (const auto &event : it->second.ids) earliest = std::min(earliest, event.second);
  return earliest;
}

bool OrderGuard::MayDeliver(std::string_view route, std::string_view key, std::string_view id,
                            const std::set<std::string> *in_batch, int64_t *until) const {
  auto it = waiting_.find(PairOf(route, key));
  if (it == waiting_.end()) return true;
  const Id self = IdOf(id);
  for (const auto &[earlier, earlier_until] : it->second.ids) {
    if (!(earlier < self)) break;  // only earlier events hold this one back
    // Admitted to this batch ahead of it (the batch holds canonical text).
    if (in_batch == nullptr || in_batch->count(TextOf(earlier)) == 0) {
      if (until != nullptr) *until = it->second.times.rbegin()->first;
      return false;
    }
  }
  return true;
}

}  // namespace outbox
