// Shared state between user backends, the launcher and the publishers: one
// slot per database that may run publishers, with the latches to wake them.
// Exists only when outbox is in shared_preload_libraries; every function here
// is a no-op (or returns "none") otherwise.
#pragma once

#include "pg_bridge.hpp"

#include "core/key_slots.hpp"

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

// DatabaseSlot::extension packs a generation with the state:
// (generation << 2) | state. CREATE EXTENSION bumps the generation at commit
// (AnnounceExtension); a publisher that found the extension missing may set
// kAbsent only with a compare-and-swap from the word it read before taking
// its snapshot, so an announcement that came after that snapshot is never
// overwritten.
inline ExtensionState StateOf(uint64 word) { return static_cast<ExtensionState>(word & 3); }
inline uint64 GenerationOf(uint64 word) { return word >> 2; }

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
  // InvalidOid: free. Written under SharedState::mutex only; a slot is freed
  // only while no publisher holds a place in it.
  Oid dboid;
  pg_atomic_uint64 extension;  // (generation << 2) | ExtensionState, see above
  // pgprocno of the publisher holding each place (publisher index), or
  // kNoProc. A publisher takes its place with a compare-and-swap under
  // SharedState::mutex when it starts and gives it back when it exits, so
  // there are never two publishers with the same database and index, whoever
  // started them (a restarted launcher knows nothing of its predecessor's
  // starts). Read without the lock by committing backends to set latches: a
  // stale value only wakes a process for nothing (SetLatch on an exited
  // process is harmless).
  pg_atomic_uint32 worker_procno[kMaxWorkersPerDatabase];
  // Per publisher: 1 while a publish cycle has been asked of it that it has
  // not started yet. A transaction that emitted sets it at commit and sets
  // the publisher's latch only if it was 0, so under load most commits cost
  // a read of this word and no system call. The publisher clears it before
  // each cycle's claims (so a commit after the clear sets it again and wakes
  // it), or leaves it set while no route delivers (then commits need not
  // wake it: a route change does, with an unconditional wake-up).
  pg_atomic_uint32 cycle_requested[kMaxWorkersPerDatabase];
  // Bumped by transactions that changed sinks or routes, before their commit
  // becomes visible (XACT_EVENT_PRE_COMMIT), so publishers reload their
  // routing table, and one that claimed such a transaction's events sees the
  // change before it routes them.
  pg_atomic_uint64 config_version;
  // Transactions that bumped config_version and whose commit (or abort) has
  // not finished yet. The version is bumped before the change is visible, so
  // a publisher that reads a version while this is not zero may load the
  // old sinks and routes: it must not take them as that version's
  // (publisher.cpp, ConfigCurrent).
  pg_atomic_uint32 config_committing;
  // Publishers of this database exit and are not restarted before this time
  // (DROP DATABASE, CREATE DATABASE ... TEMPLATE, ALTER DATABASE RENAME need
  // the database free of connections). 0: not paused.
  pg_atomic_uint64 paused_until;  // TimestampTz
  // Bumped whenever a publisher registers, unregisters or gives key slots
  // up, so the others look at the key slot owners again.
  pg_atomic_uint32 membership;
  // Bumped at commit by transactions that put never-tried events where the
  // claims' remembered starting point may have passed them (maintenance
  // moving rows out of the default partition): publishers seeing a new value
  // start their next claim from the beginning.
  pg_atomic_uint64 floor_resets;
  // Per publisher: the earliest first emit of the passed transactions
  // (emit_horizon.hpp) that committed since it last looked; DT_NOEND: none.
  // A mailbox rather than a log: it cannot overflow, and a report reaches
  // only the publishers of its own database. Under holder_mutex, which is
  // initialised once with the shared memory (a committing backend may look
  // at a slot as it is freed and taken again).
  slock_t holder_mutex;
  TimestampTz holder_since[kMaxWorkersPerDatabase];
  // Owner (publisher index) of each key slot, or kNoOwner. A publisher
  // writes only its own index into a free slot (compare-and-swap) and frees
  // only slots it owns, always between its transactions (key_ownership.hpp).
  pg_atomic_uint32 key_slot_owner[kKeySlots];
  PublisherStats stats[kMaxWorkersPerDatabase];
};

struct SharedState {
  // Protects slot allocation and release (DatabaseSlot::dboid), publishers
  // taking their places, and announcements (so none lands on a slot being
  // freed).
  slock_t mutex;
  pg_atomic_uint32 launcher_procno;  // kNoProc when no launcher runs
  // Bumped when an announcement found no free slot: the launcher then looks
  // at every database again.
  pg_atomic_uint32 unslotted_announcements;
  // The stamp (millisecond and counter) of the last event id emit() took,
  // in any database: id_stamp.hpp.
  pg_atomic_uint64 id_stamp;
  int nslots;
  DatabaseSlot slots[FLEXIBLE_ARRAY_MEMBER];
};

constexpr uint32 kNoProc = 0xFFFFFFFFu;
constexpr uint32 kNoOwner = 0xFFFFFFFFu;

// Hooks for _PG_init (preload only).
void RequestSharedMemory();
void InstallSharedMemoryHooks();

// Whether this process is a publisher: what it writes to outbox.events it
// accounts for itself (event counts). Set once, by the publisher's main,
// before it connects to its database.
bool InPublisher();
void MarkPublisherProcess();

// nullptr unless preloaded and attached.
SharedState *Shared();

// The slot of a database, or nullptr. FindSlot never allocates; SlotFor
// allocates a free slot when needed (nullptr if all are taken).
DatabaseSlot *FindSlot(Oid dboid);
DatabaseSlot *SlotFor(Oid dboid);
// Free the database's slot if no publisher holds a place in it and its
// extension word is still `seen` (nothing announced since the caller looked).
// Returns whether it freed it.
bool ReleaseSlotIf(Oid dboid, uint64 seen);

// A publisher's place: take place `index` of the database's slot for this
// process (nullptr: no slot, or another publisher holds that place), and
// give it back at exit.
DatabaseSlot *TakePublisherPlace(Oid dboid, int index, uint32 procno);
void GivePublisherPlaceBack(DatabaseSlot *slot, int index, uint32 procno);
bool AnyPublisher(const DatabaseSlot *slot);

// The extension word (see DatabaseSlot::extension).
uint64 ReadExtension(DatabaseSlot *slot);
// A publisher found the extension: kPresent, keeping the generation. Returns
// whether the state changed.
bool MarkExtensionPresent(DatabaseSlot *slot);
// A publisher found it missing, in a snapshot taken after it read `seen`:
// kAbsent unless something was announced since. Returns whether it was set.
bool MarkExtensionAbsent(DatabaseSlot *slot, uint64 seen);

// A passed transaction of database `dboid` is committing (before its events
// are visible): every publisher of the database looks back to `since`. No
// slot: no publisher, and one that starts later claims from the beginning.
void ReportHolderCommit(Oid dboid, TimestampTz since);
// Publisher `index` of the slot: the earliest first emit reported since its
// last call (false: none), emptying its mailbox.
bool TakeHolderCommits(DatabaseSlot *slot, int index, TimestampTz *since);

// Set the latch of the process with this pgprocno (kNoProc: nobody).
void SetProcLatch(uint32 procno);
// CREATE EXTENSION committed in database dboid: find or take its slot and
// bump its extension generation (or count an announcement without a slot).
void AnnounceExtension(Oid dboid);

// Set the cycle request word and the latch of every publisher of a
// database. Unconditional: for what every publisher must act on (sinks or
// routes changed, claim floors reset, key slots to share out, a pause).
void WakePublishers(Oid dboid);
// Ask publisher `index` of the slot for a cycle: set its cycle_requested and
// its latch, the latch only if no cycle was requested already. Called after
// the commit that made the events visible.
void RequestCycle(DatabaseSlot *slot, int index);
// The same for every publisher of the slot.
void RequestCycles(DatabaseSlot *slot);
void WakeLauncher();

}  // namespace outbox
