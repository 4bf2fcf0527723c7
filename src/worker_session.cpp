// Pinned settings of the workers' sessions (see worker_session.hpp).
#include "worker_session.hpp"

extern "C" {
#include "utils/guc.h"
}

namespace outbox {

void PinWorkerSettings() {
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
