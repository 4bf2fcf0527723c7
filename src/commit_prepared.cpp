// COMMIT PREPARED (see commit_prepared.hpp). Runs in the session that
// commits a prepared transaction, inside the transaction PostgreSQL runs the
// statement in. A refused statement (unknown gid, another user's transaction,
// inside a transaction block) changes nothing here: the checks below are
// PostgreSQL's own, made before it, and the rest happens only after it ran.
#include "commit_prepared.hpp"

#include "shmem.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
}

namespace outbox {
namespace {

bool ExtensionHere() {
  InvalidateCatalogSnapshot();  // see what the prepared transaction committed
  return OidIsValid(get_extension_oid("outbox", true));
}

}  // namespace

void BeforeCommitPrepared(const char *gid) {
  if (Shared() == nullptr || gid == nullptr || IsTransactionBlock() || !ExtensionHere()) return;
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  Oid types[1] = {TEXTOID};
  Datum args[1] = {CStringGetTextDatum(gid)};
  // The transaction exists here, and the caller may finish it: its owner
  // (PostgreSQL compares role OIDs; the view shows names) or a superuser.
  const int rc = SPI_execute_with_args(
      "SELECT 1 FROM pg_catalog.pg_prepared_xacts"
      " WHERE gid OPERATOR(pg_catalog.=) $1"
      " AND database OPERATOR(pg_catalog.=) pg_catalog.current_database()"
      " AND (owner OPERATOR(pg_catalog.=) CURRENT_USER OR"
      " (SELECT rolsuper FROM pg_catalog.pg_roles"
      "   WHERE rolname OPERATOR(pg_catalog.=) CURRENT_USER))",
      1, types, args, nullptr, true, 1);
  const bool will_commit = rc == SPI_OK_SELECT && SPI_processed == 1;
  SPI_finish();
  if (will_commit) BumpConfigVersion(MyDatabaseId);
}

void AfterCommitPrepared() {
  if (Shared() == nullptr || !ExtensionHere()) return;
  AnnounceExtensionAtCommit();
  ReloadConfigAtCommit();
  WakePublishersAtCommit();
}

}  // namespace outbox
