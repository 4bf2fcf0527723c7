// What other roles hold on outbox's objects, taken away when the writer
// takes them over.
#pragma once

#include "pg_bridge.hpp"

namespace outbox {

// Revoke every privilege another role holds on outbox's tables (`relations`:
// a query of their OIDs; on its views all but SELECT) and on their columns,
// and CREATE on schema outbox, each said in a WARNING. Grants on functions
// (EXECUTE on emit() for applications) and USAGE on the schema stay. The
// writer must own the objects already (ALTER ... OWNER moved the old
// owner's privileges to it). A superuser, in a transaction, SPI connected.
void RevokeOthersPrivileges(Oid writer, const char *relations);

}  // namespace outbox
