// Keeps publishers out of the way of statements that need a database without
// connections (see database_guard.cpp).
#pragma once

namespace outbox {

// Install the ProcessUtility hook (from _PG_init, while preloading).
void InstallDatabaseGuard();

}  // namespace outbox
