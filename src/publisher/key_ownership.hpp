// Key slot ownership among a database's publishers (outbox.workers > 1): the
// shared-memory half of key_slots.hpp.
//
// Protocol, per publisher, always between its transactions (nothing claimed,
// nothing in flight, every outcome committed):
// - Rebalance: give up the slots another live publisher should own (and wake
//   the others so the new owner takes them at once), take the free slots this
//   one should own. A slot another publisher still holds is taken on a later
//   call, after that one gave it up; between the two, nobody claims its keys.
// - A publisher that exits gives up all its slots first (on_shmem_exit), so a
//   slot is never owned by a process that is gone. A crash of any backend
//   restarts the server, which resets shared memory.
// So at any moment at most one publisher holds a slot, and the new owner's
// first claim of a slot's events starts after the old owner's last outcome
// for them committed: per-key order and per-key retry state carry over
// through the events table (next_attempt_at), which the new owner reads when
// it rebuilds its order state.
#pragma once

#include "pg_bridge.hpp"

#include "core/key_slots.hpp"
#include "shmem/shmem.hpp"

namespace outbox {

// The slots this publisher owns now, in the form the claim queries take.
struct OwnedKeySlots {
  bytea *bitmap = nullptr;  // kKeySlots bytes, 1 where owned; in TopMemoryContext
  int count = 0;
  bool all = false;       // owns every slot: the claims need no filter
  uint64 generation = 0;  // bumped whenever the owned set changes
};

// Start of a publisher (`me` registered in worker_procno): forget any slot
// recorded for this index, and tell the others a publisher arrived.
void JoinKeySlots(DatabaseSlot *slot, int me);

// Exit of a publisher, before it unregisters: give up every slot it owns.
// After unregistering, it calls AnnounceMembership so that the others take
// the slots over (they would not while it still counted as live).
void LeaveKeySlots(DatabaseSlot *slot, int me);

// Tell the other publishers of the database to look at the owners again.
void AnnounceMembership(DatabaseSlot *slot);

// Bring this publisher's slots in line with the live publishers (see the
// protocol above). Cheap when nothing changed. Returns true when it gained
// slots: the caller must rebuild its per-key order state for them before
// its next claim.
bool RebalanceKeySlots(DatabaseSlot *slot, int me, int nworkers);

const OwnedKeySlots &OwnedSlots();

// The owned slots as the claims' bytea parameter (OWNED_KEYS).
inline Datum OwnedBitmap() { return PointerGetDatum(OwnedSlots().bitmap); }

// Rows this publisher may take: keyless ones, and those whose key hashes into
// a slot it owns ($N: OwnedBitmap(), or NULL when it owns every slot, as one
// publisher does: the filter then costs nothing per row).
#define OWNED_KEYS(param)                                            \
  " (" param " IS NULL OR key IS NULL OR pg_catalog.get_byte(" param \
  ", outbox.key_slot(key)) OPERATOR(pg_catalog.=) "                  \
  "1)"

}  // namespace outbox
