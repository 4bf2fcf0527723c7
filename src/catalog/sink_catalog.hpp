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
// Connect to SPI and refuse anyone but superusers and the extension owner
// (`action` names what was refused); then act as the owner of the SQL
// function called (outbox_writer: writer_role.cpp), as SECURITY DEFINER
// would, in a security-restricted operation, until FinishAsSinkAdmin
// (which also calls SPI_finish). An ERROR in between needs nothing: the
// (sub)transaction's abort switches back.
struct AdminScope {
  Oid caller;
  int caller_context;
  bool superuser;  // the caller is one (superuser() is the writer's answer meanwhile)
};
void ConnectAsSinkAdmin(FunctionCallInfo fcinfo, const char *action, AdminScope *scope);
void FinishAsSinkAdmin(const AdminScope &scope);
// Argument `argno`, which must not be NULL (ERROR 22023 naming `argname`).
text *RequireText(FunctionCallInfo fcinfo, int argno, const char *argname);
// Run a parameterised statement through SPI; returns rows processed.
uint64 RunCatalogStatement(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls,
                           bool read_only);

}  // namespace outbox
