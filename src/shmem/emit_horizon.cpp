// The emit horizon (see emit_horizon.hpp).
//
// Memory ordering, the argument the claims depend on: a backend writes its
// time (a clock reading T0), then a full barrier, then reads the clock for
// the event id (T1 >= T0). A publisher reads the clock (P), then a full
// barrier, then reads every backend's time. If it misses a backend's write,
// that write came after its reads, so after P, and the event's id T1 >= P.
// The bound the publisher uses is min(P - margin, every time it saw): an id
// below it was either seen or could not exist yet.
//
// Passing, the argument for a transaction left out of the bound: its entry
// goes from `since` to `since | kPassed` only by a publisher's
// compare-and-swap, and at commit the backend sets kCommitting with an
// atomic OR, which returns whether kPassed was set before. Exactly one of
// them comes first: either the publisher's swap fails (the transaction
// counts in the bound, as any other) or the backend sees kPassed and
// reports its first-emit time to the database's publishers
// (ReportHolderCommit) before its commit is visible. A prepared transaction's entry does the same
// under prepared_mutex, its committing flag set before COMMIT PREPARED runs.
#include "shmem/emit_horizon.hpp"

#include "shmem/shmem.hpp"

extern "C" {
#include "access/twophase.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace {

// Flags beside the time in BackendEmit::since (a TimestampTz never reaches
// bit 62 before the year 146,000).
constexpr uint64 kPassed = uint64{1} << 63;      // a publisher left it out of the bound
constexpr uint64 kCommitting = uint64{1} << 62;  // past PRE_COMMIT: no longer passed
constexpr uint64 kTimeMask = kCommitting - 1;

// The first-emit time of a prepared transaction whose emits are unknown:
// below every event's (ClaimFloor's IdFloorAt gives the beginning for it).
constexpr TimestampTz kUnknownEmits = DT_NOBEGIN;

// One per PGPROC, written by the backend using that PGPROC, except that a
// publisher may add kPassed (compare-and-swap).
struct BackendEmit {
  pg_atomic_uint64 since;  // TimestampTz of the transaction's first emit | flags; 0: none
  Oid dboid;               // the backend's database (written before `since`)
};

// A prepared transaction, recorded at PREPARE by the preparing backend.
struct PreparedEmit {
  TransactionId xid;  // InvalidTransactionId: free entry
  Oid dboid;
  TimestampTz since;  // its first emit; 0: it emitted nothing
  uint32 flags;       // PreparedFlag bits its commit will need (shmem.cpp adds them)
  bool passed;        // a publisher left it out of the bound
  bool committing;    // COMMIT PREPARED is running: no longer passed
};

struct HorizonState {
  int nbackends;
  int nprepared;
  slock_t prepared_mutex;  // protects `prepared`
  BackendEmit *backends;   // [nbackends]
  PreparedEmit *prepared;  // [nprepared]
};

HorizonState *state = nullptr;
bool emitting = false;  // this backend published a time for the current transaction

int BackendCount() { return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts; }

BackendEmit *Mine() {
  if (state == nullptr || MyProc == nullptr) return nullptr;
  const int procno = MyProcIndex();
  return procno >= 0 && procno < state->nbackends ? &state->backends[procno] : nullptr;
}

// XACT_EVENT_PRE_COMMIT (and PRE_PREPARE): from here on no publisher passes
// this transaction; if one did, report it now, before the commit is visible.
// Returns the entry's time and whether it had been passed.
TimestampTz MarkCommitting(bool *passed) {
  *passed = false;
  BackendEmit *mine = Mine();
  if (!emitting || mine == nullptr) return 0;
  const uint64 old = pg_atomic_fetch_or_u64(&mine->since, kCommitting);
  *passed = (old & kPassed) != 0;
  return static_cast<TimestampTz>(old & kTimeMask);
}

void Clear() {
  if (!emitting) return;
  BackendEmit *mine = Mine();
  if (mine != nullptr) pg_atomic_write_u64(&mine->since, 0);
  emitting = false;
}

// Free the entries of prepared transactions that have ended (committed or
// rolled back, or whose PREPARE failed). TransactionIdIsInProgress takes
// LWLocks: called outside the spinlock.
void ForgetEndedPrepared() {
  for (int i = 0; i < state->nprepared; ++i) {
    SpinLockAcquire(&state->prepared_mutex);
    const TransactionId xid = state->prepared[i].xid;
    SpinLockRelease(&state->prepared_mutex);
    if (!TransactionIdIsValid(xid) || TransactionIdIsInProgress(xid)) continue;
    SpinLockAcquire(&state->prepared_mutex);
    if (TransactionIdEquals(state->prepared[i].xid, xid)) {
      state->prepared[i].xid = InvalidTransactionId;
    }
    SpinLockRelease(&state->prepared_mutex);
  }
}

// At PREPARE the transaction leaves this backend but stays open: record it
// (emitting or not) so publishers know what a prepared transaction holds.
// Never raises: a full table only makes publishers more careful.
void RecordPrepared() {
  const TransactionId xid = GetTopTransactionIdIfAny();
  if (state == nullptr) return;
  // No publisher passes the backend's entry from here on; the prepared
  // entry carries what one did.
  bool passed = false;
  const TimestampTz since = MarkCommitting(&passed);
  if (state->nprepared == 0 || !TransactionIdIsValid(xid)) {
    if (passed) ReportHolderCommit(MyDatabaseId, since);  // cannot prepare: look back anyway
    return;
  }
  for (int round = 0; round < 2; ++round) {
    SpinLockAcquire(&state->prepared_mutex);
    PreparedEmit *free_entry = nullptr;
    for (int i = 0; i < state->nprepared && free_entry == nullptr; ++i) {
      if (!TransactionIdIsValid(state->prepared[i].xid)) free_entry = &state->prepared[i];
    }
    if (free_entry != nullptr) {
      free_entry->xid = xid;
      free_entry->dboid = MyDatabaseId;
      free_entry->since = since;
      free_entry->flags = since != 0 ? kPreparedEmitted : 0;
      free_entry->passed = passed;
      free_entry->committing = false;
    }
    SpinLockRelease(&state->prepared_mutex);
    if (free_entry != nullptr) return;
    ForgetEndedPrepared();  // full of transactions that may have ended: make room
  }
  // No entry: its COMMIT PREPARED treats it as of unknown content
  // (NoteCommittingPrepared); a passed one may already be below the floors.
  if (passed) ReportHolderCommit(MyDatabaseId, since);
}

void OnXactEvent(XactEvent event, void *arg) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT: {
      bool passed = false;
      const TimestampTz since = MarkCommitting(&passed);
      if (passed) ReportHolderCommit(MyDatabaseId, since);
      break;
    }
    case XACT_EVENT_PRE_PREPARE:
      RecordPrepared();
      break;
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      Clear();
      break;
    default:
      break;
  }
}

}  // namespace

Size EmitHorizonShmemSize() {
  Size size = MAXALIGN(sizeof(HorizonState));
  size = add_size(size, MAXALIGN(mul_size(sizeof(BackendEmit), BackendCount())));
  size = add_size(size, MAXALIGN(mul_size(sizeof(PreparedEmit), max_prepared_xacts)));
  return size;
}

void EmitHorizonShmemInit() {
  bool found = false;
  char *base =
      static_cast<char *>(ShmemInitStruct("outbox emit horizon", EmitHorizonShmemSize(), &found));
  state = reinterpret_cast<HorizonState *>(base);
  if (found) return;
  state->nbackends = BackendCount();
  state->nprepared = max_prepared_xacts;
  SpinLockInit(&state->prepared_mutex);
  state->backends = reinterpret_cast<BackendEmit *>(base + MAXALIGN(sizeof(HorizonState)));
  state->prepared =
      reinterpret_cast<PreparedEmit *>(base + MAXALIGN(sizeof(HorizonState)) +
                                       MAXALIGN(mul_size(sizeof(BackendEmit), state->nbackends)));
  for (int i = 0; i < state->nbackends; ++i) {
    pg_atomic_init_u64(&state->backends[i].since, 0);
    state->backends[i].dboid = InvalidOid;
  }
  for (int i = 0; i < state->nprepared; ++i)
    state->prepared[i] = PreparedEmit{InvalidTransactionId, InvalidOid, 0, 0, false, false};
}

void InstallEmitHorizon() {
  // Inherited by every backend the postmaster forks. A backend that exits
  // in a transaction aborts it first, which clears its entry; a crash
  // resets shared memory.
  RegisterXactCallback(OnXactEvent, nullptr);
}

void NoteEmitting() {
  if (emitting) return;
  BackendEmit *mine = Mine();
  if (mine == nullptr) return;
  mine->dboid = MyDatabaseId;
  pg_write_barrier();
  pg_atomic_write_u64(&mine->since, static_cast<uint64>(GetCurrentTimestamp()));
  pg_memory_barrier();  // before the caller reads the clock for the id
  emitting = true;
}

void AddPreparedFlags(TransactionId xid, uint32 flags) {
  if (state == nullptr || !TransactionIdIsValid(xid)) return;
  SpinLockAcquire(&state->prepared_mutex);
  for (int i = 0; i < state->nprepared; ++i) {
    if (TransactionIdEquals(state->prepared[i].xid, xid)) state->prepared[i].flags |= flags;
  }
  SpinLockRelease(&state->prepared_mutex);
}

bool PreparedFlags(TransactionId xid, uint32 *flags) {
  bool known = false;
  *flags = 0;
  if (state == nullptr || !TransactionIdIsValid(xid)) return false;
  SpinLockAcquire(&state->prepared_mutex);
  for (int i = 0; i < state->nprepared && !known; ++i) {
    if (!TransactionIdEquals(state->prepared[i].xid, xid)) continue;
    known = true;
    *flags = state->prepared[i].flags;
  }
  SpinLockRelease(&state->prepared_mutex);
  return known;
}

EmitHorizon ReadEmitHorizon(Oid dboid, TimestampTz pass_before) {
  EmitHorizon h{0};
  if (state == nullptr) return h;
  pg_memory_barrier();  // the caller's clock reading comes first
  for (int i = 0; i < state->nbackends; ++i) {
    uint64 since = pg_atomic_read_u64(&state->backends[i].since);
    pg_read_barrier();
    if (since == 0 || state->backends[i].dboid != dboid) continue;
    // A passed transaction that commits counts again until its entry is
    // cleared, after its commit is visible: a publisher that took its report
    // before that keeps its floor at or below the transaction's first emit.
    if ((since & kPassed) != 0 && (since & kCommitting) == 0) continue;
    const TimestampTz t = static_cast<TimestampTz>(since & kTimeMask);
    // Fails when the transaction is committing or has ended since: it
    // counts below as any other (an ended one only lowers the bound).
    if ((since & kCommitting) == 0 && t < pass_before &&
        pg_atomic_compare_exchange_u64(&state->backends[i].since, &since, since | kPassed)) {
      continue;
    }
    if (h.oldest == 0 || t < h.oldest) h.oldest = t;
  }
  // Entries of transactions that have ended since go first: they would hold
  // the bound at their first emit though their events are visible now (to
  // the claims, whose snapshots come after this).
  ForgetEndedPrepared();
  // Every prepared entry of the database counts: a transaction preparing
  // right now makes its entry (PRE_PREPARE) before it clears its backend's
  // time (PREPARE), so a backend time read as cleared above means its entry
  // is visible here (the spinlock orders the reads). An entry of a
  // transaction that has ended since only lowers the bound until
  // ForgetEndedPrepared frees it. A prepared transaction without an entry
  // (prepared before the server started) is not waited for: its COMMIT
  // PREPARED makes one (NoteCommittingPrepared).
  SpinLockAcquire(&state->prepared_mutex);
  for (int i = 0; i < state->nprepared; ++i) {
    PreparedEmit &e = state->prepared[i];
    if (!TransactionIdIsValid(e.xid) || e.dboid != dboid || e.since == 0) continue;
    if (e.passed && !e.committing) continue;  // committing: counts until it has ended
    if (!e.committing && e.since < pass_before) {
      e.passed = true;
      continue;
    }
    if (h.oldest == 0 || e.since < h.oldest) h.oldest = e.since;
  }
  SpinLockRelease(&state->prepared_mutex);
  return h;
}

bool NoteCommittingPrepared(TransactionId xid) {
  if (state == nullptr || !TransactionIdIsValid(xid)) return false;
  bool known = false;
  bool passed = false;
  Oid dboid = InvalidOid;
  TimestampTz since = 0;
  SpinLockAcquire(&state->prepared_mutex);
  for (int i = 0; i < state->nprepared; ++i) {
    PreparedEmit &e = state->prepared[i];
    if (!TransactionIdEquals(e.xid, xid)) continue;
    known = true;
    e.committing = true;
    passed = e.passed;
    dboid = e.dboid;
    since = e.since;
  }
  SpinLockRelease(&state->prepared_mutex);
  if (known) {
    if (passed) ReportHolderCommit(dboid, since);
    return true;
  }
  // Prepared before the server started (or when the table was full): it
  // may have emitted anything, at any time. From now until it has ended it
  // counts in the bound as emitting at the beginning, and the publishers
  // look back there once; the caller also resets their floors once it
  // committed (should there be no room here, that alone finds its events).
  for (int round = 0; round < 2; ++round) {
    bool recorded = false;
    SpinLockAcquire(&state->prepared_mutex);
    for (int i = 0; i < state->nprepared && !recorded; ++i) {
      PreparedEmit &e = state->prepared[i];
      if (TransactionIdIsValid(e.xid)) continue;
      e.xid = xid;
      e.dboid = MyDatabaseId;
      e.since = kUnknownEmits;
      e.flags = 0;
      e.passed = false;
      e.committing = true;
      recorded = true;
    }
    SpinLockRelease(&state->prepared_mutex);
    if (recorded) break;
    ForgetEndedPrepared();
  }
  ReportHolderCommit(MyDatabaseId, kUnknownEmits);
  return false;
}

void NoteCommitPreparedFailed(TransactionId xid) {
  if (state == nullptr || !TransactionIdIsValid(xid)) return;
  SpinLockAcquire(&state->prepared_mutex);
  for (int i = 0; i < state->nprepared; ++i) {
    PreparedEmit &e = state->prepared[i];
    if (!TransactionIdEquals(e.xid, xid)) continue;
    e.committing = false;
    // One of unknown emits is passed again; one a publisher passed before
    // stays passed (its report was made: the next COMMIT PREPARED makes
    // another), one it did not is waited for again.
    if (e.since == kUnknownEmits) e.passed = true;
  }
  SpinLockRelease(&state->prepared_mutex);
}

}  // namespace outbox
