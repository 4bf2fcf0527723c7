// DROP EXTENSION outbox drops outbox.events with every event in it, delivered
// or not. PostgreSQL says nothing of that; a DBA should hear how many
// undelivered events went.
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "nodes/parsenodes.h"
}

namespace outbox {

// Undelivered events a DROP EXTENSION is about to drop.
struct DroppedEvents {
  bool counted = false;  // the statement drops outbox, for a role that may
  int64 pending = 0;
  int64 dead = 0;
};

// Called for every DROP before it runs: when it is DROP EXTENSION outbox (in
// this database, by a role that owns the extension, as PostgreSQL requires),
// counts the pending and dead events. Nothing, not even a lock, otherwise.
DroppedEvents CountEventsDroppedWith(const DropStmt *stmt);

// Called after the DROP ran: a WARNING naming how many pending and dead
// events it dropped, when there were any.
void WarnOfDroppedEvents(const DroppedEvents &dropped);

}  // namespace outbox
