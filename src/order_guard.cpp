#include "order_guard.hpp"

namespace outbox {

void OrderGuard::Block(std::string_view route, std::string_view key, std::string_view id,
                       int64_t until) {
  Waiting &w = waiting_[std::make_pair(std::string(route), std::string(key))];
  w.ids.emplace(id);
  if (until > w.until) w.until = until;
}

void OrderGuard::Release(std::string_view route, std::string_view key, std::string_view id) {
  auto it = waiting_.find(std::make_pair(std::string(route), std::string(key)));
  if (it == waiting_.end()) return;
  it->second.ids.erase(std::string(id));
  if (it->second.ids.empty()) waiting_.erase(it);
}

bool OrderGuard::MayDeliver(std::string_view route, std::string_view key, std::string_view id,
                            const std::set<std::string> *in_batch, int64_t *until) const {
  auto it = waiting_.find(std::make_pair(std::string(route), std::string(key)));
  if (it == waiting_.end()) return true;
  for (const std::string &earlier : it->second.ids) {
    if (earlier >= id) break;  // only earlier events hold this one back
    if (in_batch == nullptr || in_batch->count(earlier) == 0) {
      if (until != nullptr) *until = it->second.until;
      return false;
    }
  }
  return true;
}

}  // namespace outbox
