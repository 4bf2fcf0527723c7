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
