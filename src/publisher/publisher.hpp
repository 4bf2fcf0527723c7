// Entry points of outbox's background workers (looked up by name by the
// postmaster, so they are extern "C").
#pragma once

#include "pg_bridge.hpp"

extern "C" {
// The launcher: connected to no database; starts publishers (launcher.cpp).
PGDLLEXPORT void outbox_launcher_main(Datum main_arg);
// A publisher for the database whose OID is main_arg (publisher.cpp).
PGDLLEXPORT void outbox_publisher_main(Datum main_arg);
}

namespace outbox {

// Register the launcher (from _PG_init, while preloading).
void RegisterLauncher();

}  // namespace outbox
