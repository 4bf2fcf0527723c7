// Daily partitions of outbox.events: created ahead, dropped past retention,
// never dropped while they hold pending or dead events.
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace outbox {

// Runs at most once at a time per database (SHARE UPDATE EXCLUSIVE on
// outbox.events until the caller commits; a concurrent call returns at once
// with a NOTICE).
//
// Create partitions for the days from `at` to `at` + outbox.premake, move any
// rows the default partition holds for a day into that day's partition, and
// drop partitions wholly older than `at` - outbox.retention that hold only
// published events.
//
// Requires: a transaction is open and the caller is not inside SPI. Each
// DDL step runs in its own subtransaction under a lock_timeout of
// outbox.maintenance_lock_timeout: a step that cannot get its lock in time is
// skipped (and retried at the next run) rather than stalling emit().
// Locks taken by steps that succeed are held until the caller commits.
void MaintainPartitions(TimestampTz at);

// Give every partition of outbox.events that someone else owns to the owner
// of outbox.events (each step under outbox.maintenance_lock_timeout, as
// above). For the publisher, which runs as that owner (worker_session.hpp)
// and must be able to update and drop the partitions; it runs this first, as
// the superuser it connects as. Same requirements as MaintainPartitions.
void AlignPartitionOwners();

}  // namespace outbox
