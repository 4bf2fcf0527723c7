// The one place where C++ meets PostgreSQL.
//
// PostgreSQL reports errors with ereport(ERROR), which longjmps to the nearest
// PG_TRY or to the top of the backend loop. C++ reports errors with exceptions,
// which unwind and run destructors. Mixing them wrongly corrupts memory or
// leaks, so outbox keeps to two rules:
//
//  1. No C++ exception ever leaves a function PostgreSQL calls. Every
//     SQL-callable function is defined with OUTBOX_SQL_FUNCTION, whose shim
//     catches any exception and turns it into ereport(ERROR) with a SQLSTATE
//     (outbox::SqlError carries one; anything else is XX000 internal_error).
//     The ereport happens after the catch block has ended, when every C++
//     object created inside the function has been destroyed.
//  2. No ereport(ERROR) ever jumps over a live C++ object with a non-trivial
//     destructor. Code that calls PostgreSQL functions (anything that may
//     ereport) holds only trivially destructible values: palloc'd memory,
//     PostgreSQL structs, string_views, plain scalars. C++ containers live
//     only in PostgreSQL-free code (names, routes, options, calendar), which
//     returns results instead of raising, and such containers are dead before
//     the caller goes back to PostgreSQL functions.
//
// Broker code (sinks) includes no PostgreSQL header at all.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "utils/elog.h"
}

#include "pg_compat.hpp"

namespace outbox {

// An error meant for the SQL user: a SQLSTATE, a message and an optional hint.
class SqlError : public std::runtime_error {
 public:
  SqlError(int sqlstate, const std::string &message, std::string hint = std::string())
      : std::runtime_error(message), sqlstate_(sqlstate), hint_(std::move(hint)) {}
  int sqlstate() const { return sqlstate_; }
  const std::string &hint() const { return hint_; }

 private:
  int sqlstate_;
  std::string hint_;
};

// Raised for bad arguments: SQLSTATE 22023 invalid_parameter_value.
inline SqlError InvalidParameter(const std::string &message, std::string hint = std::string()) {
  return SqlError(ERRCODE_INVALID_PARAMETER_VALUE, message, std::move(hint));
}

// A user-supplied value for an error message: double-quoted, cut to its first
// 64 bytes on a character boundary ("..." marks the cut). palloc'd.
const char *QuoteValue(const char *value, int len);
const char *QuoteText(const text *value);

namespace bridge {

// Storage for an exception's text while the shim leaves the catch block.
struct CaughtError {
  int sqlstate = 0;
  char message[1024];
  char hint[512];
};

// Record the exception being handled (call only inside a catch block).
void Capture(CaughtError *out) noexcept;

// Raise the captured error as ereport(ERROR). Never returns.
[[noreturn]] void Raise(const CaughtError &error);

// An error context callback that marks the error being reported as one whose
// statement is not logged (see OUTBOX_SQL_FUNCTION_HIDING_STATEMENT).
void HideStatement(void *arg);

// Run f and report whether it returned normally; an exception it threw is
// captured into *error (the catch block ends before this returns).
template <typename F>
bool Guard(F &f, CaughtError *error) noexcept {
  try {
    f();
    return true;
  } catch (...) {
    Capture(error);
    return false;
  }
}

}  // namespace bridge

// The exception boundary for a C++ call made from PostgreSQL-facing code
// (the workers' loops): run f, which must call nothing that can ereport,
// and turn an exception it throws into ereport(ERROR) once every object f
// created is gone. The caller's error recovery then handles it like any
// other ERROR.
template <typename F>
void CallCpp(F &&f) {
  bridge::CaughtError error;
  if (!bridge::Guard(f, &error)) bridge::Raise(error);
}

}  // namespace outbox

// Define an SQL-callable function `name` (declared in the SQL script as
// LANGUAGE C with AS 'MODULE_PATHNAME', 'name'). The body follows the macro
// and receives `fcinfo`, exactly like a PG_FUNCTION_ARGS function.
#define OUTBOX_SQL_FUNCTION(name) OUTBOX_SQL_FUNCTION_IMPL(name, false)

// The same, for a function whose arguments may hold a secret (a sink's
// password): every error raised while it runs, its own and those of the
// statements it runs, is logged without the statement (errhidestmt), so
// log_min_error_statement never writes the call's arguments to the server
// log.
#define OUTBOX_SQL_FUNCTION_HIDING_STATEMENT(name) OUTBOX_SQL_FUNCTION_IMPL(name, true)

// The callback lives in the outer frame, which outlives the body and Raise;
// it is taken off the stack on a normal return (an ERROR's recovery resets
// error_context_stack itself).
#define OUTBOX_SQL_FUNCTION_IMPL(name, hide)                                                   \
  static Datum name##_body(FunctionCallInfo fcinfo);                                           \
  extern "C" {                                                                                 \
  PG_FUNCTION_INFO_V1(name);                                                                   \
  }                                                                                            \
  extern "C" Datum name(PG_FUNCTION_ARGS) {                                                    \
    ErrorContextCallback hide_statement = {error_context_stack, outbox::bridge::HideStatement, \
                                           nullptr};                                           \
    if (hide) error_context_stack = &hide_statement;                                           \
    outbox::bridge::CaughtError caught_error;                                                  \
    try {                                                                                      \
      const Datum result = name##_body(fcinfo);                                                \
      if (hide) error_context_stack = hide_statement.previous;                                 \
      return result;                                                                           \
    } catch (...) {                                                                            \
      outbox::bridge::Capture(&caught_error);                                                  \
    }                                                                                          \
    outbox::bridge::Raise(caught_error);                                                       \
  }                                                                                            \
  static Datum name##_body(FunctionCallInfo fcinfo)
