// Sinks and routes as stored in outbox.sinks and outbox.routes, and what the
// SQL functions that manage them share.
#pragma once

#include "pg_bridge.hpp"
#include "sinks/sink_options.hpp"

extern "C" {
#include "utils/jsonb.h"
}

namespace outbox {

// The options object of a sink as views into palloc'd copies, in jsonb key
// order; numbers keep their text. ERROR 22023 unless `options` is an object.
// {"env": ...} values are read from the server's environment only when
// `may_read_environment` (a superuser's options); otherwise each is left
// unresolved with one reason, whatever it names.
OptionView *FlattenSinkOptions(Jsonb *options, int *count, bool may_read_environment);

// For the SQL functions that manage sinks and routes (sink_catalog.cpp,
// route_control.cpp):
// Connect to SPI (the caller calls SPI_finish) and refuse anyone but
// superusers and the extension owner; `action` names what was refused.
void ConnectAsSinkAdmin(const char *action);
// Argument `argno`, which must not be NULL (ERROR 22023 naming `argname`).
text *RequireText(FunctionCallInfo fcinfo, int argno, const char *argname);
// Run a parameterised statement through SPI; returns rows processed.
uint64 RunCatalogStatement(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls,
                           bool read_only);

}  // namespace outbox
