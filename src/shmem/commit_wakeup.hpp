// What a committing transaction does to the shared state (shmem.hpp): wake
// the publishers that have something new, make them reload sinks and routes,
// reset their claims' starting points, tell the launcher about a new
// database or extension. Each call only notes what to do; a transaction
// callback does it at commit, and nothing happens on abort.
#pragma once

#include "pg_bridge.hpp"

namespace outbox {

// Register the commit-time wake-up callback (_PG_init, preload only, before
// InstallEmitHorizon: PostgreSQL calls transaction callbacks newest first, and
// a committing transaction must leave the emit horizon before it wakes a
// publisher, or the woken cycle still counts it as open and claims less).
void InstallWakeCallback();

// At commit, wake the launcher (a database was created).
void WakeLauncherAtCommit();

// Called by maintenance when it moved never-tried events: at commit, make
// the publishers start their next claims from the beginning.
void ResetClaimFloorsAtCommit();

// Called by emit(), and by sink and route changes: at commit of the current
// transaction, wake this database's publishers (and, for configuration
// changes, make them reload sinks and routes). Nothing happens on abort.
// Registers the transaction callback once per process.
void WakePublishersAtCommit();
// emit(): at commit, wake only the publisher that owns the event's key slot
// (key_slot < 0: a keyless event, for which any one publisher will do). The
// others would find nothing of theirs to claim. Falls back to waking them
// all when the transaction touched many slots or a slot is between owners.
void WakeKeyOwnerAtCommit(int key_slot);
void ReloadConfigAtCommit();
// The same now: sinks or routes may change (COMMIT PREPARED, before it runs);
// the change counts as committing (DatabaseSlot::config_committing) until
// this session's transaction ends.
void BumpConfigVersion(Oid dboid);
// Called by the install script: at commit, tell the launcher this database
// now has the extension, so publishing starts at once.
void AnnounceExtensionAtCommit();

}  // namespace outbox
