// The PostgreSQL side of fault injection (see fault_injection.hpp): the
// setting and the actions. Everything but DefineSetting is compiled only
// into test builds (-DOUTBOX_FAULT_INJECTION).
#include "fault_injection.hpp"

#include <csignal>
#include <string>

extern "C" {
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/wait_event.h"
#include "utils/guc.h"
}

namespace outbox {
namespace fault {

#ifdef OUTBOX_FAULT_INJECTION
namespace {

char *rules_text = nullptr;

// A check hook may run in the postmaster: no ERROR, no exception out.
bool CheckRules(char **newval, void **extra, GucSource source) {
  const char *text = *newval != nullptr ? *newval : "";
  char why[256] = "";
  bool ok = false;
  try {
    std::string error;
    ok = Validate(text, &error);
    if (!ok) strlcpy(why, error.c_str(), sizeof why);
  } catch (...) {
    strlcpy(why, "out of memory", sizeof why);
  }
  if (!ok) GUC_check_errdetail("%s", why);
  return ok;
}

void AssignRules(const char *newval, void *extra) { Configure(newval != nullptr ? newval : ""); }

}  // namespace

void DefineSetting() {
  DefineCustomStringVariable(
      "outbox.fault_injection",
      "Test builds only: where the publisher and launcher fail on purpose.",
      "Comma-separated rules point=action[/N][#K] (src/core/fault_points.hpp); empty: none.",
      &rules_text, "", PGC_SUSET, GUC_NOT_IN_SAMPLE, CheckRules, AssignRules, nullptr);
}

void Hit(const char *point) {
  const Action action = Decide(point);
  if (action == Action::kNone || action == Action::kException) return;
  ereport(LOG, (errmsg("outbox: fault injection: %s at %s", ActionName(action), point)));
  switch (action) {
    case Action::kError:
      ereport(ERROR,
              (errcode(ERRCODE_INTERNAL_ERROR), errmsg("outbox: injected error at %s", point)));
      break;
    case Action::kOom:
      ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory"),
                      errdetail("Injected at %s.", point)));
      break;
    case Action::kCancel:
      // What pg_cancel_backend() does: the signal handler sets the flags,
      // and the cancel takes effect at this (or the next) interrupt check.
      kill(MyProcPid, SIGINT);
      CHECK_FOR_INTERRUPTS();
      break;
    case Action::kTerminate:
      kill(MyProcPid, SIGTERM);  // what pg_terminate_backend() does
      CHECK_FOR_INTERRUPTS();
      break;
    case Action::kSigkill:
      kill(MyProcPid, SIGKILL);
      pg_usleep(1000000L);  // not reached: the signal cannot be caught
      break;
    case Action::kStall:
      for (int i = 0; i < 20; ++i) {
        pg_usleep(100 * 1000L);
        CHECK_FOR_INTERRUPTS();
      }
      break;
    case Action::kLatch:
      // As a lock or condition variable wait inside the transaction does:
      // returns when the latch is set (by a commit asking for a cycle, say)
      // and resets it, so the wake-up is gone when the loop looks.
      (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 2000,
                      PG_WAIT_EXTENSION);
      ResetLatch(MyLatch);
      CHECK_FOR_INTERRUPTS();
      break;
    default:
      break;
  }
}

#else

void DefineSetting() {}

#endif

}  // namespace fault
}  // namespace outbox
