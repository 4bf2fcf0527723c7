// Which publisher handles which keys, when a database runs several
// (outbox.workers > 1). PostgreSQL-free.
//
// Contract: events with the same key on the same route arrive in emit order,
// also with outbox.workers > 1. So all events of one key must be handled by
// one publisher at a time: its OrderGuard alone knows which earlier event of
// the key waits for a retry, and its producer alone keeps the key's messages
// in order. Keys are hashed into kKeySlots slots (../key_slot.hpp holds the
// hash, which emit() and outbox.key_slot() share); each slot has at most one
// owner.
// Keyless events have no order to keep and go to whichever publisher claims
// them first.
//
// Who should own a slot: rendezvous (highest random weight) hashing over the
// live publishers. Every publisher computes the same answer from the same set
// of live publishers, with no coordination; when one starts or stops, only
// the slots it gains or loses move (about 1/n of them), and the others stay
// where their order state and producer already are.
#pragma once

#include <cstdint>

namespace outbox {

// How many slots keys hash into. A power of two: the SQL takes the low bits.
constexpr int kKeySlots = 1024;

// The publisher (an index in [0, nworkers)) that should own `slot`, given
// which publishers are live (live[i] for i in [0, nworkers)); -1 when none
// is. Deterministic: the same inputs give the same owner in every process.
int PreferredOwner(int slot, const bool *live, int nworkers);

}  // namespace outbox
