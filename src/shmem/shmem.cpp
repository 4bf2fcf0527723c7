// Shared state (see shmem.hpp): its layout, the database slots, publishers'
// places and latches. What a committing transaction does with it is in
// commit_wakeup.cpp.
#include "shmem/shmem.hpp"

#include "shmem/emit_horizon.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
}

namespace outbox {
namespace {

SharedState *shared = nullptr;
bool in_publisher = false;  // this process's, not shared
shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

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
    pg_atomic_init_u32(&slot->cycle_requested[i], 0);
  }
  pg_atomic_init_u64(&slot->config_version, 0);
  pg_atomic_init_u32(&slot->config_committing, 0);
  pg_atomic_init_u64(&slot->paused_until, 0);
  pg_atomic_init_u32(&slot->membership, 0);
  pg_atomic_init_u64(&slot->floor_resets, 0);
  for (int i = 0; i < kKeySlots; ++i) pg_atomic_init_u32(&slot->key_slot_owner[i], kNoOwner);
  SpinLockAcquire(&slot->holder_mutex);
  for (TimestampTz &since : slot->holder_since) since = DT_NOEND;
  SpinLockRelease(&slot->holder_mutex);
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
    pg_atomic_init_u64(&shared->id_stamp, 0);
    shared->nslots = SlotCount();
    for (int i = 0; i < shared->nslots; ++i) {
      SpinLockInit(&shared->slots[i].holder_mutex);
      InitSlot(&shared->slots[i]);
    }
  }
  EmitHorizonShmemInit();
  LWLockRelease(AddinShmemInitLock);
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

void SetProcLatch(uint32 procno) {
  if (procno == kNoProc || procno >= ProcGlobal->allProcCount) return;
  SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

// CREATE EXTENSION committed here: find or take the database's slot and
// bump its extension generation, under the mutex so that the launcher cannot
// free the slot in between.
void AnnounceExtension(Oid dboid) {
  if (shared == nullptr) return;
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

void ReportHolderCommit(Oid dboid, TimestampTz since) {
  DatabaseSlot *slot = FindSlot(dboid);
  if (slot == nullptr) return;
  SpinLockAcquire(&slot->holder_mutex);
  if (slot->dboid == dboid) {  // not freed and taken by another database since
    for (TimestampTz &mine : slot->holder_since) {
      if (since < mine) mine = since;
    }
  }
  SpinLockRelease(&slot->holder_mutex);
}

bool TakeHolderCommits(DatabaseSlot *slot, int index, TimestampTz *since) {
  if (slot == nullptr || index < 0 || index >= kMaxWorkersPerDatabase) return false;
  SpinLockAcquire(&slot->holder_mutex);
  *since = slot->holder_since[index];
  slot->holder_since[index] = DT_NOEND;
  SpinLockRelease(&slot->holder_mutex);
  return *since != DT_NOEND;
}

bool InPublisher() { return in_publisher; }
void MarkPublisherProcess() { in_publisher = true; }

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
  // The request word too, not only the latch: a wait inside a running cycle
  // may consume the latch, and a publisher looks at the word before it
  // sleeps (publisher.cpp, CycleRequested).
  pg_memory_barrier();
  for (int i = 0; i < kMaxWorkersPerDatabase; ++i) {
    const uint32 procno = pg_atomic_read_u32(&slot->worker_procno[i]);
    if (procno == kNoProc) continue;
    pg_atomic_write_u32(&slot->cycle_requested[i], 1);
    pg_memory_barrier();
    SetProcLatch(procno);
  }
}

void RequestCycle(DatabaseSlot *slot, int index) {
  if (index < 0 || index >= kMaxWorkersPerDatabase) return;
  // Our commit is visible before we look: a publisher that cleared the word
  // after this read takes its snapshot after the clear, and sees it.
  pg_memory_barrier();
  if (pg_atomic_read_u32(&slot->cycle_requested[index]) != 0) return;
  if (pg_atomic_exchange_u32(&slot->cycle_requested[index], 1) != 0) return;
  SetProcLatch(pg_atomic_read_u32(&slot->worker_procno[index]));
}

void RequestCycles(DatabaseSlot *slot) {
  for (int i = 0; i < kMaxWorkersPerDatabase; ++i) {
    if (pg_atomic_read_u32(&slot->worker_procno[i]) != kNoProc) RequestCycle(slot, i);
  }
}

void WakeLauncher() {
  if (shared != nullptr) SetProcLatch(pg_atomic_read_u32(&shared->launcher_procno));
}

}  // namespace outbox
