// The commit-time wake-up: what a transaction that emitted, changed sinks or
// routes, created the extension or moved never-tried events does to the
// shared state (shmem.hpp) once it commits.
//
// Why a commit callback and not NOTIFY: NOTIFY takes a global lock at commit
// (about 600 notifying commits/s were reported). Why at commit and not inside
// emit(): an emit in a transaction that rolls back must not wake anyone, and
// before commit the publisher could not see the event anyway. Commit callbacks
// run after the commit is visible, so the woken publisher finds the event.
//
// State: backend-local flags of the current transaction, cleared when it
// ends; the callback is registered once per process.
#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"

#include "shmem/emit_horizon.hpp"

extern "C" {
#include "access/xact.h"
#include "miscadmin.h"
}

namespace outbox {
namespace {

// Backend-local flags for the current transaction, cleared at its end.
bool wake_at_commit = false;  // wake every publisher of the database
// Targeted wake-ups (WakeKeyOwnerAtCommit): key slots whose owners to wake,
// and whether one publisher should come for keyless events.
constexpr int kMaxTargetedSlots = 8;
int wake_slots[kMaxTargetedSlots];
int nwake_slots = 0;
bool wake_keyless = false;
uint32 keyless_turn = 0;  // spreads keyless wake-ups over the publishers
bool reload_at_commit = false;
bool announce_at_commit = false;
bool reset_floors_at_commit = false;
bool wake_launcher_at_commit = false;
bool callback_registered = false;
// The slot whose config_committing this session's transaction counts in
// (BumpConfigVersion), and its database: ended at commit or abort.
DatabaseSlot *committing_slot = nullptr;
Oid committing_dboid = InvalidOid;

// This transaction's config change is visible now, or will never be.
void EndConfigChange() {
  DatabaseSlot *slot = committing_slot;
  committing_slot = nullptr;
  if (slot == nullptr || slot->dboid != committing_dboid) return;  // slot reused since
  uint32 old = pg_atomic_read_u32(&slot->config_committing);
  while (old > 0 && !pg_atomic_compare_exchange_u32(&slot->config_committing, &old, old - 1)) {
  }
}

// The owners of the slots in wake_slots, and one publisher for keyless
// events; all publishers when a slot has no owner right now (between two, or
// no publisher yet). A stale owner read here is harmless: a publisher that
// gains a slot claims at once.
void WakeTargeted(DatabaseSlot *slot) {
  for (int i = 0; i < nwake_slots; ++i) {
    const uint32 owner = pg_atomic_read_u32(&slot->key_slot_owner[wake_slots[i]]);
    const uint32 procno = owner < static_cast<uint32>(kMaxWorkersPerDatabase)
                              ? pg_atomic_read_u32(&slot->worker_procno[owner])
                              : kNoProc;
    if (procno == kNoProc) {
      RequestCycles(slot);
      return;
    }
    RequestCycle(slot, static_cast<int>(owner));
  }
  if (wake_keyless) {
    for (int i = 0; i < kMaxWorkersPerDatabase; ++i) {
      const int index = static_cast<int>((keyless_turn + i) % kMaxWorkersPerDatabase);
      if (pg_atomic_read_u32(&slot->worker_procno[index]) != kNoProc) {
        RequestCycle(slot, index);
        keyless_turn += i + 1;
        break;
      }
    }
  }
}

void ClearFlags() {
  wake_at_commit = reload_at_commit = announce_at_commit = wake_keyless = false;
  reset_floors_at_commit = false;
  wake_launcher_at_commit = false;
  nwake_slots = 0;
}

// Runs in every backend that emitted, after commit or abort. Must never
// raise an error: at commit it is too late to abort.
void OnXactEvent(XactEvent event, void *arg) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
    case XACT_EVENT_PARALLEL_PRE_COMMIT:
      // Before the commit is visible: a publisher that claims this
      // transaction's events (claims take fresh snapshots) has already seen
      // the new version when it checks after its claim, and reloads sinks and
      // routes before deciding them (claim.cpp). Should the commit fail after
      // all, a publisher reloads for nothing.
      if (reload_at_commit && Shared() != nullptr && OidIsValid(MyDatabaseId)) {
        BumpConfigVersion(MyDatabaseId);
      }
      break;
    case XACT_EVENT_PRE_PREPARE:
      // Its commit happens in another session (COMMIT PREPARED), which looks
      // these up (commit_prepared.cpp); the emit horizon's callback, which
      // runs first, has made the transaction's entry.
      AddPreparedFlags(
          GetTopTransactionIdIfAny(),
          (reload_at_commit ? kPreparedReload : 0) | (announce_at_commit ? kPreparedAnnounce : 0) |
              (wake_at_commit || nwake_slots > 0 || wake_keyless ? kPreparedEmitted : 0));
      break;
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
      EndConfigChange();  // the commit is visible
      if (Shared() != nullptr && OidIsValid(MyDatabaseId)) {
        if (announce_at_commit) AnnounceExtension(MyDatabaseId);
        if (reset_floors_at_commit) {
          DatabaseSlot *slot = FindSlot(MyDatabaseId);
          if (slot != nullptr) pg_atomic_fetch_add_u64(&slot->floor_resets, 1);
        }
        if (reload_at_commit || reset_floors_at_commit) {
          WakePublishers(MyDatabaseId);  // each must act on it, busy or not
        } else if (DatabaseSlot *slot = FindSlot(MyDatabaseId); slot == nullptr) {
          // No publisher tracked here yet: nobody to wake.
        } else if (wake_at_commit) {
          RequestCycles(slot);
        } else if (nwake_slots > 0 || wake_keyless) {
          WakeTargeted(slot);
        }
        if (announce_at_commit || wake_launcher_at_commit) WakeLauncher();
      }
      ClearFlags();
      break;
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      // A prepared transaction's events become visible at COMMIT PREPARED,
      // which wakes the publishers itself (process_utility.cpp).
      EndConfigChange();
      ClearFlags();
      break;
    default:
      break;
  }
}

void EnsureCallback() {
  if (!callback_registered) {
    RegisterXactCallback(OnXactEvent, nullptr);
    callback_registered = true;
  }
}

}  // namespace

void InstallWakeCallback() { EnsureCallback(); }

void BumpConfigVersion(Oid dboid) {
  DatabaseSlot *slot = FindSlot(dboid);
  if (slot == nullptr) return;
  EnsureCallback();
  if (committing_slot == nullptr) {
    // Counted before the version moves: a publisher that sees the new
    // version and then a zero count knows the change is visible.
    pg_atomic_fetch_add_u32(&slot->config_committing, 1);  // a full barrier
    committing_slot = slot;
    committing_dboid = dboid;
  }
  pg_atomic_fetch_add_u64(&slot->config_version, 1);  // a full barrier
}

void WakePublishersAtCommit() {
  if (Shared() == nullptr) return;  // not preloaded: no publisher to wake
  EnsureCallback();
  wake_at_commit = true;
}

void WakeKeyOwnerAtCommit(int key_slot) {
  if (Shared() == nullptr) return;
  EnsureCallback();
  if (wake_at_commit) return;  // everyone is woken anyway
  if (key_slot < 0 || key_slot >= kKeySlots) {
    wake_keyless = true;
    return;
  }
  for (int i = 0; i < nwake_slots; ++i) {
    if (wake_slots[i] == key_slot) return;
  }
  if (nwake_slots == kMaxTargetedSlots) {
    wake_at_commit = true;  // many keys: cheaper to wake them all
    return;
  }
  wake_slots[nwake_slots++] = key_slot;
}

void ReloadConfigAtCommit() {
  if (Shared() == nullptr) return;
  EnsureCallback();
  reload_at_commit = true;
}

void WakeLauncherAtCommit() {
  if (Shared() == nullptr) return;
  EnsureCallback();
  wake_launcher_at_commit = true;
}

void ResetClaimFloorsAtCommit() {
  if (Shared() == nullptr) return;
  EnsureCallback();
  reset_floors_at_commit = true;
}

void AnnounceExtensionAtCommit() {
  if (Shared() == nullptr) return;
  EnsureCallback();
  announce_at_commit = true;
}

}  // namespace outbox
