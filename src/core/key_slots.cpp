#include "core/key_slots.hpp"

namespace outbox {

namespace {

// SplitMix64's finaliser: a cheap mix whose outputs look independent for
// neighbouring inputs, which rendezvous hashing needs for balance.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

int PreferredOwner(int slot, const bool *live, int nworkers) {
  int best = -1;
  uint64_t best_weight = 0;
  for (int i = 0; i < nworkers; ++i) {
    if (!live[i]) continue;
    const uint64_t weight =
        Mix((static_cast<uint64_t>(static_cast<uint32_t>(slot)) << 32) | static_cast<uint32_t>(i));
    if (best < 0 || weight > best_weight) {
      best = i;
      best_weight = weight;
    }
  }
  return best;
}

}  // namespace outbox
