// Module entry: defines the settings and, when preloaded, the shared state,
// the launcher and the DDL guard. emit() and the catalog functions work
// without preloading; the publisher does not.
#include "pg_bridge.hpp"

#include "hooks/config_changes.hpp"
#include "hooks/process_utility.hpp"
#include "shmem/emit_horizon.hpp"
#include "guc.hpp"
#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"
#include "publisher/publisher.hpp"

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
  // Workers need the postmaster to know them from the start; and nothing may
  // run during pg_upgrade's binary-upgrade mode.
  if (!loaded_at_preload || IsBinaryUpgrade) return;
  outbox::RequestSharedMemory();
  outbox::InstallSharedMemoryHooks();
  outbox::InstallProcessUtilityHook();
  outbox::InstallConfigChangeHook();
  // In this order: the emit horizon's callback runs before the wake-up's.
  outbox::InstallWakeCallback();
  outbox::InstallEmitHorizon();
  outbox::RegisterLauncher();
}

// outbox.publisher_preloaded(): can this server run the publisher? The install
// script uses it to warn that events will wait as pending.
OUTBOX_SQL_FUNCTION(outbox_publisher_preloaded) { PG_RETURN_BOOL(loaded_at_preload); }

// outbox.wakeup(): wake this database's publishers when the calling
// transaction commits, make their next claims look at every pending event
// (rows INSERTed without emit(), events changed by hand), and make sure the
// launcher runs one. The install script calls it so publishing starts right
// after CREATE EXTENSION commits.
OUTBOX_SQL_FUNCTION(outbox_wakeup) {
  outbox::AnnounceExtensionAtCommit();
  outbox::ResetClaimFloorsAtCommit();
  PG_RETURN_VOID();
}
