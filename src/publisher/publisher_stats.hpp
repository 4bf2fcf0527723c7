// What a publisher reports about itself to the outbox.workers view
// (../catalog/workers_view.cpp): the PublisherStats of the place it holds in
// its database's slot (shmem.hpp). Only this process writes it, always under
// its spinlock, and nothing that can ereport is called while that is held.
#pragma once

#include "pg_bridge.hpp"

#include "core/dispatch.hpp"
#include "publisher/outcomes.hpp"
#include "shmem/shmem.hpp"

namespace outbox {

// From now on this process reports into place `index` of `slot`, the place
// it took: the entry is cleared and shows our pid, "starting". Called once,
// before any other Report*.
void ReportStarting(DatabaseSlot *slot, int index);
// At exit, before the place is given back: no pid, "stopped".
void ReportStopped();
// What the publisher does now ("publishing", "idle", ...).
void ReportState(const char *state);
// An ERROR that ended a cycle: one more failure, and its message.
void ReportError(const char *error);
// A committed cycle that took `ms`: the sinks' states, what it published and
// what failed, and the size of its claim when it claimed anything.
void ReportCycle(const Dispatcher *dispatcher, const CycleStats &cycle, double ms);

}  // namespace outbox
