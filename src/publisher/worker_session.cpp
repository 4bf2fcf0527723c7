// Pinned settings of the workers' sessions (see worker_session.hpp).
#include "publisher/worker_session.hpp"

extern "C" {
#include "access/xact.h"
#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/namespace.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/rel.h"
}

namespace outbox {
namespace {

// The value a setting has when nothing set it (its boot value), as text.
const char *BootValue(struct config_generic *g, char *buf, size_t size) {
  switch (g->vartype) {
    case PGC_BOOL:
      return reinterpret_cast<struct config_bool *>(g)->boot_val ? "on" : "off";
    case PGC_INT:
      snprintf(buf, size, "%d", reinterpret_cast<struct config_int *>(g)->boot_val);
      return buf;
    case PGC_REAL:
      snprintf(buf, size, "%.17g", reinterpret_cast<struct config_real *>(g)->boot_val);
      return buf;
    case PGC_STRING: {
      const char *v = reinterpret_cast<struct config_string *>(g)->boot_val;
      return v != nullptr ? v : "";
    }
    case PGC_ENUM: {
      struct config_enum *e = reinterpret_cast<struct config_enum *>(g);
      return config_enum_lookup_by_value(e, e->boot_val);
    }
  }
  return nullptr;
}

}  // namespace

void DiscardDatabaseSettings() {
  // Some settings' checks look up the catalogs (session_authorization, role):
  // in a transaction of our own, as InitPostgres applied them in one.
  const bool own_transaction = !IsTransactionState();
  if (own_transaction) StartTransactionCommand();
  int n = 0;
  struct config_generic **vars = AllSettings(&n);
  for (int i = 0; i < n; ++i) {
    struct config_generic *g = vars[i];
    // Only the database's own settings (ALTER DATABASE ... SET) of settings
    // any user may set: those a database owner can choose. Superuser-only
    // settings there were set by a superuser, and the bootstrap superuser's
    // role settings only by a superuser too: both are kept.
    if (g->source != PGC_S_DATABASE || g->context != PGC_USERSET) continue;
    char buf[64];
    const char *value = BootValue(g, buf, sizeof buf);
    // session_authorization has no built-in value (NULL): the worker's
    // session user is the bootstrap superuser it connected as.
    if (strcmp(g->name, "session_authorization") == 0) {
      value = GetUserNameFromId(BOOTSTRAP_SUPERUSERID, false);
    }
    if (value == nullptr) continue;
    ereport(DEBUG1, (errmsg("outbox: ignoring the database's setting of %s", g->name)));
    (void)set_config_option(g->name, value, PGC_SUSET, PGC_S_OVERRIDE, GUC_ACTION_SET, true,
                            WARNING, false);
  }
  if (own_transaction) CommitTransactionCommand();
}

void PinWorkerSettings() {
  DiscardDatabaseSettings();
  static constexpr const char *kPinned[][2] = {
    {"search_path", "pg_catalog, pg_temp"},
    {"default_transaction_isolation", "read committed"},
    {"default_transaction_read_only", "off"},
    {"default_transaction_deferrable", "off"},
    {"statement_timeout", "0"},
    {"lock_timeout", "0"},
    {"idle_in_transaction_session_timeout", "0"},
#if PG_VERSION_NUM >= 170000
    {"transaction_timeout", "0"},
#endif
    {"session_replication_role", "origin"},
  };
  for (const auto &setting : kPinned) {
    SetConfigOption(setting[0], setting[1], PGC_SUSET, PGC_S_OVERRIDE);
  }
}

}  // namespace outbox
