// Running a step that may raise an ERROR without losing the caller's
// transaction: an internal subtransaction, the caller's memory context and
// resource owner restored however the step ends.
#pragma once

extern "C" {
#include "postgres.h"

#include "utils/elog.h"
}

namespace outbox {

// Runs step(arg) in an internal subtransaction, kept when it returns true
// and rolled back when it returns false. An ERROR it raises rolls the
// subtransaction back and is returned, copied into the caller's memory
// context (the caller re-throws it with ReThrowError, says it as a WARNING,
// or frees it); nullptr when the step returned. GUC changes the step made
// at a new nest level end with the subtransaction. Requires an open
// transaction; raises only what starting a subtransaction may. No C++
// object with a destructor may live across the step's ERROR: `step` is
// plain C-style code, or catches its own exceptions.
ErrorData *RunInSubtransaction(bool (*step)(void *), void *arg);

}  // namespace outbox
