// outbox's one ProcessUtility hook: what each utility statement makes
// outbox do before and after it runs (process_utility.cpp).
#pragma once

namespace outbox {

// Install the hook (from _PG_init, while preloading).
void InstallProcessUtilityHook();

}  // namespace outbox
