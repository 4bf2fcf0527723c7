// The databases the launcher reads from pg_database, in the order it gives
// them places, and its WARNINGs about places it cannot give (launcher.cpp).
// Runs in the launcher only; `warned` lives in TopMemoryContext and holds no
// pointer into memory a transaction owns.
#include "publisher/launcher_databases.hpp"

#include <algorithm>

#include "guc.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
}

namespace outbox {
namespace {

constexpr long kWarnIntervalMs = 60000;

// When each database was last named in a "cannot start" WARNING.
struct Warned {
  Oid dboid;
  TimestampTz at;
};
Warned *warned = nullptr;
int nwarned = 0, warned_capacity = 0;

// Once a minute at most: databases left unprobed because the limits are
// reached (whether they have the extension is not known until probed).
TimestampTz unchecked_warned_at = 0;

}  // namespace

// Once a minute per database at most. Entries a minute old go (a database
// not in them is warned of anyway): the list holds only the databases named
// in the last minute, however many are created and dropped.
bool ShouldWarn(Oid dboid, TimestampTz now) {
  int kept = 0;
  bool recent = false;
  for (int i = 0; i < nwarned; ++i) {
    if (now - warned[i].at >= kWarnIntervalMs * 1000L) continue;
    recent = recent || warned[i].dboid == dboid;
    warned[kept++] = warned[i];
  }
  nwarned = kept;
  if (recent) return false;
  if (nwarned == warned_capacity) {
    warned_capacity = warned_capacity == 0 ? 16 : warned_capacity * 2;
    warned = static_cast<Warned *>(
        warned == nullptr ? MemoryContextAlloc(TopMemoryContext, sizeof(Warned) * warned_capacity)
                          : repalloc(warned, sizeof(Warned) * warned_capacity));
  }
  warned[nwarned++] = Warned{dboid, now};
  return true;
}

DatabaseList ListDatabases(MemoryContext into) {
  DatabaseList list{nullptr, nullptr, nullptr, nullptr, nullptr, 0};
  StartTransactionCommand();
  (void)GetTransactionSnapshot();
  Relation rel = table_open(DatabaseRelationId, AccessShareLock);
  TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
  int capacity = 16;
  MemoryContext old = MemoryContextSwitchTo(into);
  list.oids = static_cast<Oid *>(palloc(sizeof(Oid) * capacity));
  list.names = static_cast<char **>(palloc(sizeof(char *) * capacity));
  list.owners = static_cast<Oid *>(palloc(sizeof(Oid) * capacity));
  list.trusted = static_cast<bool *>(palloc(sizeof(bool) * capacity));
  list.owner_names = static_cast<char **>(palloc(sizeof(char *) * capacity));
  MemoryContextSwitchTo(old);
  HeapTuple tup;
  while ((tup = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
    Form_pg_database db = reinterpret_cast<Form_pg_database>(GETSTRUCT(tup));
    if (!db->datallowconn || db->datistemplate) continue;
#ifdef DATCONNLIMIT_INVALID_DB
    // Left behind by an interrupted DROP DATABASE: nobody may connect to it.
    if (database_is_invalid_form(db)) continue;
#endif
    old = MemoryContextSwitchTo(into);
    if (list.count == capacity) {
      capacity *= 2;
      list.oids = static_cast<Oid *>(repalloc(list.oids, sizeof(Oid) * capacity));
      list.names = static_cast<char **>(repalloc(list.names, sizeof(char *) * capacity));
      list.owners = static_cast<Oid *>(repalloc(list.owners, sizeof(Oid) * capacity));
      list.trusted = static_cast<bool *>(repalloc(list.trusted, sizeof(bool) * capacity));
      list.owner_names =
          static_cast<char **>(repalloc(list.owner_names, sizeof(char *) * capacity));
    }
    list.oids[list.count] = db->oid;
    list.names[list.count] = pstrdup(NameStr(db->datname));
    list.owners[list.count] = db->datdba;
    list.trusted[list.count] = superuser_arg(db->datdba);
    const char *owner = GetUserNameFromId(db->datdba, true);
    list.owner_names[list.count] =
        pstrdup(owner != nullptr ? quote_identifier(owner) : "(a dropped role)");
    MemoryContextSwitchTo(old);
    list.count++;
  }
  table_endscan(scan);
  table_close(rel, AccessShareLock);
  CommitTransactionCommand();

  // capacity >= count, and at least 16: no allocation of zero bytes.
  MemoryContext sorted_in = MemoryContextSwitchTo(into);
  int *order = static_cast<int *>(palloc(sizeof(int) * capacity));
  for (int i = 0; i < list.count; ++i) order[i] = i;
  std::sort(order, order + list.count, [&list](int a, int b) {
    if (list.trusted[a] != list.trusted[b]) return list.trusted[a];
    return list.oids[a] < list.oids[b];
  });
  DatabaseList sorted = list;
  sorted.oids = static_cast<Oid *>(palloc(sizeof(Oid) * capacity));
  sorted.names = static_cast<char **>(palloc(sizeof(char *) * capacity));
  sorted.owners = static_cast<Oid *>(palloc(sizeof(Oid) * capacity));
  sorted.trusted = static_cast<bool *>(palloc(sizeof(bool) * capacity));
  sorted.owner_names = static_cast<char **>(palloc(sizeof(char *) * capacity));
  for (int i = 0; i < list.count; ++i) {
    sorted.owner_names[i] = list.owner_names[order[i]];
    sorted.oids[i] = list.oids[order[i]];
    sorted.names[i] = list.names[order[i]];
    sorted.owners[i] = list.owners[order[i]];
    sorted.trusted[i] = list.trusted[order[i]];
  }
  MemoryContextSwitchTo(sorted_in);
  return sorted;
}

int OwnersCount(const Oid *owners, int n, Oid owner) {
  int count = 0;
  for (int k = 0; k < n; ++k) count += owners[k] == owner;
  return count;
}

int IndexOf(const DatabaseList &dbs, Oid dboid) {
  for (int j = 0; j < dbs.count; ++j) {
    if (dbs.oids[j] == dboid) return j;
  }
  return -1;
}

void WarnCannotStart(Oid dboid, const char *datname, TimestampTz now, const char *why) {
  if (!ShouldWarn(dboid, now)) return;
  ereport(WARNING,
          (errmsg("outbox: cannot start a publisher for database \"%s\": %s", datname, why),
           errdetail("Its events wait as pending; publishing starts once a "
                     "background worker is free."),
           errhint("Raise max_worker_processes (now %d); every database with "
                   "the extension needs outbox.workers (%d) of them, plus one "
                   "for the launcher.",
                   max_worker_processes, guc::workers)));
}

void WarnOverLimit(Oid dboid, const char *datname, TimestampTz now) {
  if (!ShouldWarn(dboid, now)) return;
  ereport(WARNING,
          (errmsg("outbox: no publisher for database \"%s\": outbox.max_databases (%d) "
                  "databases have publishers already",
                  datname, guc::max_databases),
           errdetail("Its events wait as pending; publishing starts once another database's "
                     "publishers stop (DROP EXTENSION, DROP DATABASE) or the limit is raised."),
           errhint("Raise outbox.max_databases in postgresql.conf and reload.")));
}

void WarnOverOwnerLimit(Oid dboid, const char *datname, const char *owner, TimestampTz now) {
  if (!ShouldWarn(dboid, now)) return;
  ereport(WARNING,
          (errmsg("outbox: no publisher for database \"%s\": its owner %s has "
                  "outbox.max_databases_per_owner (%d) databases with publishers already",
                  datname, owner, guc::max_databases_per_owner),
           errdetail("Its events wait as pending; publishing starts once another of that "
                     "role's databases stops publishing or the limit is raised. Databases "
                     "superusers own are not counted."),
           errhint("Raise outbox.max_databases_per_owner in postgresql.conf and reload, or "
                   "give the database to another owner.")));
}

void WarnUnchecked(int at_limit, int at_owner_limit, TimestampTz now) {
  if (at_limit + at_owner_limit == 0 || now - unchecked_warned_at < kWarnIntervalMs * 1000L) {
    return;
  }
  unchecked_warned_at = now;
  if (at_limit > 0) {
    ereport(WARNING,
            (errmsg("outbox: %d database%s not checked for the extension: "
                    "outbox.max_databases (%d) databases have publishers already",
                    at_limit, at_limit == 1 ? "" : "s", guc::max_databases),
             errdetail("Any of them that has the extension gets no publisher; its events wait "
                       "as pending."),
             errhint("Raise outbox.max_databases in postgresql.conf and reload.")));
  }
  if (at_owner_limit > 0) {
    ereport(WARNING,
            (errmsg("outbox: %d database%s not checked for the extension: %s owner%s "
                    "outbox.max_databases_per_owner (%d) databases with publishers already",
                    at_owner_limit, at_owner_limit == 1 ? "" : "s",
                    at_owner_limit == 1 ? "its" : "their", at_owner_limit == 1 ? " has" : "s have",
                    guc::max_databases_per_owner),
             errdetail("Any of them that has the extension gets no publisher; its events wait "
                       "as pending. Databases superusers own are not counted."),
             errhint("Raise outbox.max_databases_per_owner in postgresql.conf and reload.")));
  }
}

}  // namespace outbox
