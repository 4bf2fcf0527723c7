// The databases the launcher reads from pg_database, in the order it gives
// them places, and its WARNINGs about places it cannot give.
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "utils/timestamp.h"
}

namespace outbox {

struct DatabaseList {
  Oid *oids;
  char **names;
  Oid *owners;         // datdba
  bool *trusted;       // owned by a superuser
  char **owner_names;  // quoted, for the WARNINGs; read here, in the transaction
  int count;
};

// Databases that accept connections and are not templates: those superusers
// own first, then the others, each in OID order (oldest first). Where
// outbox.max_databases leaves fewer places than databases that want one (at
// start-up, when the limit is raised), a DBA's databases get them before
// those a role with CREATEDB made, whatever their order in pg_database.
// Starts and commits a transaction of its own; allocates in `into`.
DatabaseList ListDatabases(MemoryContext into);
// How many of `owners` (the owners of databases with places) are `owner`.
int OwnersCount(const Oid *owners, int n, Oid owner);
// Where the database is in the list, or -1.
int IndexOf(const DatabaseList &dbs, Oid dboid);

// Whether to name `dboid` in a WARNING now: once a minute per database.
bool ShouldWarn(Oid dboid, TimestampTz now);
// The WARNINGs, each at most once a minute per database (WarnUnchecked:
// once a minute). Outside any transaction: `owner` was read with the list.
void WarnCannotStart(Oid dboid, const char *datname, TimestampTz now, const char *why);
void WarnOverLimit(Oid dboid, const char *datname, TimestampTz now);
void WarnOverOwnerLimit(Oid dboid, const char *datname, const char *owner, TimestampTz now);
void WarnUnchecked(int at_limit, int at_owner_limit, TimestampTz now);

}  // namespace outbox
