-- outbox 0.2.0 -> 0.3.0. Never edit it once released.
-- Brings a 0.2.0 installation to what outbox--0.3.0.sql installs (the
-- regression test "extension" compares the two). DDL only: no statement
-- here reads or writes a row of outbox's tables, so no trigger or rule
-- anyone planted on them runs as the superuser who updates.

\echo Use "ALTER EXTENSION outbox UPDATE TO '0.3.0'" to load this file. \quit

-- outbox.routes.sink no longer references outbox.sinks: pg_restore -j loads
-- the rows of both tables in parallel, in either order, and a route whose
-- sink was not restored yet failed the restore. The foreign key's name is
-- PostgreSQL's default one, the same whether 0.2.0 was installed or
-- updated from 0.1.0.
ALTER TABLE outbox.routes DROP CONSTRAINT routes_sink_fkey;

-- 0.3.0: outbox.home and outbox.publish_here(). The INSERT writes a table
-- made just above: nobody could have put code on it.
-- Which database these tables belong to (src/database_home.hpp). CREATE
-- DATABASE ... TEMPLATE copies them, pending events included; a copy's
-- publisher finds another database's OID here and publishes nothing (the
-- template's publishers deliver those events) until outbox.publish_here()
-- is called in it. Not dumped: a restore runs CREATE EXTENSION, which
-- writes the database it restores into.
CREATE TABLE outbox.home (
    database oid         NOT NULL,
    since    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.home IS
    'The database outbox publishes these events from (a copy publishes nothing until publish_here())';
INSERT INTO outbox.home (database)
SELECT oid FROM pg_catalog.pg_database
 WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database();
REVOKE ALL ON outbox.home FROM PUBLIC;

CREATE FUNCTION outbox.publish_here()
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_publish_here';
COMMENT ON FUNCTION outbox.publish_here() IS
    'In a copy of another database (CREATE DATABASE ... TEMPLATE): publish its events from here';
REVOKE ALL ON FUNCTION outbox.publish_here() FROM PUBLIC;
