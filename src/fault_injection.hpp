// Fault injection points in PostgreSQL-facing code (tests only): the
// PostgreSQL half of fault_points.hpp. OUTBOX_FAULT("name") may raise an
// ERROR, deliver a cancel (SIGINT) or a terminate (SIGTERM) to this process
// as pg_cancel_backend/pg_terminate_backend would, kill it with SIGKILL, or
// raise an out-of-memory ERROR, as the setting outbox.fault_injection says.
// It must therefore sit only where an ERROR may be raised: never inside a
// C++ try block, a critical section or a commit callback.
//
// Release builds: the macro is empty and the setting is not defined.
#pragma once

#include "pg_bridge.hpp"

#include "core/fault_points.hpp"

namespace outbox {
namespace fault {

// Define outbox.fault_injection (test builds; a no-op otherwise).
void DefineSetting();

// Take the action the rules give for `point` (see fault_points.hpp). Logs
// what it injects (LOG "outbox: fault injection: <action> at <point>").
void Hit(const char *point);

}  // namespace fault
}  // namespace outbox

#ifdef OUTBOX_FAULT_INJECTION
#define OUTBOX_FAULT(point) ::outbox::fault::Hit(point)
#else
#define OUTBOX_FAULT(point) ((void)0)
#endif
