// COMMIT PREPARED (see commit_prepared.hpp). Runs in the session that
// commits a prepared transaction, inside the transaction PostgreSQL runs the
// statement in. A refused statement (unknown gid, another user's transaction,
// inside a transaction block) changes nothing here: the checks below are
// PostgreSQL's own, made before it, and the rest happens only after it ran.
//
// What to do comes from the flags the transaction recorded when it prepared
// (emit_horizon.hpp): an empty prepared transaction, which any role may
// prepare and commit in a loop, makes the publishers do nothing. One the
// server does not know (prepared before it started) gets everything, and
// the publishers' claims start from the beginning once it committed.
#include "shmem/commit_prepared.hpp"

#include "shmem/emit_horizon.hpp"
#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"

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

constexpr uint32 kEverything = kPreparedEmitted | kPreparedReload | kPreparedAnnounce;
// Prepared before the server started: its events may lie anywhere below the
// claims' floors.
constexpr uint32 kPreparedUnknown = 8;

// What AfterCommitPrepared is to do: BeforeCommitPrepared's finding.
uint32 pending_flags = 0;
// The transaction BeforeCommitPrepared looked at (CommitPreparedFailed).
TransactionId pending_xid = InvalidTransactionId;

bool ExtensionHere() {
  InvalidateCatalogSnapshot();  // see what the prepared transaction committed
  return OidIsValid(get_extension_oid("outbox", true));
}

// The prepared transaction `gid` of this database, if the current user may
// finish it (its owner, or a superuser, as FinishPreparedTransaction
// requires); InvalidTransactionId otherwise.
TransactionId CommittableXid(const char *gid) {
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  Oid types[1] = {TEXTOID};
  Datum args[1] = {CStringGetTextDatum(gid)};
  const int rc = SPI_execute_with_args(
      "SELECT transaction FROM pg_catalog.pg_prepared_xacts"
      " WHERE gid OPERATOR(pg_catalog.=) $1"
      " AND database OPERATOR(pg_catalog.=) pg_catalog.current_database()"
      " AND (owner OPERATOR(pg_catalog.=) CURRENT_USER OR"
      " (SELECT rolsuper FROM pg_catalog.pg_roles"
      "   WHERE rolname OPERATOR(pg_catalog.=) CURRENT_USER))",
      1, types, args, nullptr, true, 1);
  TransactionId xid = InvalidTransactionId;
  if (rc == SPI_OK_SELECT && SPI_processed == 1) {
    bool isnull = false;
    const Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    if (!isnull) xid = DatumGetTransactionId(d);
  }
  SPI_finish();
  return xid;
}

}  // namespace

void BeforeCommitPrepared(const char *gid) {
  pending_flags = 0;
  pending_xid = InvalidTransactionId;
  if (Shared() == nullptr || gid == nullptr || IsTransactionBlock()) return;
  const TransactionId xid = CommittableXid(gid);
  if (!TransactionIdIsValid(xid)) return;  // it will be refused
  pending_xid = xid;
  uint32 flags = 0;
  const bool known = PreparedFlags(xid, &flags);
  // Before its events are visible: publishers that passed it look back (to
  // the beginning for one prepared before the server started).
  (void)NoteCommittingPrepared(xid);
  if (!known) flags = kEverything | kPreparedUnknown;
  pending_flags = flags;
  if ((flags & kPreparedReload) != 0 && ExtensionHere()) BumpConfigVersion(MyDatabaseId);
}

void CommitPreparedFailed() {
  NoteCommitPreparedFailed(pending_xid);
  pending_xid = InvalidTransactionId;
  pending_flags = 0;
}

void AfterCommitPrepared() {
  const uint32 flags = pending_flags;
  pending_flags = 0;
  pending_xid = InvalidTransactionId;
  if (flags == 0 || Shared() == nullptr || !ExtensionHere()) return;
  // It created the extension: announce it whatever state the launcher has
  // (a probe running now may be about to write "absent" over it; the
  // announcement's generation makes that write fail). Only a transaction
  // that ran CREATE EXTENSION, a superuser's, sets this flag: nobody can
  // bump the generation in a loop with empty prepared transactions.
  if ((flags & kPreparedAnnounce) != 0) AnnounceExtensionAtCommit();
  if ((flags & kPreparedReload) != 0) ReloadConfigAtCommit();
  if ((flags & (kPreparedEmitted | kPreparedReload)) != 0) WakePublishersAtCommit();
  if ((flags & kPreparedUnknown) != 0) ResetClaimFloorsAtCommit();
}

}  // namespace outbox
