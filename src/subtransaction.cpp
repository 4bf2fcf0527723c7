// See subtransaction.hpp.
//
// Invariants: no C++ object with a destructor (the step's ERROR longjmps
// through here); the caller's memory context and resource owner are current
// again on every return.
#include "subtransaction.hpp"

extern "C" {
#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
}

namespace outbox {

ErrorData *RunInSubtransaction(bool (*step)(void *), void *arg) {
  MemoryContext caller = CurrentMemoryContext;
  ResourceOwner owner = CurrentResourceOwner;
  ErrorData *volatile error = nullptr;
  BeginInternalSubTransaction(nullptr);
  MemoryContextSwitchTo(caller);
  PG_TRY();
  {
    if (step(arg)) {
      ReleaseCurrentSubTransaction();
    } else {
      RollbackAndReleaseCurrentSubTransaction();
    }
    MemoryContextSwitchTo(caller);
    CurrentResourceOwner = owner;
  }
  PG_CATCH();
  {
    MemoryContextSwitchTo(caller);
    error = CopyErrorData();
    FlushErrorState();
    RollbackAndReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(caller);
    CurrentResourceOwner = owner;
  }
  PG_END_TRY();
  return error;
}

}  // namespace outbox
