// COMMIT PREPARED: what the prepared transaction asked for at commit (wake
// the publishers, reload sinks and routes, announce CREATE EXTENSION) cannot
// happen in its own session's commit callbacks, which never run for it. It
// records what it needs when it prepares (emit_horizon.hpp), and the session
// that runs COMMIT PREPARED does it, from the ProcessUtility hook
// (process_utility.cpp).
#pragma once

#include "pg_bridge.hpp"

namespace outbox {

// Before COMMIT PREPARED 'gid' runs: if it will commit (the transaction
// exists in this database, the caller may finish it, no transaction block),
// look up what it needs; if it changed sinks or routes (and the extension is
// here), tell the publishers now: its changes become visible before this
// session commits (see DatabaseSlot::config_version).
void BeforeCommitPrepared(const char *gid);

// It raised an error (or was cancelled): called from the hook's error path,
// before the error goes on; takes only a spinlock.
void CommitPreparedFailed();

// After it ran without error: at this session's commit, announce the
// extension if it created it (and the launcher does not know it), reload if
// it changed sinks or routes, wake the publishers if it emitted.
void AfterCommitPrepared();

}  // namespace outbox
