// The publisher's waits on its latch, between its transactions: the sleep
// when there is nothing to do (and the memory given back before it), the
// backoff after an error, and the wake interval before a cycle commits
// asked for. Each says what cuts it short: a sleep ends at whatever sets the
// latch, the other two only at SIGTERM or a pause.
#pragma once

#include "pg_bridge.hpp"

#include "core/dispatch.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace outbox {

// Whether the publisher's database is paused now: DROP DATABASE and the
// like wait for its publishers to leave (DatabaseSlot::paused_until).
using PauseCheck = bool (*)();

// Sleep up to `ms`: until the latch is set (a commit asking for a cycle, a
// route change, a signal), or a late answer of a slow sink arrives, which
// comes through the sink's queue, not the latch (dispatch.hpp, "Slow
// sinks").
void Sleep(Dispatcher *dispatcher, long ms);

// When idle: give the pages a busy spell left free back to the system.
void ReturnFreedMemory();

// The backoff after an error: commits setting our latch do not cut it
// short (they would turn a failing cycle into a busy loop); SIGTERM and a
// pause (DROP DATABASE waits for us to leave) do.
void Backoff(long ms, PauseCheck paused);

// The wake interval (outbox.wake_interval): a cycle that commits asked for
// starts no sooner than this after the previous cycle started, so that under
// load one cycle takes what many commits brought. Commits setting our latch
// meanwhile do not cut it short (their cycle is the one waited for); SIGTERM
// and a pause do. A cycle right after a quiet spell waits for nothing.
void WaitForWakeInterval(TimestampTz last_cycle_start, PauseCheck paused);

}  // namespace outbox
