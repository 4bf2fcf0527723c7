// Per-key order across retries. PostgreSQL-free.
//
// Contract: events with the same key on the same route arrive in emit order,
// also across retries. Within one batch the publisher sends events in id
// order, and the broker keeps that order per key. Across batches, an event
// that failed and waits for a retry must hold back every later event of the
// same route and key: the OrderGuard remembers, per (route, key), which events
// wait and until when. A dead event stops blocking its key.
//
// Owned by one publisher process (which owns the keys it publishes); rebuilt
// from the retry index when the process starts or routes change.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace outbox {

class OrderGuard {
 public:
  // Event `id` of (route, key) waits until `until`: it failed and will be
  // retried, or it was parked behind an earlier waiting event.
  void Block(std::string_view route, std::string_view key, std::string_view id, int64_t until);

  // The event stopped waiting (delivered or dead).
  void Release(std::string_view route, std::string_view key, std::string_view id);

  // May event `id` of (route, key) be delivered now? Only if every earlier
  // waiting event of the same route and key goes out before it in the same
  // batch (`in_batch`: ids already admitted to this batch, may be null).
  // When not, *until receives the time to park it until (the latest time any
  // of them waits for).
  bool MayDeliver(std::string_view route, std::string_view key, std::string_view id,
                  const std::set<std::string> *in_batch, int64_t *until) const;

  void Clear() { waiting_.clear(); }
  // Number of (route, key) pairs with waiting events.
  size_t size() const { return waiting_.size(); }

 private:
  struct Waiting {
    std::set<std::string> ids;  // canonical UUID text: byte order is emit order for UUIDv7
    int64_t until = 0;
  };
  std::map<std::pair<std::string, std::string>, Waiting> waiting_;
};

}  // namespace outbox
