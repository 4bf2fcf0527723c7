// COMMIT PREPARED: what the prepared transaction asked for at commit (wake
// the publishers, reload sinks and routes, announce CREATE EXTENSION) was
// lost when it prepared, since its session's commit callbacks never run for
// it. The session that runs COMMIT PREPARED does it instead, from the
// ProcessUtility hook (database_guard.cpp), for any prepared transaction in a
// database with the extension: it cannot know what the transaction did.
#pragma once

#include "pg_bridge.hpp"

namespace outbox {

// Before COMMIT PREPARED 'gid' runs: if it will commit (the transaction
// exists in this database, the caller may finish it, no transaction block)
// and the extension is here, tell the publishers now that sinks and routes
// may change: the prepared transaction's changes become visible before this
// session commits (see DatabaseSlot::config_version).
void BeforeCommitPrepared(const char *gid);

// After it ran without error: at this session's commit, announce the
// extension (it may have been created in that transaction), reload and wake
// the publishers, if the extension is here now.
void AfterCommitPrepared();

}  // namespace outbox
