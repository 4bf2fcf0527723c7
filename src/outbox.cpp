// Module entry: defines the settings and records whether the library was
// preloaded (the publisher needs shared_preload_libraries; emit() does not).
#include "pg_bridge.hpp"

#include "guc.hpp"

extern "C" {
#include "miscadmin.h"
}

extern "C" {
PG_MODULE_MAGIC;
void _PG_init(void);
}

namespace {
// True in the postmaster and every process forked from it when the library
// came from shared_preload_libraries. Set once in _PG_init; read-only after.
bool loaded_at_preload = false;
}  // namespace

void _PG_init(void) {
  loaded_at_preload = process_shared_preload_libraries_in_progress;
  outbox::guc::Define();
}

// outbox.publisher_preloaded(): can this server run the publisher? The install
// script uses it to warn that events will wait as pending.
OUTBOX_SQL_FUNCTION(outbox_publisher_preloaded) { PG_RETURN_BOOL(loaded_at_preload); }
