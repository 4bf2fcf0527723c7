// outbox.hand_to_writer(): the install and update scripts' last step. It
// makes the role outbox_writer (or checks the one that exists), refuses while
// code anyone planted is on outbox's tables, and gives every table,
// partition, view, sequence, statistics object and function of outbox to
// that role.
//
// Why a role of its own: emit() writes its row as the owner of
// outbox.emit(), and the publishers run their statements as the owner of
// outbox.events (publisher/worker_session.hpp). With the installing
// superuser as that owner, any code that ran during those writes would run
// as a superuser. outbox_writer logs in never, is no superuser, has no
// members and is a member of nothing: what runs as it can change outbox's
// tables and nothing else. It is shared by every database (roles are) and
// outlives DROP EXTENSION.
//
// Invariants: called by a superuser (CREATE EXTENSION and ALTER EXTENSION
// UPDATE run as one: outbox is not a trusted extension), in the script's
// transaction; no C++ object with a destructor (everything here may
// ereport); SPI statements are schema-qualified, operators included.
#include "pg_bridge.hpp"

#include "catalog/writer_grants.hpp"
#include "emit/writer_code_rule.hpp"

#include <cstring>

extern "C" {
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/user.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
}

namespace outbox {
namespace {

constexpr const char *kWriter = "outbox_writer";

// The first row's first column of `sql` as text, or nullptr when it returns
// no row. Not read-only: it sees what the statements before it changed.
const char *FirstValue(const char *sql) {
  if (SPI_execute(sql, false, 1) != SPI_OK_SELECT) elog(ERROR, "outbox: cannot run: %s", sql);
  if (SPI_processed == 0) return nullptr;
  return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

[[noreturn]] void RefuseRole(const char *why) {
  ereport(ERROR,
          (errcode(ERRCODE_DUPLICATE_OBJECT),
           errmsg("role \"%s\" exists, and outbox cannot give its tables to it", kWriter),
           errdetail("%s.", why),
           errhint("outbox's tables belong to role %s, which must not log in, be a superuser, "
                   "have members or be a member, or own or hold anything outbox did not give "
                   "it: whoever can act as it can change every event. Drop the role, or take "
                   "away what it has (docs/security.md), and try again.",
                   kWriter)));
  pg_unreachable();
}

// Create outbox_writer, or refuse the one that exists when it is more than
// outbox makes: a login, a superuser or another attribute, a member, a
// membership, or anything it owns here or in the cluster's shared catalogs
// (in other databases, outbox's own tables belong to it).
void EnsureWriterRole() {
  const char *attributes = FirstValue(
      "SELECT pg_catalog.concat_ws(', ',"
      " CASE WHEN rolcanlogin THEN 'it can log in' END,"
      " CASE WHEN rolsuper THEN 'it is a superuser' END,"
      " CASE WHEN rolcreaterole THEN 'it can create roles' END,"
      " CASE WHEN rolcreatedb THEN 'it can create databases' END,"
      " CASE WHEN rolreplication THEN 'it can start replication' END,"
      " CASE WHEN rolbypassrls THEN 'it bypasses row security' END)"
      " FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'outbox_writer'");
  if (attributes == nullptr) {
    if (SPI_execute("CREATE ROLE outbox_writer NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
                    "NOINHERIT NOREPLICATION NOBYPASSRLS",
                    false, 0) != SPI_OK_UTILITY ||
        SPI_execute("COMMENT ON ROLE outbox_writer IS 'Owns outbox''s tables: emit() writes and "
                    "the publishers run as it (never logs in, never a superuser)'",
                    false, 0) != SPI_OK_UTILITY) {
      elog(ERROR, "outbox: cannot create role %s", kWriter);
    }
    // In the server log: extension scripts run with client_min_messages at
    // least WARNING.
    ereport(LOG, (errmsg("outbox: created role %s, which owns outbox's tables", kWriter),
                  errdetail("It is shared by every database and stays after DROP EXTENSION "
                            "(docs/security.md says how to drop it).")));
    return;
  }
  if (attributes[0] != '\0') RefuseRole(attributes);
  const char *membership = FirstValue(
      "SELECT pg_catalog.format('role %s is a member of it', m.member::pg_catalog.regrole)"
      " FROM pg_catalog.pg_auth_members m"
      " WHERE m.roleid OPERATOR(pg_catalog.=) 'outbox_writer'::pg_catalog.regrole"
      " UNION ALL"
      " SELECT pg_catalog.format('it is a member of role %s', m.roleid::pg_catalog.regrole)"
      " FROM pg_catalog.pg_auth_members m"
      " WHERE m.member OPERATOR(pg_catalog.=) 'outbox_writer'::pg_catalog.regrole");
  if (membership != nullptr) RefuseRole(membership);
  // Ownership only: a privilege another role grants it on an object of its
  // own opens only that object to it (and refusing those would let any role
  // that owns something block CREATE EXTENSION in the whole cluster).
  const char *holding = FirstValue(
      "SELECT pg_catalog.format('it owns %s',"
      " pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid))"
      " FROM pg_catalog.pg_shdepend d"
      " WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_authid'::pg_catalog.regclass"
      " AND d.refobjid OPERATOR(pg_catalog.=) 'outbox_writer'::pg_catalog.regrole"
      " AND d.deptype OPERATOR(pg_catalog.=) 'o'"
      " AND (d.dbid OPERATOR(pg_catalog.=) 0 OR d.dbid OPERATOR(pg_catalog.=)"
      " (SELECT oid FROM pg_catalog.pg_database"
      " WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database()))");
  if (holding != nullptr) RefuseRole(holding);
}

// outbox's relations: the extension's members and every partition below
// outbox.events (maintain() makes the day partitions outside the extension).
constexpr const char *kRelations =
    "SELECT d.objid AS oid FROM pg_catalog.pg_depend d"
    " JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid"
    " WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass"
    " AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
    " AND d.deptype OPERATOR(pg_catalog.=) 'e' AND e.extname OPERATOR(pg_catalog.=) 'outbox'"
    " UNION SELECT relid FROM pg_catalog.pg_partition_tree('outbox.events'::pg_catalog.regclass)";

// The functions that are members of extension outbox.
constexpr const char *kFunctions =
    "SELECT d.objid AS oid FROM pg_catalog.pg_depend d"
    " JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid"
    " WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass"
    " AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass"
    " AND d.deptype OPERATOR(pg_catalog.=) 'e' AND e.extname OPERATOR(pg_catalog.=) 'outbox'";

// The functions outbox makes, by signature (as regprocedure prints it) and
// language: the update scripts make the SQL and PL/pgSQL ones again before
// this runs; a C one must be outbox's symbol in outbox's library (only a
// superuser can make a C function, but its owner could have replaced it by
// one in another language).
// A C function's volatility, strictness and parallel safety are checked too:
// its owner could have made emit() STRICT (an event with a NULL key would be
// dropped without a word) or IMMUTABLE (folded at planning, written once for
// many calls, or never).
struct ExpectedFunction {
  const char *signature;
  const char *language;
  char volatility = 'v';  // pg_proc.provolatile
  bool strict = false;
  char parallel = 'u';  // pg_proc.proparallel
};
constexpr ExpectedFunction kExpectedFunctions[] = {
    {"outbox.add_route(text,text,text,text)", "c"},
    {"outbox.best_pattern(text,text[])", "c", 'i', true, 's'},
    {"outbox.count_changes()", "c"},
    {"outbox.create_sink(text,text,jsonb)", "c"},
    {"outbox.drop_sink(text)", "c"},
    {"outbox.emit(text,jsonb,text,jsonb)", "c"},
    {"outbox.hand_to_writer()", "c"},
    {"outbox.key_slot(text)", "c", 'i', true, 's'},
    {"outbox.maintain(timestamp with time zone)", "c"},
    {"outbox.pause(text)", "c"},
    {"outbox.prepare_partition(regclass)", "plpgsql"},
    {"outbox.publish_here()", "c"},
    {"outbox.publisher_preloaded()", "c", 's'},
    {"outbox.publisher_statements()", "c", 's'},
    {"outbox.recount()", "plpgsql"},
    {"outbox.remove_route(text)", "c"},
    {"outbox.replay(timestamp with time zone,text)", "c"},
    {"outbox.resume(text)", "c"},
    {"outbox.retry_dead(text)", "sql"},
    {"outbox.route_for(text)", "c", 's'},
    {"outbox.wakeup()", "c"},
    {"outbox.worker_stats()", "c"},
};

// The relations outbox makes in schema outbox, besides the partitions of
// outbox.events (any name), indexes and TOAST tables.
constexpr const char *kExpectedRelations =
    "'{events,events_default,counts,sinks,routes,home,stats,route_lag,partitions,workers}'";

// A function of schema outbox, or a member of the extension, that outbox
// does not make as it is now (nullptr: none).
const char *UnexpectedFunction() {
  if (SPI_execute(
          psprintf("SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text,"
                   " l.lanname::pg_catalog.text, p.prosecdef, p.proconfig::pg_catalog.text,"
                   " p.prosrc, p.probin, p.proname::pg_catalog.text,"
                   " p.provolatile::pg_catalog.text, p.proisstrict, p.proparallel::pg_catalog.text"
                   " FROM pg_catalog.pg_proc p"
                   " JOIN pg_catalog.pg_language l ON l.oid OPERATOR(pg_catalog.=) p.prolang"
                   " WHERE p.pronamespace OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace"
                   " OR p.oid OPERATOR(pg_catalog.=) ANY (%s)",
                   kFunctions),
          true, 0) != SPI_OK_SELECT) {
    elog(ERROR, "outbox: cannot list outbox's functions");
  }
  for (uint64 i = 0; i < SPI_processed; ++i) {
    HeapTuple row = SPI_tuptable->vals[i];
    TupleDesc desc = SPI_tuptable->tupdesc;
    const char *signature = SPI_getvalue(row, desc, 1);
    const char *language = SPI_getvalue(row, desc, 2);
    const char *secdef = SPI_getvalue(row, desc, 3);
    const char *config = SPI_getvalue(row, desc, 4);
    const char *src = SPI_getvalue(row, desc, 5);
    const char *bin = SPI_getvalue(row, desc, 6);
    const char *name = SPI_getvalue(row, desc, 7);
    const char *volatility = SPI_getvalue(row, desc, 8);
    const char *strict = SPI_getvalue(row, desc, 9);
    const char *parallel = SPI_getvalue(row, desc, 10);
    const ExpectedFunction *expected = nullptr;
    for (const ExpectedFunction &f : kExpectedFunctions) {
      if (strcmp(f.signature, signature) == 0) expected = &f;
    }
    if (expected == nullptr) return psprintf("function %s", signature);
    const bool is_emit = strcmp(signature, "outbox.emit(text,jsonb,text,jsonb)") == 0;
    const char *pinned = "{\"search_path=pg_catalog, pg_temp\"}";
    const bool config_ok =
        is_emit ? config == nullptr : config != nullptr && strcmp(config, pinned) == 0;
    bool ok = strcmp(language, expected->language) == 0 && strcmp(secdef, "f") == 0 && config_ok;
    if (ok && strcmp(expected->language, "c") == 0) {
      ok = src != nullptr && bin != nullptr &&
           (strcmp(bin, "outbox") == 0 || strcmp(bin, "$libdir/outbox") == 0) &&
           strcmp(src, psprintf("outbox_%s", name)) == 0;
    }
    if (!ok)
      return psprintf("function %s as it is now (its language, body or settings changed)",
                      signature);
    if (strcmp(expected->language, "c") == 0 &&
        (volatility[0] != expected->volatility || (strict[0] == 't') != expected->strict ||
         parallel[0] != expected->parallel)) {
      return psprintf(
          "function %s as it is now (its volatility, strictness or parallel safety changed)",
          signature);
    }
  }
  return nullptr;
}

void WatchNothing(Oid) {}

// The rule for code that runs when emit() writes (emit/writer_code_rule.hpp),
// on table `relid`: only built-in code, immutable (column defaults may also
// read the clocks), and only expression nodes that run no SQL text. Code
// that names what it runs only as text, which no dependency records (a CHECK
// calling query_to_xml('SELECT someones_function()', ...)), fails it. Its
// refusal is raised as the update's: 55000, naming the object.
void RefuseCodeOn(Oid relid) {
  Relation rel = table_open(relid, AccessShareLock);
  MemoryContext caller = CurrentMemoryContext;
  PG_TRY();
  { RefuseCodeNotBuiltIn(rel, WatchNothing); }
  PG_CATCH();
  {
    MemoryContextSwitchTo(caller);
    ErrorData *error = CopyErrorData();
    if (error->sqlerrcode != ERRCODE_INSUFFICIENT_PRIVILEGE) PG_RE_THROW();
    FlushErrorState();
    const char *what = RefusedCodeOf(error->message);
    if (what == nullptr) what = error->message;
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("outbox: %s, which outbox did not make", what),
             errdetail("%s Code on outbox's tables runs as role %s, or as whoever writes them; "
                       "this update runs as a superuser and gives nothing someone planted to "
                       "them.",
                       error->detail != nullptr ? error->detail : "", kWriter),
             errhint("Drop it (after checking who made it), then update again.")));
  }
  PG_END_TRY();
  table_close(rel, AccessShareLock);
}

// RefuseCodeOn over every table and partition of outbox's.
void RefuseCodeOnTables() {
  const char *sql = psprintf(
      "WITH rels AS (%s) SELECT c.oid FROM pg_catalog.pg_class c"
      " JOIN rels ON rels.oid OPERATOR(pg_catalog.=) c.oid"
      " WHERE c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,f}'::pg_catalog.\"char\"[])"
      " ORDER BY c.oid",
      kRelations);
  if (SPI_execute(sql, true, 0) != SPI_OK_SELECT) elog(ERROR, "outbox: cannot list tables");
  SPITupleTable *tables = SPI_tuptable;
  const uint64 count = SPI_processed;
  for (uint64 i = 0; i < count; ++i) {
    bool isnull = false;
    RefuseCodeOn(DatumGetObjectId(SPI_getbinval(tables->vals[i], tables->tupdesc, 1, &isnull)));
  }
}

// Refuse while anything outbox did not make could run as the writer, or as
// whoever uses outbox, once outbox's objects are the writer's: a trigger,
// rule, policy or row security on outbox's relations; a constraint, index,
// default or statistics object calling a function made by CREATE that is not
// outbox's (or any statistics on an expression); a column of a type made by
// CREATE; a table inheriting from one of outbox's that is not a partition
// of outbox.events; a function, relation, type, operator, collation or other
// object in schema outbox that outbox does not make; a member of the
// extension outside it. Whoever owned the tables until now (the extension's
// owner, not necessarily a superuser) could have made any of them.
void RefusePlantedCode() {
  const char *planted = FirstValue(psprintf(
      "WITH rels AS (%s), outbox_funcs AS (%s)"
      " SELECT pg_catalog.format('trigger %%I on %%s', t.tgname, t.tgrelid::pg_catalog.regclass)"
      " FROM pg_catalog.pg_trigger t JOIN rels ON rels.oid OPERATOR(pg_catalog.=) t.tgrelid"
      // Outbox's own: the four counting triggers, as prepare_partition()
      // and the install script make them (statement level, no WHEN, no
      // arguments, no columns); any other is someone's, even one calling
      // count_changes() with a WHEN clause of its own.
      " WHERE t.tgfoid OPERATOR(pg_catalog.<>) 'outbox.count_changes()'::pg_catalog.regprocedure"
      " OR t.tgname OPERATOR(pg_catalog.<>) ALL ('{events_count_insert,events_count_update,"
      "events_count_delete,events_count_truncate}'::pg_catalog.name[])"
      " OR t.tgqual IS NOT NULL OR t.tgnargs OPERATOR(pg_catalog.<>) 0"
      " OR t.tgattr OPERATOR(pg_catalog.<>) ''::pg_catalog.int2vector"
      " OR (t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.<>) 0"
      " UNION ALL"
      " SELECT pg_catalog.format('rule %%I on %%s', r.rulename, r.ev_class::pg_catalog.regclass)"
      " FROM pg_catalog.pg_rewrite r JOIN rels ON rels.oid OPERATOR(pg_catalog.=) r.ev_class"
      " WHERE r.rulename OPERATOR(pg_catalog.<>) '_RETURN'"
      " UNION ALL"
      " SELECT pg_catalog.format('policy %%I on %%s', p.polname, p.polrelid::pg_catalog.regclass)"
      " FROM pg_catalog.pg_policy p JOIN rels ON rels.oid OPERATOR(pg_catalog.=) p.polrelid"
      " UNION ALL"
      " SELECT pg_catalog.format('row level security on %%s', c.oid::pg_catalog.regclass)"
      " FROM pg_catalog.pg_class c JOIN rels ON rels.oid OPERATOR(pg_catalog.=) c.oid"
      " WHERE c.relrowsecurity OR c.relforcerowsecurity"
      // Outbox's tables and their columns, and the constraints, indexes,
      // defaults, statistics, triggers, rules and policies on them, that use
      // anything made by CREATE that is not outbox's: a function, an
      // operator, a type (a domain cast), a collation, an operator class, an
      // access method... (pg_depend records what each uses, whatever its
      // kind). Outbox's own: its relations and their row types, its
      // functions, the constraints and triggers on its relations
      // (partitions' copies depend on the parent's), schema outbox, the
      // extension itself.
      " UNION ALL"
      " SELECT pg_catalog.format('%%s using %%s',"
      " pg_catalog.pg_describe_object(d.classid, d.objid, 0),"
      " pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0))"
      " FROM pg_catalog.pg_depend d"
      " LEFT JOIN pg_catalog.pg_constraint c ON d.classid OPERATOR(pg_catalog.=)"
      " 'pg_catalog.pg_constraint'::pg_catalog.regclass AND c.oid OPERATOR(pg_catalog.=) d.objid"
      " LEFT JOIN pg_catalog.pg_index i ON d.classid OPERATOR(pg_catalog.=)"
      " 'pg_catalog.pg_class'::pg_catalog.regclass AND i.indexrelid OPERATOR(pg_catalog.=) d.objid"
      " LEFT JOIN pg_catalog.pg_attrdef a ON d.classid OPERATOR(pg_catalog.=)"
      " 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND a.oid OPERATOR(pg_catalog.=) d.objid"
      " LEFT JOIN pg_catalog.pg_statistic_ext s ON d.classid OPERATOR(pg_catalog.=)"
      " 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass AND s.oid OPERATOR(pg_catalog.=) d.objid"
      " LEFT JOIN pg_catalog.pg_trigger t ON d.classid OPERATOR(pg_catalog.=)"
      " 'pg_catalog.pg_trigger'::pg_catalog.regclass AND t.oid OPERATOR(pg_catalog.=) d.objid"
      " LEFT JOIN pg_catalog.pg_rewrite w ON d.classid OPERATOR(pg_catalog.=)"
      " 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND w.oid OPERATOR(pg_catalog.=) d.objid"
      " LEFT JOIN pg_catalog.pg_policy p ON d.classid OPERATOR(pg_catalog.=)"
      " 'pg_catalog.pg_policy'::pg_catalog.regclass AND p.oid OPERATOR(pg_catalog.=) d.objid"
      " JOIN rels ON rels.oid OPERATOR(pg_catalog.=)"
      " COALESCE(c.conrelid, i.indrelid, a.adrelid, s.stxrelid, t.tgrelid, w.ev_class, p.polrelid,"
      " CASE WHEN d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
      " THEN d.objid END)"
      " WHERE d.refobjid OPERATOR(pg_catalog.>=) 16384::pg_catalog.oid"
      " AND NOT (d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
      "  AND EXISTS (SELECT FROM pg_catalog.pg_class x WHERE x.oid OPERATOR(pg_catalog.=) "
      "d.refobjid"
      "   AND x.relnamespace OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace))"
      " AND NOT (d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass"
      "  AND d.refobjid OPERATOR(pg_catalog.=) ANY (SELECT oid FROM outbox_funcs))"
      " AND NOT (d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass"
      "  AND EXISTS (SELECT FROM pg_catalog.pg_type x WHERE x.oid OPERATOR(pg_catalog.=) d.refobjid"
      "   AND x.typnamespace OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace"
      "   AND x.typrelid OPERATOR(pg_catalog.<>) 0))"
      " AND NOT (d.refclassid OPERATOR(pg_catalog.=) "
      "'pg_catalog.pg_constraint'::pg_catalog.regclass"
      "  AND EXISTS (SELECT FROM pg_catalog.pg_constraint x JOIN rels"
      "   ON rels.oid OPERATOR(pg_catalog.=) x.conrelid"
      "   WHERE x.oid OPERATOR(pg_catalog.=) d.refobjid))"
      " AND NOT (d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass"
      "  AND EXISTS (SELECT FROM pg_catalog.pg_trigger x JOIN rels"
      "   ON rels.oid OPERATOR(pg_catalog.=) x.tgrelid"
      "   WHERE x.oid OPERATOR(pg_catalog.=) d.refobjid))"
      " AND NOT (d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass"
      "  AND d.refobjid OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace)"
      " AND NOT (d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass"
      "  AND d.refobjid OPERATOR(pg_catalog.=) (SELECT x.oid FROM pg_catalog.pg_extension x"
      "   WHERE x.extname OPERATOR(pg_catalog.=) 'outbox'))"
      " UNION ALL"
      " SELECT pg_catalog.format('statistics object %%I.%%I on an expression',"
      " s.stxnamespace::pg_catalog.regnamespace, s.stxname)"
      " FROM pg_catalog.pg_statistic_ext s JOIN rels ON rels.oid OPERATOR(pg_catalog.=) s.stxrelid"
      " WHERE s.stxexprs IS NOT NULL"
      " UNION ALL"
      " SELECT pg_catalog.format('column %%I of %%s, of type %%s', a.attname,"
      " a.attrelid::pg_catalog.regclass, a.atttypid::pg_catalog.regtype)"
      " FROM pg_catalog.pg_attribute a JOIN rels ON rels.oid OPERATOR(pg_catalog.=) a.attrelid"
      " WHERE a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped"
      " AND a.atttypid OPERATOR(pg_catalog.>=) 16384::pg_catalog.oid"
      " UNION ALL"
      " SELECT pg_catalog.format('table %%s inheriting from %%s', h.inhrelid::pg_catalog.regclass,"
      " h.inhparent::pg_catalog.regclass)"
      " FROM pg_catalog.pg_inherits h JOIN rels ON rels.oid OPERATOR(pg_catalog.=) h.inhparent"
      " WHERE h.inhrelid OPERATOR(pg_catalog.<>) ALL (SELECT relid FROM "
      "pg_catalog.pg_partition_tree("
      "'outbox.events'::pg_catalog.regclass))"
      " UNION ALL"
      " SELECT pg_catalog.format('%%s', c.oid::pg_catalog.regclass)"
      " FROM pg_catalog.pg_class c"
      " WHERE c.relnamespace OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace"
      " AND c.relkind OPERATOR(pg_catalog.<>) ALL ('{i,I,t}'::pg_catalog.\"char\"[])"
      " AND c.relname OPERATOR(pg_catalog.<>) ALL (%s::pg_catalog.name[])"
      " AND c.oid OPERATOR(pg_catalog.<>) ALL (SELECT relid FROM pg_catalog.pg_partition_tree("
      "'outbox.events'::pg_catalog.regclass))"
      " UNION ALL"
      " SELECT pg_catalog.format('type %%s', t.oid::pg_catalog.regtype) FROM pg_catalog.pg_type t"
      " WHERE t.typnamespace OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace"
      " AND t.typrelid OPERATOR(pg_catalog.=) 0 AND NOT EXISTS (SELECT FROM pg_catalog.pg_type r"
      " WHERE r.typarray OPERATOR(pg_catalog.=) t.oid AND r.typrelid OPERATOR(pg_catalog.<>) 0)"
      " UNION ALL"
      " SELECT pg_catalog.format('operator %%s', o.oid::pg_catalog.regoperator)"
      " FROM pg_catalog.pg_operator o"
      " WHERE o.oprnamespace OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace"
      " UNION ALL"
      " SELECT pg_catalog.format('collation %%s', o.oid::pg_catalog.regcollation)"
      " FROM pg_catalog.pg_collation o"
      " WHERE o.collnamespace OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace"
      " UNION ALL"
      " SELECT pg_catalog.format('%%s in extension outbox',"
      " pg_catalog.pg_describe_object(d.classid, d.objid, 0))"
      " FROM pg_catalog.pg_depend d"
      " JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid"
      " WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass"
      " AND d.deptype OPERATOR(pg_catalog.=) 'e' AND e.extname OPERATOR(pg_catalog.=) 'outbox'"
      " AND d.classid OPERATOR(pg_catalog.<>) ALL "
      "(ARRAY['pg_catalog.pg_class'::pg_catalog.regclass,"
      " 'pg_catalog.pg_proc'::pg_catalog.regclass, 'pg_catalog.pg_namespace'::pg_catalog.regclass,"
      " 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, "
      "'pg_catalog.pg_type'::pg_catalog.regclass])"
      " ORDER BY 1",
      kRelations, kFunctions, kExpectedRelations));
  if (planted == nullptr) RefuseCodeOnTables();
  if (planted == nullptr) planted = UnexpectedFunction();
  if (planted == nullptr) return;
  ereport(ERROR,
          (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
           errmsg("outbox: %s was not made by outbox", planted),
           errdetail("outbox's objects now belong to role %s, which would run it, or it would "
                     "run as whoever uses outbox; this update runs as a superuser and gives "
                     "nothing someone planted to them.",
                     kWriter),
           errhint("Drop it (after checking who made it), then update again.")));
}

// The functions PUBLIC may execute (they check their callers themselves, or
// read nothing), as the install script grants them.
constexpr const char *kPublicFunctions =
    "'{outbox.best_pattern(text,text[]),outbox.create_sink(text,text,jsonb),"
    "outbox.drop_sink(text),outbox.add_route(text,text,text,text),outbox.remove_route(text),"
    "outbox.pause(text),outbox.resume(text),outbox.replay(timestamp with time zone,text),"
    "outbox.publish_here()}'";

void Run(const char *sql, int expected) {
  if (SPI_execute(sql, false, 0) != expected) elog(ERROR, "outbox: cannot run: %s", sql);
}

// Give the schema and every relation, statistics object and function of
// outbox to the writer. The initial privileges pg_dump compares an
// extension's objects with (pg_init_privs) are then set to a fresh install's,
// naming only the writer and PUBLIC: PostgreSQL 15 leaves them naming the
// roles that owned the objects before (the installing superuser, or whoever
// REASSIGN OWNED gave them to), and a dump would REVOKE from and GRANT to
// roles a restore's cluster may not have, or GRANT those roles what they held.
void GiveToWriter() {
  const Oid writer = get_role_oid(kWriter, false);
  const char *sql = psprintf(
      "WITH rels AS (%s), funcs AS (%s)"
      " SELECT pg_catalog.format('ALTER %%s %%s OWNER TO outbox_writer',"
      " CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'S' THEN 'SEQUENCE'"
      " WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END, c.oid::pg_catalog.regclass)"
      " FROM pg_catalog.pg_class c JOIN rels ON rels.oid OPERATOR(pg_catalog.=) c.oid"
      " WHERE c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,v,S,m}'::pg_catalog.\"char\"[])"
      " UNION ALL"
      " SELECT pg_catalog.format('ALTER STATISTICS %%I.%%I OWNER TO outbox_writer',"
      " n.nspname, s.stxname)"
      " FROM pg_catalog.pg_statistic_ext s JOIN rels ON rels.oid OPERATOR(pg_catalog.=) s.stxrelid"
      " JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) s.stxnamespace"
      " UNION ALL"
      " SELECT pg_catalog.format('ALTER FUNCTION %%s OWNER TO outbox_writer',"
      " funcs.oid::pg_catalog.regprocedure) FROM funcs"
      " UNION ALL SELECT 'ALTER SCHEMA outbox OWNER TO outbox_writer'",
      kRelations, kFunctions);
  if (SPI_execute(sql, false, 0) != SPI_OK_SELECT) {
    elog(ERROR, "outbox: cannot list outbox's objects");
  }
  SPITupleTable *statements = SPI_tuptable;
  const uint64 count = SPI_processed;
  for (uint64 i = 0; i < count; ++i) {
    Run(SPI_getvalue(statements->vals[i], statements->tupdesc, 1), SPI_OK_UTILITY);
  }
  // Now that the writer owns them (ALTER ... OWNER moved the old owner's
  // privileges to it).
  RevokeOthersPrivileges(writer, kRelations);
  Run(psprintf(
          "WITH w AS (SELECT %u::pg_catalog.oid AS w)"
          " UPDATE pg_catalog.pg_init_privs i SET initprivs = CASE"
          " WHEN i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass"
          " THEN pg_catalog.array_append(pg_catalog.acldefault('n', w.w),"
          " pg_catalog.makeaclitem(0, w.w, 'USAGE', false))"
          " WHEN i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass"
          " THEN CASE WHEN i.objoid::pg_catalog.regprocedure::pg_catalog.text"
          " OPERATOR(pg_catalog.=) ANY (%s::pg_catalog.text[])"
          " THEN pg_catalog.acldefault('f', w.w)"
          " ELSE pg_catalog.array_remove(pg_catalog.acldefault('f', w.w),"
          " pg_catalog.makeaclitem(0, w.w, 'EXECUTE', false)) END"
          " WHEN c.relkind OPERATOR(pg_catalog.=) 'S' THEN pg_catalog.acldefault('s', w.w)"
          " ELSE pg_catalog.acldefault('r', w.w) END"
          " FROM w, pg_catalog.pg_depend d"
          " JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid"
          " LEFT JOIN pg_catalog.pg_class c ON d.classid OPERATOR(pg_catalog.=)"
          " 'pg_catalog.pg_class'::pg_catalog.regclass AND c.oid OPERATOR(pg_catalog.=) d.objid"
          " WHERE d.refclassid OPERATOR(pg_catalog.=) "
          "'pg_catalog.pg_extension'::pg_catalog.regclass"
          " AND d.deptype OPERATOR(pg_catalog.=) 'e' AND e.extname OPERATOR(pg_catalog.=) 'outbox'"
          " AND i.classoid OPERATOR(pg_catalog.=) d.classid"
          " AND i.objoid OPERATOR(pg_catalog.=) d.objid AND i.objsubid OPERATOR(pg_catalog.=) 0"
          " AND d.classid OPERATOR(pg_catalog.=) ANY (ARRAY["
          "'pg_catalog.pg_namespace'::pg_catalog.regclass, "
          "'pg_catalog.pg_proc'::pg_catalog.regclass,"
          " 'pg_catalog.pg_class'::pg_catalog.regclass])",
          writer, kPublicFunctions),
      SPI_OK_UPDATE);
  // Column-level initial privileges: outbox grants none.
  Run("DELETE FROM pg_catalog.pg_init_privs i USING pg_catalog.pg_depend d,"
      " pg_catalog.pg_extension e"
      " WHERE e.oid OPERATOR(pg_catalog.=) d.refobjid AND e.extname OPERATOR(pg_catalog.=) 'outbox'"
      " AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass"
      " AND d.deptype OPERATOR(pg_catalog.=) 'e'"
      " AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
      " AND i.classoid OPERATOR(pg_catalog.=) d.classid AND i.objoid OPERATOR(pg_catalog.=) d.objid"
      " AND i.objsubid OPERATOR(pg_catalog.<>) 0",
      SPI_OK_DELETE);
}

}  // namespace
}  // namespace outbox

using namespace outbox;

// outbox.refuse_code_on_routes(): the 0.1.0 update script's check before it
// rewrites rows of outbox.routes as the superuser who updates: the rule for
// code that runs when emit() writes, on that table (RefuseCodeOn).
OUTBOX_SQL_FUNCTION(outbox_refuse_code_on_routes) {
  if (!superuser()) {
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("only a superuser may check outbox.routes for an update")));
  }
  const Oid schema = get_namespace_oid("outbox", false);
  RefuseCodeOn(get_relname_relid("routes", schema));
  PG_RETURN_VOID();
}

OUTBOX_SQL_FUNCTION(outbox_hand_to_writer) {
  if (!superuser()) {
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("only a superuser may give outbox's tables to %s", kWriter)));
  }
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  EnsureWriterRole();
  RefusePlantedCode();
  GiveToWriter();
  SPI_finish();
  PG_RETURN_VOID();
}
