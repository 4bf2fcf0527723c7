-- outbox 0.1.0 -> 0.2.0. Never edit it once released.
-- Brings a 0.1.0 installation to what outbox--0.2.0.sql installs (the
-- regression test "extension" compares the two).

\echo Use "ALTER EXTENSION outbox UPDATE TO '0.2.0'" to load this file. \quit

-- The statements a publisher claims events with, as it prepares them: to
-- EXPLAIN them, and for the isolation tests, which run them from concurrent
-- sessions.
CREATE FUNCTION outbox.publisher_statements(OUT name text, OUT statement text)
RETURNS SETOF record
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_publisher_statements';
COMMENT ON FUNCTION outbox.publisher_statements() IS
    'The SQL of the publisher''s claim statements (parameters: see src/claim.cpp)';
REVOKE ALL ON FUNCTION outbox.publisher_statements() FROM PUBLIC;

-- pg_dump leaves out a member table's rows unless it is marked: the events
-- the default partition holds must be dumped.
SELECT pg_catalog.pg_extension_config_dump('outbox.events_default', '');
