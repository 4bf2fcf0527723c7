// Shared state (see shmem.hpp) and the commit-time wake-up.
//
// Why a commit callback and not NOTIFY: NOTIFY takes a global lock at commit
// (about 600 notifying commits/s were reported). Why at commit and not inside
// emit(): an emit in a transaction that rolls back must not wake anyone, and
// before commit the publisher could not see the event anyway. Commit callbacks
// run after the commit is visible, so the woken publisher finds the event.
#include "shmem.hpp"

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
bool callback_registered = false;

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
}

void InitSlot(DatabaseSlot *slot) {
  slot->dboid = InvalidOid;
  pg_atomic_init_u32(&slot->extension_state, static_cast<uint32>(ExtensionState::kUnknown));
  for (int i = 0; i < kMaxWorkersPerDatabase; ++i) {
    pg_atomic_init_u32(&slot->worker_procno[i], kNoProc);
  }
  pg_atomic_init_u64(&slot->config_version, 0);
  pg_atomic_init_u64(&slot->paused_until, 0);
  pg_atomic_init_u32(&slot->membership, 0);
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
    shared->nslots = SlotCount();
    for (int i = 0; i < shared->nslots; ++i) InitSlot(&shared->slots[i]);
  }
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

// Runs in every backend that emitted, after commit or abort. Must never
// raise an error: at commit it is too late to abort.
void OnXactEvent(XactEvent event, void *arg) {
  switch (event) {
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
      if (shared != nullptr && OidIsValid(MyDatabaseId)) {
        if (announce_at_commit || reload_at_commit) {
          DatabaseSlot *slot = announce_at_commit ? SlotFor(MyDatabaseId) : FindSlot(MyDatabaseId);
          if (slot != nullptr) {
            if (announce_at_commit) {
              pg_atomic_write_u32(&slot->extension_state,
                                  static_cast<uint32>(ExtensionState::kUnknown));
            }
            if (reload_at_commit) pg_atomic_fetch_add_u64(&slot->config_version, 1);
          }
        }
        if (wake_at_commit || reload_at_commit) {
          WakePublishers(MyDatabaseId);
        } else if (nwake_slots > 0 || wake_keyless) {
          WakeTargeted(MyDatabaseId);
        }
        if (announce_at_commit) WakeLauncher();
      }
      wake_at_commit = reload_at_commit = announce_at_commit = wake_keyless = false;
      nwake_slots = 0;
      break;
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
      wake_at_commit = reload_at_commit = announce_at_commit = wake_keyless = false;
      nwake_slots = 0;
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
  DatabaseSlot *found = nullptr;
  SpinLockAcquire(&shared->mutex);
  for (int i = 0; i < shared->nslots && found == nullptr; ++i) {
    if (shared->slots[i].dboid == dboid) found = &shared->slots[i];
  }
  for (int i = 0; i < shared->nslots && found == nullptr; ++i) {
    if (shared->slots[i].dboid == InvalidOid) {
      found = &shared->slots[i];
      InitSlot(found);
      found->dboid = dboid;
    }
  }
  SpinLockRelease(&shared->mutex);
  return found;
}

void ReleaseSlot(Oid dboid) {
  if (shared == nullptr) return;
  SpinLockAcquire(&shared->mutex);
  for (int i = 0; i < shared->nslots; ++i) {
    if (shared->slots[i].dboid == dboid) shared->slots[i].dboid = InvalidOid;
  }
  SpinLockRelease(&shared->mutex);
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

void AnnounceExtensionAtCommit() {
  if (shared == nullptr) return;
  EnsureCallback();
  announce_at_commit = true;
}

}  // namespace outbox
