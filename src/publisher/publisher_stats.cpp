// The publisher's entry in the outbox.workers view (publisher_stats.hpp).
#include "publisher/publisher_stats.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/timestamp.h"
}

#include <cstddef>
#include <cstring>

namespace outbox {
namespace {

PublisherStats *stats = nullptr;  // this process's place's (ReportStarting)

PublisherStats *MyStats() { return stats; }

}  // namespace

void ReportStarting(DatabaseSlot *slot, int index) {
  stats = &slot->stats[index];
  PublisherStats *st = MyStats();
  SpinLockAcquire(&st->mutex);
  memset(reinterpret_cast<char *>(st) + offsetof(PublisherStats, pid), 0,
         sizeof *st - offsetof(PublisherStats, pid));
  st->pid = MyProcPid;
  strlcpy(st->state, "starting", sizeof st->state);
  SpinLockRelease(&st->mutex);
}

void ReportStopped() {
  PublisherStats *st = MyStats();
  SpinLockAcquire(&st->mutex);
  st->pid = 0;
  strlcpy(st->state, "stopped", sizeof st->state);
  SpinLockRelease(&st->mutex);
}

void ReportState(const char *state) {
  PublisherStats *st = MyStats();
  SpinLockAcquire(&st->mutex);
  strlcpy(st->state, state, sizeof st->state);
  SpinLockRelease(&st->mutex);
}

void ReportError(const char *error) {
  PublisherStats *st = MyStats();
  const TimestampTz now = GetCurrentTimestamp();
  SpinLockAcquire(&st->mutex);
  st->failures++;
  strlcpy(st->last_error, error, sizeof st->last_error);
  st->last_error_at = now;
  SpinLockRelease(&st->mutex);
}

void ReportCycle(const Dispatcher *dispatcher, const CycleStats &cycle, double ms) {
  char sinks[sizeof(PublisherStats::sinks)];
  dispatcher->SinkStates(sinks, sizeof sinks);
  PublisherStats *st = MyStats();
  const TimestampTz now = GetCurrentTimestamp();
  SpinLockAcquire(&st->mutex);
  strlcpy(st->sinks, sinks, sizeof st->sinks);
  st->published += static_cast<uint64>(cycle.published);
  st->failures += static_cast<uint64>(cycle.failed);
  if (cycle.failed > 0) {
    strlcpy(st->last_error, cycle.last_error, sizeof st->last_error);
    st->last_error_at = now;
  }
  if (cycle.claimed > 0) {
    st->last_batch_size = cycle.claimed;
    st->last_batch_ms = ms;
  }
  SpinLockRelease(&st->mutex);
}

}  // namespace outbox
