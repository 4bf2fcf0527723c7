// CREATE EXTENSION outbox WITH SCHEMA ...: outbox always makes and uses its
// own schema, outbox (the control file records the extension in pg_catalog),
// and PostgreSQL's answer, that it "must be installed in schema pg_catalog",
// sends a DBA the wrong way. Said plainly instead, before anything runs.
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "nodes/parsenodes.h"
}

namespace outbox {

// Called for every CREATE EXTENSION before it runs: ERROR 0A000 when it is
// outbox's with a schema given other than pg_catalog (which pg_dump writes). Nothing otherwise
// (PostgreSQL's own checks, privileges included, come after).
void CheckCreateExtension(const CreateExtensionStmt *stmt);

}  // namespace outbox
