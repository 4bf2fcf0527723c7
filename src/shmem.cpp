// Shared state (see shmem.hpp) and the commit-time wake-up.
//
// Why a commit callback and not NOTIFY: NOTIFY takes a global lock at commit
// (about 600 notifying commits/s were reported). Why at commit and not inside
// emit(): an emit in a transaction that rolls back must not wake anyone, and
// before commit the publisher could not see the event anyway. Commit callbacks
// run after the commit is visible, so the woken publisher finds the event.
#include "shmem.hpp"

#include "emit_horizon.hpp"

extern "C" {
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
}

namespace outbox {
namespace {

SharedState *shared = nullptr;
shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

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

int SlotCount() {
  // A database needs at least one worker process: more slots than worker
  // processes could never be used.
  return max_worker_processes > 0 ? max_worker_processes : 1;
}

Size SharedSize() {
  return add_size(offsetof(SharedState, slots), mul_size(sizeof(DatabaseSlot), SlotCount()));
}

void ShmemRequest() {
  if (prev_shmem_request_hook != nullptr) prev_shmem_request_hook();
  RequestAddinShmemSpace(SharedSize());
  RequestAddinShmemSpace(EmitHorizonShmemSize());
}

void InitSlot(DatabaseSlot *slot) {
  slot->dboid = InvalidOid;
  pg_atomic_init_u64(&slot->extension, static_cast<uint64>(ExtensionState::kUnknown));
  for (int i = 0; i < kMaxWorkersPerDatabase; ++i) {
    pg_atomic_init_u32(&slot->worker_procno[i], kNoProc);
  }
  pg_atomic_init_u64(&slot->config_version, 0);
  pg_atomic_init_u32(&slot->config_committing, 0);
  pg_atomic_init_u64(&slot->paused_until, 0);
  pg_atomic_init_u32(&slot->membership, 0);
  pg_atomic_init_u64(&slot->floor_resets, 0);
  for (int i = 0; i < kKeySlots; ++i) pg_atomic_init_u32(&slot->key_slot_owner[i], kNoOwner);
  for (int i = 0; i < kMaxWorkersPerDatabase; ++i) {
    PublisherStats *st = &slot->stats[i];
    memset(st, 0, sizeof *st);
    SpinLockInit(&st->mutex);
  }
}

void ShmemStartup() {
  if (prev_shmem_startup_hook != nullptr) prev_shmem_startup_hook();
  bool found = false;
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  shared = static_cast<SharedState *>(ShmemInitStruct("outbox", SharedSize(), &found));
  if (!found) {
    SpinLockInit(&shared->mutex);
    pg_atomic_init_u32(&shared->launcher_procno, kNoProc);
    pg_atomic_init_u32(&shared->unslotted_announcements, 0);
    shared->nslots = SlotCount();
    for (int i = 0; i < shared->nslots; ++i) InitSlot(&shared->slots[i]);
  }
  EmitHorizonShmemInit();
  LWLockRelease(AddinShmemInitLock);
}

void SetProcLatch(uint32 procno) {
  if (procno == kNoProc || procno >= ProcGlobal->allProcCount) return;
  SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

// The owners of the slots in wake_slots, and one publisher for keyless
// events; all publishers when a slot has no owner right now (between two, or
// no publisher yet). A stale owner read here is harmless: a publisher that
// gains a slot claims at once.
void WakeTargeted(Oid dboid) {
  DatabaseSlot *slot = FindSlot(dboid);
  if (slot == nullptr) return;
  for (int i = 0; i < nwake_slots; ++i) {
    const uint32 owner = pg_atomic_read_u32(&slot->key_slot_owner[wake_slots[i]]);
    const uint32 procno = owner < static_cast<uint32>(kMaxWorkersPerDatabase)
                              ? pg_atomic_read_u32(&slot->worker_procno[owner])
                              : kNoProc;
    if (procno == kNoProc) {
      WakePublishers(dboid);
      return;
    }
    SetProcLatch(procno);
  }
  if (wake_keyless) {
    for (int i = 0; i < kMaxWorkersPerDatabase; ++i) {
      const uint32 procno =
          pg_atomic_read_u32(&slot->worker_procno[(keyless_turn + i) % kMaxWorkersPerDatabase]);
      if (procno != kNoProc) {
        SetProcLatch(procno);
        keyless_turn += i + 1;
        break;
      }
    }
  }
}

// The database's slot, or a free one made its own (nullptr: none free).
// Caller holds shared->mutex.
DatabaseSlot *FindOrTakeLocked(Oid dboid) {
  for (int i = 0; i < shared->nslots; ++i) {
    if (shared->slots[i].dboid == dboid) return &shared->slots[i];
  }
  for (int i = 0; i < shared->nslots; ++i) {
    if (shared->slots[i].dboid == InvalidOid) {
      InitSlot(&shared->slots[i]);
      shared->slots[i].dboid = dboid;
      return &shared->slots[i];
    }
  }
  return nullptr;
}

// CREATE EXTENSION committed here: find or take the database's slot and
// bump its extension generation, under the mutex so that the launcher cannot
// free the slot in between.
void AnnounceExtension(Oid dboid) {
  SpinLockAcquire(&shared->mutex);
  DatabaseSlot *found = FindOrTakeLocked(dboid);
  if (found != nullptr) {
    const uint64 word = pg_atomic_read_u64(&found->extension);
    pg_atomic_write_u64(&found->extension, ((GenerationOf(word) + 1) << 2) |
                                               static_cast<uint64>(ExtensionState::kUnknown));
  } else {
    pg_atomic_fetch_add_u32(&shared->unslotted_announcements, 1);
  }
  SpinLockRelease(&shared->mutex);
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
      if (reload_at_commit && shared != nullptr && OidIsValid(MyDatabaseId)) {
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
      if (shared != nullptr && OidIsValid(MyDatabaseId)) {
        if (announce_at_commit) AnnounceExtension(MyDatabaseId);
        if (reset_floors_at_commit) {
          DatabaseSlot *slot = FindSlot(MyDatabaseId);
          if (slot != nullptr) pg_atomic_fetch_add_u64(&slot->floor_resets, 1);
        }
        if (wake_at_commit || reload_at_commit || reset_floors_at_commit) {
          WakePublishers(MyDatabaseId);
        } else if (nwake_slots > 0 || wake_keyless) {
          WakeTargeted(MyDatabaseId);
        }
        if (announce_at_commit || wake_launcher_at_commit) WakeLauncher();
      }
      ClearFlags();
      break;
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      // A prepared transaction's events become visible at COMMIT PREPARED,
      // which wakes the publishers itself (database_guard.cpp).
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

void RequestSharedMemory() {
  prev_shmem_request_hook = shmem_request_hook;
  shmem_request_hook = ShmemRequest;
}

void InstallSharedMemoryHooks() {
  prev_shmem_startup_hook = shmem_startup_hook;
  shmem_startup_hook = ShmemStartup;
}

SharedState *Shared() { return shared; }

DatabaseSlot *FindSlot(Oid dboid) {
  if (shared == nullptr) return nullptr;
  for (int i = 0; i < shared->nslots; ++i) {
    if (shared->slots[i].dboid == dboid) return &shared->slots[i];
  }
  return nullptr;
}

DatabaseSlot *SlotFor(Oid dboid) {
  if (shared == nullptr || !OidIsValid(dboid)) return nullptr;
  SpinLockAcquire(&shared->mutex);
  DatabaseSlot *found = FindOrTakeLocked(dboid);
  SpinLockRelease(&shared->mutex);
  return found;
}

bool AnyPublisher(const DatabaseSlot *slot) {
  for (int i = 0; i < kMaxWorkersPerDatabase; ++i) {
    if (pg_atomic_read_u32(const_cast<pg_atomic_uint32 *>(&slot->worker_procno[i])) != kNoProc) {
      return true;
    }
  }
  return false;
}

bool ReleaseSlotIf(Oid dboid, uint64 seen) {
  if (shared == nullptr) return false;
  bool released = false;
  SpinLockAcquire(&shared->mutex);
  for (int i = 0; i < shared->nslots; ++i) {
    DatabaseSlot *slot = &shared->slots[i];
    if (slot->dboid != dboid) continue;
    if (!AnyPublisher(slot) && pg_atomic_read_u64(&slot->extension) == seen) {
      slot->dboid = InvalidOid;
      released = true;
    }
  }
  SpinLockRelease(&shared->mutex);
  return released;
}

DatabaseSlot *TakePublisherPlace(Oid dboid, int index, uint32 procno) {
  if (shared == nullptr || index < 0 || index >= kMaxWorkersPerDatabase) return nullptr;
  DatabaseSlot *taken = nullptr;
  SpinLockAcquire(&shared->mutex);
  for (int i = 0; i < shared->nslots && taken == nullptr; ++i) {
    DatabaseSlot *slot = &shared->slots[i];
    if (slot->dboid != dboid) continue;
    uint32 expected = kNoProc;
    if (pg_atomic_compare_exchange_u32(&slot->worker_procno[index], &expected, procno)) {
      taken = slot;
    }
    break;
  }
  SpinLockRelease(&shared->mutex);
  return taken;
}

void GivePublisherPlaceBack(DatabaseSlot *slot, int index, uint32 procno) {
  uint32 expected = procno;
  (void)pg_atomic_compare_exchange_u32(&slot->worker_procno[index], &expected, kNoProc);
}

uint64 ReadExtension(DatabaseSlot *slot) { return pg_atomic_read_u64(&slot->extension); }

bool MarkExtensionPresent(DatabaseSlot *slot) {
  uint64 word = pg_atomic_read_u64(&slot->extension);
  while (StateOf(word) != ExtensionState::kPresent) {
    const uint64 present =
        (GenerationOf(word) << 2) | static_cast<uint64>(ExtensionState::kPresent);
    if (pg_atomic_compare_exchange_u64(&slot->extension, &word, present)) return true;
  }
  return false;
}

bool MarkExtensionAbsent(DatabaseSlot *slot, uint64 seen) {
  const uint64 absent = (GenerationOf(seen) << 2) | static_cast<uint64>(ExtensionState::kAbsent);
  uint64 expected = seen;
  return pg_atomic_compare_exchange_u64(&slot->extension, &expected, absent);
}

void WakePublishers(Oid dboid) {
  DatabaseSlot *slot = FindSlot(dboid);
  if (slot == nullptr) return;
  for (int i = 0; i < kMaxWorkersPerDatabase; ++i) {
    SetProcLatch(pg_atomic_read_u32(&slot->worker_procno[i]));
  }
}

void WakeLauncher() {
  if (shared != nullptr) SetProcLatch(pg_atomic_read_u32(&shared->launcher_procno));
}

void WakePublishersAtCommit() {
  if (shared == nullptr) return;  // not preloaded: no publisher to wake
  EnsureCallback();
  wake_at_commit = true;
}

void WakeKeyOwnerAtCommit(int key_slot) {
  if (shared == nullptr) return;
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
  if (shared == nullptr) return;
  EnsureCallback();
  reload_at_commit = true;
}

void WakeLauncherAtCommit() {
  if (shared == nullptr) return;
  EnsureCallback();
  wake_launcher_at_commit = true;
}

void ResetClaimFloorsAtCommit() {
  if (shared == nullptr) return;
  EnsureCallback();
  reset_floors_at_commit = true;
}

void AnnounceExtensionAtCommit() {
  if (shared == nullptr) return;
  EnsureCallback();
  announce_at_commit = true;
}

}  // namespace outbox
