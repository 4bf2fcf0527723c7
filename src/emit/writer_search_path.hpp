// The search_path emit()'s write pins wherever a name could be resolved
// (event_insert.hpp says where): as SECURITY DEFINER ... SET search_path =
// pg_catalog, pg_temp would have it, without its cost.
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "utils/guc.h"
}

namespace outbox {

// search_path as SECURITY DEFINER ... SET search_path = pg_catalog, pg_temp
// would have it, until UnpinSearchPath(the returned level). An error in
// between needs nothing: the (sub)transaction's abort unwinds the level.
inline int PinSearchPath() {
  const int level = NewGUCNestLevel();
  (void)set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
                          GUC_ACTION_SAVE, true, 0, false);
  return level;
}

// false: a SET (LOCAL or not) by code run as the writer (a trigger of the
// owner's) is undone too, as REFRESH MATERIALIZED VIEW undoes it.
inline void UnpinSearchPath(int level) { AtEOXact_GUC(false, level); }

}  // namespace outbox
