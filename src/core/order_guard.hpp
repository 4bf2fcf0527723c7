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
//
// Memory: what waits is known by the thousands (a poison event parks every
// later event of its key, and a reload notes them all), and keys may be
// 4 kB: so no key is kept. A (route, key) pair is known by a 64-bit SipHash
// with a secret per process (keyed_hash.hpp), an event by its 16 id bytes
// and the time it waits until:
// about 70 bytes per waiting event, whatever its key, and one entry per
// distinct time (a key's events parked in one cycle share one). Two pairs with the
// same hash share one entry, so an event may wait behind an unrelated one
// (never the other way round: order always holds); with a secret hash
// nobody can aim for that, and by chance it takes billions of waiting keys.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/keyed_hash.hpp"

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
  // waiting event of the pair, earlier or later, waits for now).
  bool MayDeliver(std::string_view route, std::string_view key, std::string_view id,
                  const std::set<std::string> *in_batch, int64_t *until) const;

  // The earliest time any waiting event of (route, key) waits until, later
  // events included; INT64_MAX when none waits.
  int64_t EarliestUntil(std::string_view route, std::string_view key) const;

  // Does some event wait for a time before `before`? It should have been
  // claimed again by then, and blocked again (with a new time) or released;
  // when it was not, it may have stopped waiting where this guard cannot see
  // it (another publisher recorded it), and the caller reads the order state
  // again. Per event, not per key: the later events of a key parked behind a
  // stale one are claimed and parked again every cycle, so their times move
  // on while the stale one's stays.
  bool AnyWaitingUntilBefore(int64_t before) const {
    for (const auto &entry : waiting_) {
      for (const auto &event : entry.second.ids) {
        if (event.second < before) return true;
      }
    }
    return false;
  }

  void Clear() { waiting_.clear(); }
  // Number of (route, key) pairs with waiting events.
  size_t size() const { return waiting_.size(); }

  // The secret of the pair hash; set it before anything is blocked (the
  // dispatcher draws one at random). Clears the guard.
  void SetHashKey(const HashKey &key) {
    hash_key_ = key;
    waiting_.clear();
  }

  // An event id as 16 bytes: parsed from canonical UUID text (byte order is
  // emit order for UUIDv7, as the text's). Other text (never produced by
  // the publisher) maps to a stable value of its own.
  using Id = std::array<unsigned char, 16>;
  static Id IdOf(std::string_view text);
  static std::string TextOf(const Id &id);

 private:
  struct Waiting {
    std::map<Id, int64_t> ids;  // each waiting event, with the time it waits until
    // How many of them wait until each time: the last is how long later
    // events wait, as they wait now. An event released, or blocked again for
    // less, no longer counts (a key would otherwise stall, once a late answer
    // is in, until the time that event had been parked for). A key's tail
    // parked together shares one entry.
    std::map<int64_t, uint32_t> times;
  };
  // One event of w that waited until `until` no longer does.
  static void Forget(Waiting *w, int64_t until);
  uint64_t PairOf(std::string_view route, std::string_view key) const {
    return KeyedHash(hash_key_, route, key);
  }
  HashKey hash_key_;
  std::unordered_map<uint64_t, Waiting> waiting_;
};

}  // namespace outbox
