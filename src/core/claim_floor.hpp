// The ready claim's starting point (its floor), and every rule that resets
// or moves it. PostgreSQL-free: the publisher (publisher/claim.cpp) keeps one
// ClaimFloor for its process, tells it what happened, and asks it where each
// ready claim starts and where the floor may go.
//
// Published events leave the ready index, but their index entries stay until
// they are known dead to every snapshot; while a long transaction holds the
// xmin horizon back, a claim starting at the head of the index would visit
// every event published since. So the claim starts at a floor below which no
// ready event it would take can exist:
// - the ready index only receives new events (retries and revived events go
//   through the retry index);
// - an event not yet committed has an id (its emit time) no earlier than
//   the time its transaction published in the emit horizon before taking
//   it (shmem/emit_horizon.hpp): the floor never exceeds the oldest such
//   time in this database, nor now minus a second (a margin for clock
//   steps): SafeBound;
// - except for transactions that emitted more than kPassHoldersAfterUs ago
//   and are still open (an emit role's idle or prepared transaction): the
//   floor passes them, else every claim would walk every event published
//   since they began, whose index entries their snapshot keeps. Each
//   reports its commit before its events are visible; the claims then look
//   back to its first emit once (HolderCommitted, at a cycle's start and
//   after every ready claim, which is claimed again from there or, in a
//   window's later batch, left for the next cycle). The floor a cycle that
//   took a report leaves stays at or below that first emit, and so does the
//   bound of every later cycle until the commit is visible (a committing
//   transaction counts in the emit horizon again): the events cannot become
//   visible below the floor after the report was taken;
// - a claim covers everything visible from the floor up to its last row,
//   except the events it leaves in place: those of topics no unpaused route
//   takes, and those behind a sink that is down. They stay below the floor,
//   at no cost, until the routes change or the sink is back, which starts
//   the claims from the beginning again;
// - the floor moves only once the cycle that claimed up to it committed (an
//   aborted cycle leaves its rows as they were, possibly below it).
// Prepared transactions that were prepared before the server started are of
// unknown content: they are passed (their events are invisible until they
// commit), and their COMMIT PREPARED reports a first emit at the beginning,
// counts there until it has ended, and resets the floors once it committed.
// Anything else that may put a claimable event below the floor starts the
// claims from the beginning once it commits (DatabaseSlot::floor_resets,
// ResetCountIs): maintenance moving rows out of the default partition, a
// statement other than emit() that makes a row never-tried
// (catalog/event_counts.cpp), and outbox.wakeup(). Left are rows another
// session held locked when a claim passed them (SKIP LOCKED; a SELECT ...
// FOR UPDATE of an operator), and rows INSERTed through outbox.events
// without emit(): a full scan every 10 s picks them up, less often when it
// walks so many events left in place that it would take more than 1% of the
// publisher's time (FullScanTook).
//
// Times are PostgreSQL timestamptz values (microseconds since 2000-01-01
// UTC), as the publisher reads them. No method throws or allocates.
#pragma once

#include <cstdint>

namespace outbox {

// A place in event id order: the 16 bytes of an id (a UUIDv7, whose first
// 48 bits are the Unix milliseconds of its emit), as two big-endian halves.
// Compared as PostgreSQL compares uuids, byte by byte.
struct IdPosition {
  uint64_t high = 0;
  uint64_t low = 0;

  // The first place (all zero): a claim from it is a full scan.
  static constexpr IdPosition Beginning() { return IdPosition{0, 0}; }
  // Above every id (all 0xff).
  static constexpr IdPosition End() { return IdPosition{~uint64_t{0}, ~uint64_t{0}}; }
  bool IsBeginning() const { return high == 0 && low == 0; }
};

inline bool operator<(const IdPosition &a, const IdPosition &b) {
  return a.high != b.high ? a.high < b.high : a.low < b.low;
}
inline bool operator==(const IdPosition &a, const IdPosition &b) {
  return a.high == b.high && a.low == b.low;
}
inline bool operator!=(const IdPosition &a, const IdPosition &b) { return !(a == b); }
inline IdPosition MinPosition(const IdPosition &a, const IdPosition &b) { return b < a ? b : a; }

// The 16 bytes of a uuid as a place, and back.
IdPosition IdPositionFromBytes(const uint8_t *bytes16);
void IdPositionToBytes(const IdPosition &position, uint8_t *bytes16);
// The lowest id an event emitted at `pg_time_us` or later can have (the
// beginning for times before 1970).
IdPosition IdFloorAt(int64_t pg_time_us);
// The time an id stands for (its first 48 bits: Unix milliseconds).
int64_t IdTime(const IdPosition &id);
// The smallest id above `id` (big-endian increment): the next claim of a
// window starts after the rows its transaction already holds.
IdPosition After(const IdPosition &id);

class ClaimFloor {
 public:
  static constexpr int64_t kUsPerSecond = 1000 * 1000;
  // A full scan at least this often, unless it takes more than
  // 1 / kFullScanTimeShare of the time (interval >= 100 x its duration).
  static constexpr int64_t kFullScanIntervalUs = 10 * kUsPerSecond;
  static constexpr int64_t kFullScanTimeShare = 100;
  // A transaction open this long since its first emit is passed (the grace).
  static constexpr int64_t kPassHoldersAfterUs = kUsPerSecond;
  // The created_at of an event with a given id: emit() takes both from one
  // clock reading, but a session's ids never go back when the clock does
  // (uuid7.hpp), so an id may run ahead of its created_at by a clock step.
  // The ready claims look this far around the times their ids stand for; an
  // event further off (a clock stepped back by more, or a row INSERTed by
  // hand) is claimed by a full scan, which has no created_at bound.
  static constexpr int64_t kClockStepMarginUs = 3600 * kUsPerSecond;

  // For the emit horizon read at `now`: transactions that first emitted
  // before this are passed.
  static int64_t PassHoldersBefore(int64_t now);
  // The highest floor that is safe at `now`, given the emit horizon read
  // after it (`oldest_emit`, 0: none; one before 1970 gives the beginning).
  static IdPosition SafeBound(int64_t now, int64_t oldest_emit);
  // The created_at range [*low, *high] the ids a ready claim from `from` (up
  // to `now`) can have, so that only the partitions that can hold them are
  // scanned. False for a full scan, which has no such range.
  static bool CreatedAtRange(const IdPosition &from, int64_t now, int64_t *low, int64_t *high);

  // Resets, before a cycle's claims (before BeginCycle). Each starts the
  // remembered floor from the beginning, not the cycle's copy: a cycle may
  // run no ready claim at all (its batch filled with due retries), and the
  // reset must hold until one does. Per-key order depends on it: a
  // never-tried event below the floor whose later events of the same key lie
  // above it would go out after them.
  //
  // Topics left alone until now (behind a sink that was down) are taken
  // again: they hold ready events below the floor.
  void TopicsTakenAgain();
  // The generation of the key slots this process owns: slots gained since
  // the last call may hold ready events below the floor. Returns whether it
  // changed (the caller forgets what it knew of their retry times too).
  bool KeySlotsAre(uint64_t generation);
  // The database's count of floor resets (shmem.hpp's
  // DatabaseSlot::floor_resets): events were put where the floor may have
  // passed them. Returns whether it changed since the last call (the events
  // may have been given retry times too).
  bool ResetCountIs(uint64_t resets);
  // The routes that deliver changed (their topics' events left in place may
  // lie below the floor): start from the beginning at the next cycle's
  // start, and, if a window is open, at its commit instead of moving on.
  void RoutesChanged();

  // A cycle begins at `now`, its claims bounded by `bound` (SafeBound): the
  // routes' reset and the full scan when due, then its first ready claim
  // starts at the remembered floor. Nothing is pending until the window ends.
  void BeginCycle(int64_t now, const IdPosition &bound);
  // A passed transaction that first emitted at `first_emit` committed (its
  // report was taken, at the cycle's start or after a ready claim). The floor
  // this cycle leaves stays at or below that emit. Returns whether the next
  // claim must start lower (the emit lies below where the last one started:
  // its snapshot may have seen events of that transaction below its start,
  // while it took later ones of their keys); the remembered floor goes down
  // there too, for good: an abort keeps it. A transaction that first emitted
  // at or above where the claim started has all its events in the range a
  // claim from there covers, in id order.
  bool HolderCommitted(int64_t first_emit);
  // Where this cycle's next ready claim starts (inclusive), and whether that
  // is a full scan (from the beginning).
  IdPosition ClaimFrom() const { return claim_from_; }
  bool FullScanNext() const { return claim_from_.IsBeginning(); }
  // A full scan took `duration_us`: the next waits 100 times as long, at
  // least kFullScanIntervalUs.
  void FullScanTook(int64_t duration_us);
  // Whether the routes that deliver changed since the cycle began: its
  // batches were claimed with the old ones, and a next claim with the new
  // ones would start above the last row, past never-tried events of a newly
  // taken topic. The window ends; the next cycle starts from the beginning.
  bool RoutesChangedInCycle() const { return reset_requested_; }
  // A ready claim came back short: everything visible from where it started
  // up to the bound was claimed. The floor may go up to the bound.
  void ReadyClaimCameBackShort();
  // A ready claim came back full (or stopped by its byte budget) at `last`:
  // everything visible up to there was claimed. The floor may go up to
  // `last` (never above the bound); the window's next claim starts after it.
  void ReadyClaimCameBackFull(const IdPosition &last);
  // No more claims in this window: if it ran a ready claim, the floor goes
  // where they left it (capped by passed transactions' commits) once the
  // cycle commits.
  void WindowEnded();
  // A claimed event was left as it was (Outcome::kUntouched): it may be a
  // ready one below the new floor. The next claim starts from the beginning,
  // and this cycle moves nothing.
  void EventLeftInPlace();
  // The cycle's transaction committed: the floor moves where the window left
  // it, or starts from the beginning if the routes changed meanwhile.
  void Committed();
  // The cycle's transaction aborted: the floor stays where the last committed
  // cycle put it (the aborted cycle's rows are pending again, perhaps above
  // it), but for the look-backs (HolderCommitted).
  void Aborted();

  // Where the next cycle's ready claims start, before its resets.
  IdPosition Remembered() const { return floor_; }

 private:
  IdPosition floor_;       // remembered; Beginning(): a full scan
  IdPosition claim_from_;  // this cycle's next ready claim
  IdPosition bound_;       // this cycle's SafeBound
  // The lowest first emit of the passed transactions' commits taken in this
  // cycle (End(): none), below which its floor stays.
  IdPosition holder_cap_ = IdPosition::End();
  IdPosition next_;             // where this cycle's ready claims left the floor
  bool ready_claimed_ = false;  // this cycle ran a ready claim: next_ holds
  // Where the floor goes once this cycle commits.
  IdPosition pending_;
  bool pending_set_ = false;
  // Set when the routes that deliver changed (RoutesChanged).
  bool reset_requested_ = false;
  int64_t last_full_scan_ = 0;
  int64_t full_scan_interval_us_ = kFullScanIntervalUs;
  uint64_t seen_resets_ = 0;
  // The owned key slots the floor was computed for.
  uint64_t slot_generation_ = 0;
};

}  // namespace outbox
