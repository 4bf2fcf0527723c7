// Sinks and routes: outbox.create_sink, drop_sink, add_route, remove_route and
// route_for. The catalog tables (outbox.sinks, outbox.routes) are readable
// only by superusers and the extension owner because sink options hold
// secrets; these functions also refuse anyone else explicitly, so a careless
// GRANT EXECUTE cannot expose or change them.
//
// Every statement is parameterised: names, patterns and options never reach
// SQL text. Options are validated by PostgreSQL-free code (sink_options.cpp)
// through ValidateOptions below, the only place here that builds C++
// containers; it calls no PostgreSQL function and catches its own exceptions.
#include "pg_bridge.hpp"

#include <cstring>
#include <string_view>

#include "core/message_format.hpp"
#include "core/names.hpp"
#include "emit/payload_json.hpp"
#include "core/route_match.hpp"
#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"
#include "catalog/sink_catalog.hpp"
#include "sinks/sink_factory.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"
}

namespace outbox {
namespace {

enum class Validation { kValid, kInvalid, kInternal };

// PostgreSQL-free: builds the option list and validates it. Never throws,
// never calls PostgreSQL; its containers die before it returns.
constexpr int kMaxOptionErrorBytes = 400;

Validation ValidateOptions(std::string_view kind, const OptionView *raw, int n, bool privileged,
                           char *err, size_t errlen) noexcept {
  try {
    SinkOptions options;
    options.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      options.push_back(SinkOption{std::string(raw[i].key), raw[i].kind, std::string(raw[i].text),
                                   raw[i].from_environment});
    }
    const std::optional<std::string> error = ValidateSinkOptions(kind, options, privileged);
    if (!error) return Validation::kValid;
    strlcpy(err, error->c_str(), errlen);
    return Validation::kInvalid;
  } catch (const std::exception &e) {
    strlcpy(err, e.what(), errlen);
    return Validation::kInternal;
  }
}

// The route rules of a sink's kind (sink_factory.hpp) for `target` (may be
// absent) and `format`: kValid, or kInvalid with the reason in err. Never
// throws, never calls PostgreSQL.
Validation ValidateRoute(std::string_view kind, const std::string_view *target,
                         MessageFormat format, char *err, size_t errlen) noexcept {
  try {
    std::optional<std::string> error = CheckRouteFormat(kind, format);
    if (!error && target != nullptr) error = CheckRouteTarget(kind, *target);
    if (!error) return Validation::kValid;
    strlcpy(err, error->c_str(), errlen);
    return Validation::kInvalid;
  } catch (const std::exception &e) {
    strlcpy(err, e.what(), errlen);
    return Validation::kInternal;
  }
}

}  // namespace

// The owner of the SQL function being called.
static Oid FunctionOwner(FunctionCallInfo fcinfo) {
  HeapTuple proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
  if (!HeapTupleIsValid(proc)) {
    elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
  }
  const Oid owner = reinterpret_cast<Form_pg_proc>(GETSTRUCT(proc))->proowner;
  ReleaseSysCache(proc);
  return owner;
}

void ConnectAsSinkAdmin(FunctionCallInfo fcinfo, const char *action, AdminScope *scope) {
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  scope->superuser = superuser();
  if (!scope->superuser) {
    bool isnull = true;
    Datum owner = (Datum)0;
    if (SPI_execute("SELECT extowner FROM pg_catalog.pg_extension"
                    " WHERE extname OPERATOR(pg_catalog.=) 'outbox'",
                    true, 1) == SPI_OK_SELECT &&
        SPI_processed == 1) {
      owner = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    }
    if (isnull || !has_privs_of_role(GetUserId(), DatumGetObjectId(owner))) {
      ereport(ERROR,
              (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE), errmsg("permission denied to %s", action),
               errdetail("Only superusers and the owner of extension outbox manage sinks "
                         "and routes.")));
    }
  }
  GetUserIdAndSecContext(&scope->caller, &scope->caller_context);
  SetUserIdAndSecContext(FunctionOwner(fcinfo), scope->caller_context |
                                                    SECURITY_LOCAL_USERID_CHANGE |
                                                    SECURITY_RESTRICTED_OPERATION);
}

void FinishAsSinkAdmin(const AdminScope &scope) {
  SPI_finish();
  SetUserIdAndSecContext(scope.caller, scope.caller_context);
}

text *RequireText(FunctionCallInfo fcinfo, int argno, const char *argname) {
  if (PG_ARGISNULL(argno)) {
    ereport(ERROR,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s must not be NULL", argname)));
  }
  return PG_GETARG_TEXT_PP(argno);
}

namespace {

std::string_view View(text *t) { return std::string_view(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)); }

void CheckSinkName(text *name) {
  if (!IsValidSinkName(View(name))) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("invalid sink name %s", QuoteText(name)),
                    errdetail("A sink name is 1 to %d characters of [A-Za-z0-9._-].",
                              static_cast<int>(kMaxSinkNameLength))));
  }
}

}  // namespace

// Run a parameterised statement; returns rows processed.
uint64 RunCatalogStatement(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls,
                           bool read_only) {
  const int rc = SPI_execute_with_args(sql, nargs, types, values, nulls, read_only, 0);
  if (rc < 0) elog(ERROR, "outbox: catalog statement failed: %s", SPI_result_code_string(rc));
  return SPI_processed;
}

namespace {

// If `v` is {"env": "NAME"} (exactly that), fill *out from the server's
// environment (sink_options.hpp: IsSecretVariableName) and return true.
// Never reveals a value in its reasons; the variable is read again every
// time the options are (create_sink validates, publishers build sinks).
// Without `may_read` the environment is not looked at: every reference gets
// the same reason, so that whoever may not use one cannot learn from the
// errors which variables exist.
bool ReadSecretReference(const JsonbValue &v, bool may_read, OptionView *out) {
  if (v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data) ||
      JsonContainerSize(v.val.binary.data) != 1) {
    return false;
  }
  JsonbValue name;
  if (getKeyJsonValueFromContainer(v.val.binary.data, "env", 3, &name) == nullptr) return false;
  if (name.type != jbvString) return false;
  const std::string_view var(name.val.string.val, name.val.string.len);
  out->kind = SinkOption::Kind::kUnresolved;
  if (!may_read) {
    out->text = "names an environment variable: only a superuser may give values that way";
    return true;
  }
  if (!IsSecretVariableName(var)) {
    out->text = "names an environment variable outbox may not read (only OUTBOX_[A-Z0-9_]+)";
    return true;
  }
  const char *var_name = pnstrdup(var.data(), var.size());
  const char *value = getenv(var_name);
  if (value == nullptr) {
    out->text =
        psprintf("names environment variable %s, which the server's environment lacks", var_name);
    return true;
  }
  out->kind = SinkOption::Kind::kString;
  out->text = std::string_view(pstrdup(value), strlen(value));
  out->from_environment = true;
  return true;
}

}  // namespace

OptionView *FlattenSinkOptions(Jsonb *options, int *count, bool may_read_environment) {
  if (!JB_ROOT_IS_OBJECT(options) || JB_ROOT_IS_SCALAR(options)) {
    ereport(ERROR,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("options must be a JSON object")));
  }
  const int n = static_cast<int>(JB_ROOT_COUNT(options));
  OptionView *raw = static_cast<OptionView *>(palloc0(sizeof(OptionView) * (n + 1)));
  for (int j = 0; j < n; ++j) new (&raw[j]) OptionView();
  int i = 0;
  ForEachMember(options, [&](std::string_view key, const JsonbValue &v) {
    raw[i].key = std::string_view(pnstrdup(key.data(), key.size()), key.size());
    if (v.type == jbvString) {
      raw[i].kind = SinkOption::Kind::kString;
      raw[i].text =
          std::string_view(pnstrdup(v.val.string.val, v.val.string.len), v.val.string.len);
    } else if (v.type == jbvNumeric) {
      raw[i].kind = SinkOption::Kind::kNumber;
      raw[i].text =
          DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v.val.numeric)));
    } else if (!ReadSecretReference(v, may_read_environment, &raw[i])) {
      raw[i].kind = SinkOption::Kind::kOther;
      raw[i].text = "";
    }
    ++i;
  });
  *count = i;
  return raw;
}

}  // namespace outbox

using namespace outbox;

// The kinds added after 0.2.0 need the update's CHECK on outbox.sinks: with
// the new library and older SQL (before ALTER EXTENSION UPDATE) say so,
// rather than fail the INSERT on a check constraint. SPI is connected.
static void RequireCatalogForKind(std::string_view kind) {
  if (kind == "kafka" || kind == "redis") return;
  if (SPI_execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname "
                  "OPERATOR(pg_catalog.=) 'outbox'",
                  true, 1) != SPI_OK_SELECT ||
      SPI_processed != 1) {
    return;
  }
  const char *version = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
  if (version == nullptr || (strcmp(version, "0.1.0") != 0 && strcmp(version, "0.2.0") != 0)) {
    return;
  }
  ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                  errmsg("sinks of kind %.*s need extension outbox at version 0.3.0 or later",
                         static_cast<int>(kind.size()), kind.data()),
                  errdetail("The extension in this database is at version %s.", version),
                  errhint("Run ALTER EXTENSION outbox UPDATE.")));
}

// outbox.create_sink(name text, kind text, options jsonb)
// Its options may hold a password: its errors are logged without the call.
OUTBOX_SQL_FUNCTION_HIDING_STATEMENT(outbox_create_sink) {
  // Who may create sinks first, before any argument is looked at (and the
  // environment read for {"env": ...} values).
  AdminScope admin;
  ConnectAsSinkAdmin(fcinfo, "create sinks", &admin);
  text *name = RequireText(fcinfo, 0, "name");
  text *kind = RequireText(fcinfo, 1, "kind");
  CheckSinkName(name);
  const std::string_view kind_view = View(kind);
  if (!IsSinkKind(kind_view)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("invalid sink kind %s", QuoteText(kind)),
                    errhint("kind is %s.", SinkKindList())));
  }
  if (!SinkKindBuilt(kind_view)) {
    ereport(ERROR,
            (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
             errmsg("this build of outbox has no %s sink", text_to_cstring(kind)),
             errhint("Build outbox where pkg-config finds %s.", SinkKindLibrary(kind_view))));
  }
  RequireCatalogForKind(kind_view);
  if (PG_ARGISNULL(2)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("options must not be NULL"),
                    errhint("Use '{}' for no options.")));
  }
  Jsonb *options = PG_GETARG_JSONB_P(2);

  int n = 0;
  const bool privileged = admin.superuser;
  OptionView *raw = FlattenSinkOptions(options, &n, privileged);
  char err[1024];
  // Options that open files, fetch URLs or run Kerberos: a superuser's.
  const Validation result = ValidateOptions(kind_view, raw, n, privileged, err, sizeof err);
  // The validators quote keys and values into fixed buffers cut at a byte
  // count, possibly inside a character: end the message on a whole
  // character (and keep it short), or the client could not even decode it.
  err[pg_mbcliplen(err, static_cast<int>(strlen(err)), kMaxOptionErrorBytes)] = '\0';
  if (result == Validation::kInternal) elog(ERROR, "outbox: option validation failed: %s", err);
  if (result == Validation::kInvalid) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("invalid options for %s sink \"%s\": %s", text_to_cstring(kind),
                           text_to_cstring(name), err)));
  }

  Oid types[3] = {TEXTOID, TEXTOID, JSONBOID};
  Datum values[3] = {PointerGetDatum(name), PointerGetDatum(kind), PointerGetDatum(options)};
  if (RunCatalogStatement("INSERT INTO outbox.sinks (name, kind, options) VALUES ($1, $2, $3) "
                          "ON CONFLICT (name) DO NOTHING",
                          3, types, values, nullptr, false) == 0) {
    ereport(ERROR, (errcode(ERRCODE_DUPLICATE_OBJECT),
                    errmsg("sink \"%s\" already exists", text_to_cstring(name))));
  }
  ReloadConfigAtCommit();  // publishers pick the change up when it commits
  FinishAsSinkAdmin(admin);
  PG_RETURN_VOID();
}

// outbox.drop_sink(name text)
OUTBOX_SQL_FUNCTION(outbox_drop_sink) {
  AdminScope admin;
  ConnectAsSinkAdmin(fcinfo, "drop sinks", &admin);
  text *name = RequireText(fcinfo, 0, "name");
  Oid types[1] = {TEXTOID};
  Datum values[1] = {PointerGetDatum(name)};
  // Lock the sink row first so no route can be added to it meanwhile.
  if (RunCatalogStatement(
          "SELECT 1 FROM ONLY outbox.sinks WHERE name OPERATOR(pg_catalog.=) $1 FOR UPDATE", 1,
          types, values, nullptr, false) == 0) {
    ereport(ERROR,
            (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("sink %s does not exist", QuoteText(name))));
  }
  RunCatalogStatement(
      "SELECT pg_catalog.count(*) FROM ONLY outbox.routes WHERE sink OPERATOR(pg_catalog.=) $1", 1,
      types, values, nullptr, true);
  bool isnull = false;
  const int64 routes =
      DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
  if (routes > 0) {
    ereport(ERROR, (errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
                    errmsg("cannot drop sink \"%s\" because %lld route(s) use it",
                           text_to_cstring(name), static_cast<long long>(routes)),
                    errhint("Remove them first with outbox.remove_route().")));
  }
  RunCatalogStatement("DELETE FROM ONLY outbox.sinks WHERE name OPERATOR(pg_catalog.=) $1", 1,
                      types, values, nullptr, false);
  ReloadConfigAtCommit();  // publishers pick the change up when it commits
  FinishAsSinkAdmin(admin);
  PG_RETURN_VOID();
}

// outbox.add_route(pattern text, sink text, target text DEFAULT NULL)
OUTBOX_SQL_FUNCTION(outbox_add_route) {
  AdminScope admin;
  ConnectAsSinkAdmin(fcinfo, "add routes", &admin);
  text *pattern = RequireText(fcinfo, 0, "pattern");
  text *sink = RequireText(fcinfo, 1, "sink");
  if (!IsValidPattern(View(pattern))) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("invalid pattern %s", QuoteText(pattern)),
                    errdetail("A pattern is 1 to %d characters of [A-Za-z0-9._-] and '*', "
                              "which matches any run of characters.",
                              static_cast<int>(kMaxTopicLength))));
  }
  text *target = PG_ARGISNULL(2) ? nullptr : PG_GETARG_TEXT_PP(2);
  text *format = RequireText(fcinfo, 3, "format");
  const std::optional<MessageFormat> parsed_format = ParseMessageFormat(View(format));
  if (!parsed_format) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("invalid format %s", QuoteText(format)),
                    errdetail("A route's format is raw, cloudevents, debezium or "
                              "debezium-expanded.")));
  }

  Oid types[1] = {TEXTOID};
  Datum values[1] = {PointerGetDatum(sink)};
  // KEY SHARE keeps the sink from being dropped before we insert.
  if (RunCatalogStatement(
          "SELECT kind FROM ONLY outbox.sinks WHERE name OPERATOR(pg_catalog.=) $1 FOR KEY SHARE",
          1, types, values, nullptr, false) == 0) {
    ereport(ERROR,
            (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("sink %s does not exist", QuoteText(sink))));
  }
  const char *kind = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
  // The format first, then the target: each refusal names what it refuses.
  char err[512];
  Validation route = ValidateRoute(kind, nullptr, *parsed_format, err, sizeof err);
  if (route == Validation::kInvalid) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("invalid format %s for %s sink \"%s\"", QuoteText(format), kind,
                           text_to_cstring(sink)),
                    errdetail("%s", err)));
  }
  if (route == Validation::kValid && target != nullptr) {
    const std::string_view target_view = View(target);
    route = ValidateRoute(kind, &target_view, *parsed_format, err, sizeof err);
    if (route == Validation::kInvalid) {
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("invalid target %s for %s sink \"%s\"", QuoteText(target), kind,
                             text_to_cstring(sink)),
                      errdetail("%s", err)));
    }
  }
  if (route == Validation::kInternal) elog(ERROR, "outbox: route validation failed: %s", err);
  Oid insert_types[4] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID};
  Datum insert_values[4] = {PointerGetDatum(pattern), PointerGetDatum(sink),
                            target != nullptr ? PointerGetDatum(target) : (Datum)0,
                            PointerGetDatum(format)};
  const char nulls[4] = {' ', ' ', target != nullptr ? ' ' : 'n', ' '};
  if (RunCatalogStatement(
          "INSERT INTO outbox.routes (pattern, sink, target, format) VALUES ($1, $2, $3, $4) "
          "ON CONFLICT (pattern) DO NOTHING",
          4, insert_types, insert_values, nulls, false) == 0) {
    ereport(ERROR, (errcode(ERRCODE_DUPLICATE_OBJECT),
                    errmsg("a route for pattern \"%s\" already exists", text_to_cstring(pattern)),
                    errhint("Remove it first with outbox.remove_route().")));
  }
  ReloadConfigAtCommit();  // publishers pick the change up when it commits
  FinishAsSinkAdmin(admin);
  PG_RETURN_VOID();
}

// outbox.remove_route(pattern text)
OUTBOX_SQL_FUNCTION(outbox_remove_route) {
  AdminScope admin;
  ConnectAsSinkAdmin(fcinfo, "remove routes", &admin);
  text *pattern = RequireText(fcinfo, 0, "pattern");
  Oid types[1] = {TEXTOID};
  Datum values[1] = {PointerGetDatum(pattern)};
  if (RunCatalogStatement("DELETE FROM ONLY outbox.routes WHERE pattern OPERATOR(pg_catalog.=) $1",
                          1, types, values, nullptr, false) == 0) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("no route for pattern %s", QuoteText(pattern))));
  }
  ReloadConfigAtCommit();  // publishers pick the change up when it commits
  FinishAsSinkAdmin(admin);
  PG_RETURN_VOID();
}

// outbox.route_for(topic text) RETURNS TABLE (pattern, sink, target, format text):
// the route an event of this topic takes now (target resolved), or no row.
OUTBOX_SQL_FUNCTION(outbox_route_for) {
  text *topic = RequireText(fcinfo, 0, "topic");
  InitMaterializedSRF(fcinfo, 0);
  ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);

  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  RunCatalogStatement("SELECT pattern, sink, target, format FROM ONLY outbox.routes", 0, nullptr,
                      nullptr, nullptr, true);
  const int n = static_cast<int>(SPI_processed);
  // Copy out of SPI memory: the result must outlive SPI_finish.
  MemoryContext outer = rsinfo->econtext->ecxt_per_query_memory;
  MemoryContext spi = MemoryContextSwitchTo(outer);
  std::string_view *patterns =
      static_cast<std::string_view *>(palloc0(sizeof(std::string_view) * (n + 1)));
  char **sinks = static_cast<char **>(palloc0(sizeof(char *) * (n + 1)));
  char **targets = static_cast<char **>(palloc0(sizeof(char *) * (n + 1)));
  char **formats = static_cast<char **>(palloc0(sizeof(char *) * (n + 1)));
  for (int i = 0; i < n; ++i) {
    HeapTuple row = SPI_tuptable->vals[i];
    TupleDesc desc = SPI_tuptable->tupdesc;
    const char *p = SPI_getvalue(row, desc, 1);
    patterns[i] = std::string_view(pstrdup(p), strlen(p));
    sinks[i] = pstrdup(SPI_getvalue(row, desc, 2));
    const char *t = SPI_getvalue(row, desc, 3);
    targets[i] = t != nullptr ? pstrdup(t) : nullptr;
    formats[i] = pstrdup(SPI_getvalue(row, desc, 4));
  }
  MemoryContextSwitchTo(spi);
  SPI_finish();

  const int best = BestPatternIndex(patterns, static_cast<size_t>(n), View(topic));
  if (best >= 0) {
    Datum values[4] = {
        CStringGetTextDatum(patterns[best].data()), CStringGetTextDatum(sinks[best]),
        targets[best] != nullptr ? CStringGetTextDatum(targets[best]) : PointerGetDatum(topic),
        CStringGetTextDatum(formats[best])};
    bool nulls[4] = {false, false, false, false};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  return (Datum)0;
}

// outbox.best_pattern(topic text, patterns text[]) RETURNS text, STRICT: the
// pattern among `patterns` (NULL elements ignored) whose route events of
// `topic` take, by the publisher's precedence (route_match.hpp); NULL when
// none matches.
//
// Every role may call it, and matching a pattern costs up to its length
// times the topic's: only what can be a route's pattern or an event's topic
// (at most kMaxTopicLength bytes, as add_route() and emit() check) is
// matched, and a cancel is honoured between patterns, so no call runs
// longer than a moment per pattern or cannot be cancelled.
OUTBOX_SQL_FUNCTION(outbox_best_pattern) {
  text *topic = PG_GETARG_TEXT_PP(0);
  if (VARSIZE_ANY_EXHDR(topic) > kMaxTopicLength) PG_RETURN_NULL();
  ArrayType *array = PG_GETARG_ARRAYTYPE_P(1);
  Datum *elems = nullptr;
  bool *nulls = nullptr;
  int n = 0;
  deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
  // The winner so far against each next pattern: precedence is a total
  // order, so this picks what BestPatternIndex would over all of them.
  int best = -1;
  std::string_view pair[2];
  for (int i = 0; i < n; ++i) {
    CHECK_FOR_INTERRUPTS();
    if (nulls[i]) continue;
    text *t = DatumGetTextPP(elems[i]);
    if (VARSIZE_ANY_EXHDR(t) > kMaxTopicLength) continue;
    pair[1] = View(t);
    if (best < 0) {
      if (BestPatternIndex(&pair[1], 1, View(topic)) == 0) {
        best = i;
        pair[0] = pair[1];
      }
    } else if (BestPatternIndex(pair, 2, View(topic)) == 1) {
      best = i;
      pair[0] = pair[1];
    }
  }
  if (best < 0) PG_RETURN_NULL();
  PG_RETURN_DATUM(elems[best]);
}
