// The ready claim's starting point (see claim_floor.hpp).
#include "core/claim_floor.hpp"

#include "core/partition_calendar.hpp"

namespace outbox {

IdPosition IdPositionFromBytes(const uint8_t *bytes16) {
  IdPosition p;
  for (int i = 0; i < 8; ++i) p.high = (p.high << 8) | bytes16[i];
  for (int i = 8; i < 16; ++i) p.low = (p.low << 8) | bytes16[i];
  return p;
}

void IdPositionToBytes(const IdPosition &position, uint8_t *bytes16) {
  for (int i = 0; i < 8; ++i) {
    bytes16[i] = static_cast<uint8_t>(position.high >> (56 - 8 * i));
    bytes16[8 + i] = static_cast<uint8_t>(position.low >> (56 - 8 * i));
  }
}

IdPosition IdFloorAt(int64_t pg_time_us) {
  const int64_t unix_ms = pg_time_us / 1000 + kPgEpochUnixSeconds * 1000;
  if (unix_ms <= 0) return IdPosition::Beginning();
  // The low 48 bits of the milliseconds, in the first six bytes.
  return IdPosition{static_cast<uint64_t>(unix_ms) << 16, 0};
}

int64_t IdTime(const IdPosition &id) {
  const int64_t unix_ms = static_cast<int64_t>(id.high >> 16);
  return (unix_ms - kPgEpochUnixSeconds * 1000) * 1000;
}

IdPosition After(const IdPosition &id) {
  IdPosition next = id;
  if (++next.low == 0) ++next.high;  // all 0xff wraps to the beginning
  return next;
}

int64_t ClaimFloor::PassHoldersBefore(int64_t now) { return now - kPassHoldersAfterUs; }

IdPosition ClaimFloor::SafeBound(int64_t now, int64_t oldest_emit) {
  int64_t t = now - kUsPerSecond;
  if (oldest_emit != 0 && oldest_emit < t) t = oldest_emit;
  return IdFloorAt(t);
}

bool ClaimFloor::CreatedAtRange(const IdPosition &from, int64_t now, int64_t *low, int64_t *high) {
  if (from.IsBeginning()) return false;
  *low = IdTime(from) - kClockStepMarginUs;
  *high = now + kClockStepMarginUs;
  return true;
}

void ClaimFloor::TopicsTakenAgain() { floor_ = IdPosition::Beginning(); }

bool ClaimFloor::KeySlotsAre(uint64_t generation) {
  if (generation == slot_generation_) return false;
  floor_ = IdPosition::Beginning();
  slot_generation_ = generation;
  return true;
}

bool ClaimFloor::ResetCountIs(uint64_t resets) {
  if (resets == seen_resets_) return false;
  floor_ = IdPosition::Beginning();
  seen_resets_ = resets;
  return true;
}

void ClaimFloor::RoutesChanged() { reset_requested_ = true; }

void ClaimFloor::BeginCycle(int64_t now, const IdPosition &bound) {
  if (reset_requested_) {
    floor_ = IdPosition::Beginning();
    reset_requested_ = false;
  }
  if (now - last_full_scan_ >= full_scan_interval_us_) {
    floor_ = IdPosition::Beginning();
    last_full_scan_ = now;
  }
  holder_cap_ = IdPosition::End();
  bound_ = bound;
  claim_from_ = floor_;
  next_ = floor_;
  ready_claimed_ = false;
  pending_set_ = false;
}

bool ClaimFloor::HolderCommitted(int64_t first_emit) {
  const IdPosition back = IdFloorAt(first_emit);
  holder_cap_ = MinPosition(holder_cap_, back);
  if (!(back < claim_from_)) return false;
  floor_ = MinPosition(floor_, back);
  claim_from_ = back;
  return true;
}

void ClaimFloor::FullScanTook(int64_t duration_us) {
  const int64_t interval = duration_us * kFullScanTimeShare;
  full_scan_interval_us_ = interval > kFullScanIntervalUs ? interval : kFullScanIntervalUs;
}

void ClaimFloor::ReadyClaimCameBackShort() {
  ready_claimed_ = true;
  next_ = bound_;
}

void ClaimFloor::ReadyClaimCameBackFull(const IdPosition &last) {
  ready_claimed_ = true;
  next_ = MinPosition(bound_, last);
  claim_from_ = After(last);
}

void ClaimFloor::WindowEnded() {
  if (!ready_claimed_) return;
  pending_ = MinPosition(holder_cap_, next_);
  pending_set_ = true;
}

void ClaimFloor::EventLeftInPlace() {
  floor_ = IdPosition::Beginning();
  pending_set_ = false;
}

void ClaimFloor::Committed() {
  if (reset_requested_) {
    floor_ = IdPosition::Beginning();
    reset_requested_ = false;
  } else if (pending_set_) {
    floor_ = pending_;
  }
  pending_set_ = false;
}

void ClaimFloor::Aborted() { pending_set_ = false; }

}  // namespace outbox
