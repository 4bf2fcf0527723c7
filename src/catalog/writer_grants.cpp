// What other roles hold on outbox's objects, taken away when the writer
// takes them over (writer_role.cpp: the install and update scripts' last
// step). Called by a superuser in the script's transaction, SPI connected;
// every statement is schema-qualified, operators included; no C++ object
// with a destructor (everything here may ereport).
#include "catalog/writer_grants.hpp"

extern "C" {
#include "executor/spi.h"
}

namespace outbox {
namespace {

constexpr const char *kWriter = "outbox_writer";

// Run each REVOKE statement `list_sql` returns, each said in a WARNING with
// `detail` (extension scripts run with client_min_messages at least
// WARNING, and the DBA should hear of it).
void RevokeEach(const char *list_sql, const char *detail) {
  if (SPI_execute(list_sql, false, 0) != SPI_OK_SELECT) elog(ERROR, "outbox: cannot list grants");
  SPITupleTable *revokes = SPI_tuptable;
  const uint64 count = SPI_processed;
  for (uint64 i = 0; i < count; ++i) {
    const char *statement = SPI_getvalue(revokes->vals[i], revokes->tupdesc, 1);
    ereport(WARNING, (errmsg("outbox: %s", statement), errdetail("%s", detail)));
    if (SPI_execute(statement, false, 0) != SPI_OK_UTILITY) {
      elog(ERROR, "outbox: cannot run: %s", statement);
    }
  }
}

// Take away what other roles were granted on outbox's tables (and on its
// views, all but SELECT): only the writer writes them, and outbox.sinks holds
// secrets. Grants on functions (EXECUTE on emit() for applications) stay.
void RevokeOthersTablePrivileges(Oid writer, const char *relations) {
  const char *sql = psprintf(
      "WITH rels AS (%s)"
      " SELECT DISTINCT pg_catalog.format('REVOKE %%s ON TABLE %%s FROM %%s',"
      " CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'v'"
      " THEN 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER' ELSE 'ALL' END,"
      " c.oid::pg_catalog.regclass,"
      " CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'"
      " ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END)"
      " FROM pg_catalog.pg_class c JOIN rels ON rels.oid OPERATOR(pg_catalog.=) c.oid,"
      " LATERAL pg_catalog.aclexplode(c.relacl) a"
      " WHERE a.grantee OPERATOR(pg_catalog.<>) %u::pg_catalog.oid"
      " AND NOT (c.relkind OPERATOR(pg_catalog.=) 'v'"
      " AND a.privilege_type OPERATOR(pg_catalog.=) 'SELECT')"
      " UNION"
      " SELECT pg_catalog.format('REVOKE ALL (%%I) ON TABLE %%s FROM %%s', t.attname,"
      " t.attrelid::pg_catalog.regclass,"
      " CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'"
      " ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END)"
      " FROM pg_catalog.pg_attribute t JOIN rels ON rels.oid OPERATOR(pg_catalog.=) t.attrelid,"
      " LATERAL pg_catalog.aclexplode(t.attacl) a"
      " WHERE a.grantee OPERATOR(pg_catalog.<>) %u::pg_catalog.oid"
      " ORDER BY 1",
      relations, writer, writer);
  RevokeEach(sql, psprintf("outbox's tables are written by %s alone; grant SELECT on the views "
                           "to roles that monitor.",
                           kWriter));
}

// Take away CREATE on schema outbox from every role but the writer (USAGE,
// which PUBLIC has and a DBA may have given to some roles only, stays). A
// role that could create in it could take the name
// of a day's partition before maintenance made it (its events then wait in
// events_default), or of a function a later update script creates.
void RevokeOthersSchemaPrivileges(Oid writer) {
  const char *sql = psprintf(
      "SELECT pg_catalog.format('REVOKE %%s ON SCHEMA outbox FROM %%s', a.privilege_type,"
      " CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'"
      " ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END)"
      " FROM pg_catalog.pg_namespace n, LATERAL pg_catalog.aclexplode(n.nspacl) a"
      " WHERE n.nspname OPERATOR(pg_catalog.=) 'outbox'"
      " AND a.grantee OPERATOR(pg_catalog.<>) %u::pg_catalog.oid"
      " AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'"
      " ORDER BY 1",
      writer);
  RevokeEach(sql, psprintf("Only %s creates in schema outbox.", kWriter));
}

}  // namespace

void RevokeOthersPrivileges(Oid writer, const char *relations) {
  RevokeOthersTablePrivileges(writer, relations);
  RevokeOthersSchemaPrivileges(writer);
}

}  // namespace outbox
