// Keeps publishers out of the way of statements that need a database without
// connections (see database_guard.cpp).
#pragma once

#include "pg_bridge.hpp"

#include "shmem/shmem.hpp"

extern "C" {
#include "nodes/nodes.h"
}

namespace outbox {

// The database that `stmt` (DROP DATABASE, CREATE DATABASE ... TEMPLATE,
// ALTER DATABASE ... RENAME or SET TABLESPACE) will act on, when it will
// pass PostgreSQL's own checks that do not depend on the publishers being
// gone; InvalidOid for any other statement, for one that will be refused,
// and without outbox's shared memory. Requires a transaction (it reads the
// catalogs, and may wait up to 5 s for leaving sessions).
Oid DatabaseToPause(Node *stmt, bool top_level);

// Called by the ProcessUtility hook before `stmt` runs: CREATE DATABASE ...
// OID by a role that is not a superuser is refused (42501). PostgreSQL 15
// lets any role with CREATEDB choose the OID; outbox.home tells copies from
// their template by the OID, and the launcher ranks databases by it.
void RefuseChosenDatabaseOid(Node *stmt);

// Pause the database's publishers and wait (up to 10 s) until they are
// gone; the launcher starts none while the pause lasts (60 s at most).
// nullptr when there is nothing to pause (no database, no slot).
DatabaseSlot *PauseDatabase(Oid dboid);

// End the pause PauseDatabase began, however the statement ended.
void ResumeDatabase(DatabaseSlot *slot, Oid dboid);

}  // namespace outbox
