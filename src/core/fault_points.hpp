// Fault injection for tests: named points in the publisher, the launcher and
// the dispatcher where a test build can be told to fail. PostgreSQL-free
// (the dispatcher uses it); the PostgreSQL actions live in fault_injection.hpp.
//
// Compiled in only with -DOUTBOX_FAULT_INJECTION (the test build: CMake's
// OUTBOX_FAULT_INJECTION option, see test/README or test/run_all.sh). In a
// release build every OUTBOX_FAULT* macro expands to nothing, the rule table
// is never filled and the setting that fills it does not exist.
//
// Rules: "point=action[/N][#K]", comma-separated, e.g.
//   publisher.after_begin=error
//   publisher.*=cancel/20, dispatch.*=exception/50#3
// - point: a point's name, or a prefix ending in '*' ("*" alone: every point);
// - action: error, cancel, terminate, sigkill, oom, stall, latch (PostgreSQL
//   points: stall waits 2 s, for tests that change something at a chosen
//   moment; latch waits up to 2 s on the process latch and resets it, as
//   PostgreSQL's own waits inside a transaction do (a lock, a condition
//   variable), consuming a wake-up meant for the worker's loop) or
//   exception, oom (C++ points); an action a point cannot take is ignored;
// - /N: fire at each hit with probability 1/N (default: every hit);
// - #K: fire at most K times in this process (default: no limit).
// The first rule whose point matches decides.
//
// Threading: the rule table belongs to the process's main thread (it is
// configured from the GUC's assign hook and read at the points, all on the
// main thread); librdkafka's threads never reach a point.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace outbox {
namespace fault {

enum class Action {
  kNone,
  kError,
  kCancel,
  kTerminate,
  kSigkill,
  kOom,
  kException,
  kStall,
  kLatch
};

// Whether `spec` parses; on failure *error says why. Never throws but for
// bad_alloc from *error.
bool Validate(std::string_view spec, std::string *error);

// Replace the rules with those of `spec` (invalid rules are skipped: call
// Validate first). Allocates nothing; at most kMaxRules rules.
void Configure(std::string_view spec) noexcept;
constexpr size_t kMaxRules = 16;
constexpr size_t kMaxPointLength = 64;

// The action to take at `point` now (kNone almost always). Counts the hit.
Action Decide(std::string_view point) noexcept;

// For points inside C++ code (a C++ boundary around them turns what they
// throw into an ERROR or an outcome): throws std::bad_alloc for oom and
// std::runtime_error for exception; ignores every other action.
void HitCpp(std::string_view point);

// The action's name, for log lines.
const char *ActionName(Action action) noexcept;

}  // namespace fault
}  // namespace outbox

#ifdef OUTBOX_FAULT_INJECTION
#define OUTBOX_FAULT_CPP(point) ::outbox::fault::HitCpp(point)
#else
#define OUTBOX_FAULT_CPP(point) ((void)0)
#endif
