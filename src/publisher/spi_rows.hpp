// What the publisher's SQL code shares (claim.cpp, claim_rows.cpp,
// outcomes.cpp, configuration.cpp): plans kept for the life of the process,
// and text columns read as views.
//
// Memory: a kept plan lives until the process exits or SPI_freeplan; the
// strings TextColumn returns are palloc'd in the current memory context.
#pragma once

#include <cstring>
#include <string_view>

#include "pg_bridge.hpp"

extern "C" {
#include "executor/spi.h"
#include "utils/builtins.h"
}

namespace outbox {

// Prepare `sql` once for the process (SPI_keepplan). ERROR if it fails.
inline SPIPlanPtr KeepPlan(const char *sql, int nargs, const Oid *types, int cursor_options = 0) {
  SPIPlanPtr plan = SPI_prepare_cursor(sql, nargs, const_cast<Oid *>(types), cursor_options);
  if (plan == nullptr) elog(ERROR, "outbox: could not prepare: %s", sql);
  if (SPI_keepplan(plan) != 0) elog(ERROR, "outbox: could not keep plan: %s", sql);
  return plan;
}

inline std::string_view View(const char *s) { return std::string_view(s, strlen(s)); }

// A text column of an SPI row as a palloc'd C string; nullptr (and *isnull)
// for NULL.
inline const char *TextColumn(HeapTuple row, TupleDesc desc, int col, bool *isnull) {
  Datum d = SPI_getbinval(row, desc, col, isnull);
  return *isnull ? nullptr : TextDatumGetCString(d);
}

}  // namespace outbox
