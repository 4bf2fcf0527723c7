// Shared state between user backends, the launcher and the publishers: one
// slot per database that may run publishers, with the latches to wake them.
// Exists only when outbox is in shared_preload_libraries; every function here
// is a no-op (or returns "none") otherwise.
#pragma once

#include "pg_bridge.hpp"

#include "key_slots.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/spin.h"
}

namespace outbox {

constexpr int kMaxWorkersPerDatabase = 64;  // the range of outbox.workers

// What the launcher knows about the extension in a database.
enum class ExtensionState : uint32 {
  kUnknown = 0,  // not checked yet: start a publisher, which finds out
  kPresent = 1,  // a publisher found it
  kAbsent = 2,   // a publisher found it missing and exited
};

// What a publisher reports about itself for the outbox.workers view.
// Written by that publisher only, under `mutex`; read by anyone under it.
struct PublisherStats {
  slock_t mutex;
  int pid;           // 0: no publisher in this place
  char state[32];    // "starting", "publishing", "idle", "backing off", ...
  char sinks[256];   // "name=state, ..." (no options: they hold secrets)
  uint64 published;  // events acknowledged since the process started
  uint64 failures;   // failed attempts and errors since then
  char last_error[256];
  TimestampTz last_error_at;  // 0: none yet
  int last_batch_size;
  double last_batch_ms;
  int key_slots;  // key slots this publisher owns (key_ownership.hpp)
};

struct DatabaseSlot {
  Oid dboid;                         // InvalidOid: free. Written under SharedState::mutex only.
  pg_atomic_uint32 extension_state;  // ExtensionState
  // pgprocno of each running publisher of this database, or -1. Read without
  // the lock by committing backends to set latches: a stale value only wakes
  // a process for nothing (SetLatch on an exited process is harmless).
  pg_atomic_uint32 worker_procno[kMaxWorkersPerDatabase];
  // Bumped at commit by transactions that changed sinks or routes, so
  // publishers reload their routing table.
  pg_atomic_uint64 config_version;
  // Publishers of this database exit and are not restarted before this time
  // (DROP DATABASE, CREATE DATABASE ... TEMPLATE, ALTER DATABASE RENAME need
  // the database free of connections). 0: not paused.
  pg_atomic_uint64 paused_until;  // TimestampTz
  // Bumped whenever a publisher registers, unregisters or gives key slots
  // up, so the others look at the key slot owners again.
  pg_atomic_uint32 membership;
  // Owner (publisher index) of each key slot, or kNoOwner. A publisher
  // writes only its own index into a free slot (compare-and-swap) and frees
  // only slots it owns, always between its transactions (key_ownership.hpp).
  pg_atomic_uint32 key_slot_owner[kKeySlots];
  PublisherStats stats[kMaxWorkersPerDatabase];
};

struct SharedState {
  slock_t mutex;                     // protects slot allocation (DatabaseSlot::dboid)
  pg_atomic_uint32 launcher_procno;  // -1 when no launcher runs
  int nslots;
  DatabaseSlot slots[FLEXIBLE_ARRAY_MEMBER];
};

constexpr uint32 kNoProc = 0xFFFFFFFFu;
constexpr uint32 kNoOwner = 0xFFFFFFFFu;

// Hooks for _PG_init (preload only).
void RequestSharedMemory();
void InstallSharedMemoryHooks();

// nullptr unless preloaded and attached.
SharedState *Shared();

// The slot of a database, or nullptr. FindSlot never allocates; SlotFor
// allocates a free slot when needed (nullptr if all are taken).
DatabaseSlot *FindSlot(Oid dboid);
DatabaseSlot *SlotFor(Oid dboid);
void ReleaseSlot(Oid dboid);

// Set the latch of every publisher of a database, and of the launcher.
void WakePublishers(Oid dboid);
void WakeLauncher();

// Called by emit(), and by sink and route changes: at commit of the current
// transaction, wake this database's publishers (and, for configuration
// changes, make them reload sinks and routes). Nothing happens on abort.
// Registers the transaction callback once per process.
void WakePublishersAtCommit();
// emit(): at commit, wake only the publisher that owns the event's key slot
// (key_slot < 0: a keyless event, for which any one publisher will do). The
// others would find nothing of theirs to claim. Falls back to waking them
// all when the transaction touched many slots or a slot is between owners.
void WakeKeyOwnerAtCommit(int key_slot);
void ReloadConfigAtCommit();
// Called by the install script: at commit, tell the launcher this database
// now has the extension, so publishing starts at once.
void AnnounceExtensionAtCommit();

}  // namespace outbox
