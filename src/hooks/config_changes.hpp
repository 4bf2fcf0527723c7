// Changes to outbox.sinks and outbox.routes reach the publishers, however
// they are made: besides the sink and route functions (which ask for it
// themselves), any INSERT, UPDATE, DELETE or MERGE on the two tables (a
// restore's INSERTs, an update script's DML, an operator's statement), a
// COPY into them (a restore), a TRUNCATE, and ALTER EXTENSION outbox UPDATE
// (the meaning of a route's format may change with the version) make the
// database's publishers reload sinks and routes when the transaction
// commits. Reloading releases events parked for lack of a route
// (publisher/configuration.hpp). Hooks, not triggers: a restore may disable
// triggers (--disable-triggers, session_replication_role = replica).
#pragma once

extern "C" {
#include "postgres.h"

#include "nodes/nodes.h"
}

namespace outbox {

// Installs the executor hook; only when preloaded (no publisher otherwise).
void InstallConfigChangeHook();

// From the ProcessUtility hook, before the statement runs: whether it is
// COPY FROM or TRUNCATE naming either table, or ALTER EXTENSION outbox. Takes
// no lock; names resolve as the statement itself will resolve them, before
// any code of its runs (a trigger of the statement's may change the
// search_path). The hook notes the change (ReloadConfigAtCommit) once the
// statement ran: one PostgreSQL refused raised before that and reloads
// nothing, nor does a write to the tables the executor refused, so that a
// role without the right cannot make the publishers reload in a loop.
bool ChangesConfiguration(Node *stmt);

}  // namespace outbox
