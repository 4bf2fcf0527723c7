// Key slot ownership (see key_ownership.hpp). Shared memory only: no
// transaction, no lock beyond the atomics, no PostgreSQL error raised.
#include "publisher/key_ownership.hpp"

#include "core/key_slots.hpp"

extern "C" {
#include "utils/memutils.h"
}

namespace outbox {
namespace {

OwnedKeySlots owned;
uint32 seen_membership = 0;
bool membership_seen = false;
bool waiting_for_slots = false;  // some slot we should own is still held by another

void EnsureBitmap() {
  if (owned.bitmap != nullptr) return;
  owned.bitmap =
      static_cast<bytea *>(MemoryContextAllocZero(TopMemoryContext, VARHDRSZ + kKeySlots));
  SET_VARSIZE(owned.bitmap, VARHDRSZ + kKeySlots);
}

void Refresh(DatabaseSlot *slot, int me) {
  EnsureBitmap();
  unsigned char *bits = reinterpret_cast<unsigned char *>(VARDATA(owned.bitmap));
  int count = 0;
  bool changed = false;
  for (int s = 0; s < kKeySlots; ++s) {
    const unsigned char mine =
        pg_atomic_read_u32(&slot->key_slot_owner[s]) == static_cast<uint32>(me) ? 1 : 0;
    changed = changed || bits[s] != mine;
    bits[s] = mine;
    count += mine;
  }
  owned.count = count;
  owned.all = count == kKeySlots;
  if (changed) owned.generation++;
  PublisherStats *st = &slot->stats[me];
  SpinLockAcquire(&st->mutex);
  st->key_slots = count;
  SpinLockRelease(&st->mutex);
}

// Give up a slot this publisher owns. A compare-and-swap, hence a full
// barrier: the new owner's later compare-and-swap orders after everything
// this process did before, including the commit of its last outcomes.
bool Release(DatabaseSlot *slot, int s, int me) {
  uint32 expected = static_cast<uint32>(me);
  return pg_atomic_compare_exchange_u32(&slot->key_slot_owner[s], &expected, kNoOwner);
}

}  // namespace

void AnnounceMembership(DatabaseSlot *slot) {
  pg_atomic_fetch_add_u32(&slot->membership, 1);
  WakePublishers(slot->dboid);
}

void JoinKeySlots(DatabaseSlot *slot, int me) {
  for (int s = 0; s < kKeySlots; ++s) (void)Release(slot, s, me);
  membership_seen = false;
  Refresh(slot, me);
  AnnounceMembership(slot);
}

void LeaveKeySlots(DatabaseSlot *slot, int me) {
  for (int s = 0; s < kKeySlots; ++s) (void)Release(slot, s, me);
}

bool RebalanceKeySlots(DatabaseSlot *slot, int me, int nworkers) {
  const uint32 membership = pg_atomic_read_u32(&slot->membership);
  if (membership_seen && membership == seen_membership && !waiting_for_slots) return false;
  seen_membership = membership;
  membership_seen = true;

  bool live[kMaxWorkersPerDatabase] = {false};
  for (int i = 0; i < nworkers && i < kMaxWorkersPerDatabase; ++i) {
    live[i] = i == me || pg_atomic_read_u32(&slot->worker_procno[i]) != kNoProc;
  }
  bool released = false, gained = false, waiting = false;
  for (int s = 0; s < kKeySlots; ++s) {
    const int preferred = PreferredOwner(s, live, nworkers);
    const uint32 current = pg_atomic_read_u32(&slot->key_slot_owner[s]);
    if (current == static_cast<uint32>(me)) {
      if (preferred != me) released |= Release(slot, s, me);
    } else if (preferred == me) {
      uint32 expected = kNoOwner;
      if (pg_atomic_compare_exchange_u32(&slot->key_slot_owner[s], &expected,
                                         static_cast<uint32>(me))) {
        gained = true;
      } else {
        waiting = true;  // its owner gives it up between its transactions
      }
    }
  }
  waiting_for_slots = waiting;
  Refresh(slot, me);
  if (released) AnnounceMembership(slot);
  return gained;
}

const OwnedKeySlots &OwnedSlots() {
  EnsureBitmap();  // before the first Join: owns nothing
  return owned;
}

}  // namespace outbox
