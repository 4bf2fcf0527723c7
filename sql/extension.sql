-- The extension as a package: versions, members, pinned search_path,
-- SECURITY DEFINER only where needed, settings, and a clean drop/recreate.

SELECT extversion FROM pg_extension WHERE extname = 'outbox';
SELECT default_version FROM pg_available_extensions WHERE name = 'outbox';
SELECT version FROM pg_available_extension_versions WHERE name = 'outbox' ORDER BY version;
-- Every earlier version updates to the current one, 0.1.0 in one step
-- (outbox--0.1.0--0.2.0.sql, as released, is not installed: its UPDATE of
-- outbox.routes had no check for planted code).
SELECT source, target, path FROM pg_extension_update_paths('outbox')
 WHERE target = (SELECT default_version FROM pg_available_extensions WHERE name = 'outbox')
   AND source < target ORDER BY source;

-- Every function pins search_path, but emit(), which pins it itself where
-- it could resolve a name (src/emit/event_insert.hpp: the server's pin costs
-- about half of an emit() statement).
SELECT p.oid::regprocedure AS unpinned
  FROM pg_proc p
 WHERE p.pronamespace = 'outbox'::regnamespace
   AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%');
-- No function is SECURITY DEFINER: emit() switches to its owner itself, for
-- its insert only.
SELECT p.oid::regprocedure AS security_definer
  FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace AND p.prosecdef;
-- No function is executable by PUBLIC but best_pattern(), which reads no
-- table (outbox.route_lag calls it), and those that check their caller
-- themselves (sinks, routes and their controls: superusers and the
-- extension owner only): emit() is granted to roles explicitly.
SELECT p.oid::regprocedure AS public_executable
  FROM pg_proc p
 WHERE p.pronamespace = 'outbox'::regnamespace
   AND has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY p.oid::regprocedure::text;

-- The objects the extension owns (partitions are data, not members). From 17
-- on, the row and array types a table brings are listed as members too: they
-- are left out, so the list is the same on every major.
SELECT pg_describe_object(classid, objid, objsubid) AS member
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
   AND deptype = 'e'
   AND NOT EXISTS (SELECT FROM pg_type t
                    WHERE classid = 'pg_type'::regclass AND t.oid = objid
                      AND (t.typrelid <> 0 OR t.typcategory = 'A'))
 ORDER BY 1;

-- The settings, with their defaults (outbox.workers exists only when the
-- library is preloaded, which this server does not do).
LOAD 'outbox';
SELECT name, setting, unit, context FROM pg_settings
 WHERE name LIKE 'outbox.%' ORDER BY name;

-- DROP EXTENSION removes every table, partition included, and the schema
-- (the install script creates it); CREATE brings them back.
DROP EXTENSION outbox;
SELECT count(*) AS outbox_schemas_left FROM pg_namespace WHERE nspname = 'outbox';
-- A schema outbox someone else created first is never taken over (its
-- owner could plant functions the install script calls, or drop partitions
-- holding pending events later).
CREATE ROLE regress_outbox_squatter;
CREATE SCHEMA outbox AUTHORIZATION regress_outbox_squatter;
CREATE FUNCTION outbox.prepare_partition(text) RETURNS void LANGUAGE sql AS 'SELECT';
SELECT error_of('CREATE EXTENSION outbox');
DROP SCHEMA outbox CASCADE;
DROP ROLE regress_outbox_squatter;
CREATE EXTENSION outbox;
SELECT count(*) AS partitions FROM outbox.partitions;
SELECT count(*) AS events FROM outbox.events;

-- An installation updated from each earlier release is the same as a fresh
-- install of the current one: members, definitions, comments, privileges.
CREATE FUNCTION pg_temp.outbox_shape() RETURNS TABLE (object text, definition text)
LANGUAGE sql AS $$
  SELECT pg_describe_object(d.classid, d.objid, d.objsubid),
         concat_ws(' | ',
           CASE WHEN d.classid = 'pg_proc'::regclass
                THEN pg_get_functiondef(d.objid) || ' acl=' || coalesce(
                       (SELECT proacl::text FROM pg_proc WHERE oid = d.objid), '') END,
           CASE WHEN d.classid = 'pg_class'::regclass THEN (
             SELECT concat_ws(' ; ', c.relkind::text, c.relacl::text,
                      (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                                         || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
                                         || coalesce(' default ' || pg_get_expr(ad.adbin, ad.adrelid), ''),
                                         ', ' ORDER BY a.attnum)
                         FROM pg_attribute a
                         LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
                      (SELECT string_agg(conname || ' ' || pg_get_constraintdef(oid), ', ' ORDER BY conname)
                         FROM pg_constraint WHERE conrelid = c.oid),
                      (SELECT string_agg(pg_get_indexdef(indexrelid), ', ' ORDER BY indexrelid::regclass::text)
                         FROM pg_index WHERE indrelid = c.oid),
                      (SELECT string_agg(pg_get_triggerdef(t.oid), ', ' ORDER BY t.tgname)
                         FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal),
                      CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END)
               FROM pg_class c WHERE c.oid = d.objid) END,
           obj_description(d.objid, d.classid::regclass::name))
    FROM pg_depend d
   WHERE d.refclassid = 'pg_extension'::regclass
     AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
     AND d.deptype = 'e'
$$;
CREATE TEMP TABLE fresh_shape AS SELECT * FROM pg_temp.outbox_shape();
SELECT count(*) > 0 AS has_members FROM fresh_shape;
SELECT pg_catalog.array_agg(c::regclass::text ORDER BY c::regclass::text) AS dumped_members
  FROM pg_extension, pg_catalog.unnest(extconfig) c WHERE extname = 'outbox';
DROP EXTENSION outbox;
CREATE EXTENSION outbox VERSION '0.1.0';
-- 0.1.0's debezium sent the payload as JSON: the update keeps that shape for
-- such routes (debezium-expanded); the others keep their format.
SELECT outbox.create_sink('r', 'redis', '{"port": 6379}');
SELECT outbox.add_route('a.*', 'r', 'a', format => 'debezium');
SELECT outbox.add_route('b.*', 'r', 'b', format => 'cloudevents');
ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
SELECT pattern, format FROM outbox.routes ORDER BY pattern;
SELECT outbox.remove_route('a.*');
SELECT outbox.remove_route('b.*');
SELECT outbox.drop_sink('r');
-- What pg_dump dumps the rows of, among the members: the same as a fresh
-- install's (the events of the default partition included).
SELECT pg_catalog.array_agg(c::regclass::text ORDER BY c::regclass::text) AS dumped_members
  FROM pg_extension, pg_catalog.unnest(extconfig) c WHERE extname = 'outbox';
CREATE TEMP TABLE updated_shape AS SELECT * FROM pg_temp.outbox_shape();
SELECT 'only after the update' AS side, * FROM (TABLE updated_shape EXCEPT TABLE fresh_shape) u
UNION ALL
SELECT 'only in a fresh install', * FROM (TABLE fresh_shape EXCEPT TABLE updated_shape) f;
-- The extension is recorded where a fresh install records it, and depends on
-- no schema (so pg_dump writes a plain CREATE EXTENSION outbox, as for a
-- fresh install, and DROP EXTENSION takes the schema with it).
SELECT extnamespace::regnamespace AS recorded_in FROM pg_extension WHERE extname = 'outbox';
SELECT count(*) AS schema_dependencies FROM pg_depend
 WHERE classid = 'pg_extension'::regclass
   AND objid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
   AND refclassid = 'pg_namespace'::regclass;
DROP EXTENSION outbox;
SELECT count(*) AS outbox_schemas_left FROM pg_namespace WHERE nspname = 'outbox';
-- The same from 0.2.0.
CREATE EXTENSION outbox VERSION '0.2.0';
ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
CREATE TEMP TABLE updated_from_0_2_0 AS SELECT * FROM pg_temp.outbox_shape();
SELECT 'only after the update' AS side, * FROM (TABLE updated_from_0_2_0 EXCEPT TABLE fresh_shape) u
UNION ALL
SELECT 'only in a fresh install', * FROM (TABLE fresh_shape EXCEPT TABLE updated_from_0_2_0) f;
DROP EXTENSION outbox;

-- Privileges on the schema changed under 0.1.0 survive the update, and a
-- dump writes them: the schema's initial privileges, from which pg_dump
-- writes the difference, are a fresh install's (USAGE for PUBLIC).
CREATE ROLE regress_outbox_reader;
CREATE EXTENSION outbox VERSION '0.1.0';
REVOKE USAGE ON SCHEMA outbox FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO regress_outbox_reader;
ALTER EXTENSION outbox UPDATE;
SELECT has_schema_privilege('public', 'outbox', 'USAGE') AS public_usage,
       has_schema_privilege('regress_outbox_reader', 'outbox', 'USAGE') AS reader_usage;
SELECT i.initprivs = array_append(acldefault('n', n.nspowner), makeaclitem(0, n.nspowner, 'USAGE', false))
       AS initial_privileges_as_fresh
  FROM pg_init_privs i JOIN pg_namespace n ON n.oid = i.objoid
 WHERE n.nspname = 'outbox' AND i.classoid = 'pg_namespace'::regclass;
DROP EXTENSION outbox;
DROP ROLE regress_outbox_reader;

-- 0.1.0 took over a schema outbox someone else had made; the update, which
-- makes the schema the extension's, refuses one whose owner, or the owner of
-- anything in it, is neither the extension's owner nor a superuser (the
-- squatter could plant a function the update's statements or the views
-- would run as a superuser).
CREATE ROLE regress_outbox_squatter;
CREATE SCHEMA outbox AUTHORIZATION regress_outbox_squatter;
CREATE EXTENSION outbox VERSION '0.1.0';
SELECT error_of('ALTER EXTENSION outbox UPDATE');
ALTER SCHEMA outbox OWNER TO CURRENT_USER;
SET ROLE regress_outbox_squatter;
SELECT error_of($$CREATE FUNCTION outbox.count(text) RETURNS bigint LANGUAGE sql AS 'SELECT 0'$$)
       AS squatter_without_create;
RESET ROLE;
GRANT CREATE ON SCHEMA outbox TO regress_outbox_squatter;
SET ROLE regress_outbox_squatter;
CREATE FUNCTION outbox.count_rows(text) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
RESET ROLE;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
DO $$
DECLARE
    detail text;
BEGIN
    ALTER EXTENSION outbox UPDATE;
EXCEPTION WHEN insufficient_privilege THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'refused, naming %', detail;
END $$;
DROP FUNCTION outbox.count_rows(text);
REVOKE CREATE ON SCHEMA outbox FROM regress_outbox_squatter;
ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
DROP EXTENSION outbox;
DROP ROLE regress_outbox_squatter;

-- No update runs code that someone other than a superuser planted on
-- outbox's tables. The extension's owner, a superuser when it installed
-- outbox and not any more, plants code an UPDATE of outbox.routes would run:
-- a statement trigger, a rule, a CHECK constraint and an index expression,
-- each saying who ran it (a NOTICE; the rule a row). Planting them runs the
-- CHECK and the index expression once each, as the owner. From 0.1.0 (whose
-- update rewrites routes of format debezium) the update refuses, naming
-- them all; with them gone it runs. From 0.2.0 (DDL only, but giving the
-- tables to outbox_writer, which would run them from then on) it refuses,
-- naming one at a time; with them gone it runs, and none of them ran.
CREATE ROLE regress_outbox_owner SUPERUSER;
CREATE SCHEMA regress_planted AUTHORIZATION regress_outbox_owner;
CREATE TABLE regress_planted.ran (who text);
ALTER TABLE regress_planted.ran OWNER TO regress_outbox_owner;
CREATE FUNCTION pg_temp.install(version text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    ALTER ROLE regress_outbox_owner SUPERUSER;
    SET LOCAL ROLE regress_outbox_owner;
    EXECUTE pg_catalog.format('CREATE EXTENSION outbox VERSION %L', version);
    PERFORM outbox.create_sink('r', 'redis', '{"port": 6379}');
    PERFORM outbox.add_route('a.*', 'r', 'a', format => 'debezium');
    RESET ROLE;
    ALTER ROLE regress_outbox_owner NOSUPERUSER;
    SET LOCAL ROLE regress_outbox_owner;
    CREATE OR REPLACE FUNCTION regress_planted.note() RETURNS trigger LANGUAGE plpgsql AS
        'BEGIN RAISE NOTICE ''planted trigger ran as %'', current_user; RETURN NULL; END';
    CREATE OR REPLACE FUNCTION regress_planted.noted(text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
        'BEGIN RAISE NOTICE ''planted function ran as %'', current_user; RETURN true; END';
    CREATE TRIGGER planted_trigger AFTER UPDATE ON outbox.routes
        FOR EACH STATEMENT EXECUTE FUNCTION regress_planted.note();
    CREATE RULE planted_rule AS ON UPDATE TO outbox.routes
        DO ALSO INSERT INTO regress_planted.ran VALUES (current_user);
    ALTER TABLE outbox.routes ADD CONSTRAINT planted_check CHECK (regress_planted.noted(format));
    CREATE INDEX planted_index ON outbox.routes (regress_planted.noted(target));
    RESET ROLE;
END $$;
SELECT pg_temp.install('0.1.0');
SELECT error_of('ALTER EXTENSION outbox UPDATE');
DO $$
DECLARE
    detail text;
    hint text;
BEGIN
    ALTER EXTENSION outbox UPDATE;
EXCEPTION WHEN insufficient_privilege THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    RAISE NOTICE '% / %', detail, hint;
END $$;
SELECT count(*) AS planted_code_ran FROM regress_planted.ran;
DROP TRIGGER planted_trigger ON outbox.routes;
DROP RULE planted_rule ON outbox.routes;
ALTER TABLE outbox.routes DROP CONSTRAINT planted_check;
DROP INDEX outbox.planted_index;
-- Code that names what it runs as text, which no dependency records: the
-- update refuses before it rewrites a row, and nothing ran.
SET ROLE regress_outbox_owner;
ALTER TABLE outbox.routes ADD CONSTRAINT planted_xml
    CHECK (query_to_xml('SELECT regress_planted.noted(''xml'')', true, false, '') IS NOT NULL);
RESET ROLE;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
ALTER TABLE outbox.routes DROP CONSTRAINT planted_xml;
ALTER EXTENSION outbox UPDATE;
SELECT extversion, (SELECT format FROM outbox.routes) AS format FROM pg_extension WHERE extname = 'outbox';
DROP EXTENSION outbox;
SELECT pg_temp.install('0.2.0');
-- And what else such an owner could leave behind: a table inheriting from
-- outbox.routes with a trigger, a function of its own made a member of the
-- extension, a column of its own domain on outbox.counts (each refused);
-- outbox's own PL/pgSQL function and view replaced by ones that call its
-- code, and its tables granted to PUBLIC (each undone by the update).
SET ROLE regress_outbox_owner;
CREATE TABLE regress_planted.routes_child () INHERITS (outbox.routes);
CREATE TRIGGER planted_child_trigger BEFORE UPDATE ON regress_planted.routes_child
    FOR EACH ROW EXECUTE FUNCTION regress_planted.note();
CREATE FUNCTION outbox.backdoor() RETURNS void LANGUAGE sql AS 'SELECT';
ALTER EXTENSION outbox ADD FUNCTION outbox.backdoor();
CREATE DOMAIN regress_planted.checked_shard AS smallint CHECK (regress_planted.noted(VALUE::text));
ALTER TABLE outbox.counts ALTER COLUMN shard TYPE regress_planted.checked_shard;
CREATE OR REPLACE FUNCTION outbox.recount() RETURNS void LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS 'BEGIN PERFORM regress_planted.noted(''recount''); END';
CREATE OR REPLACE VIEW outbox.partitions AS
    SELECT name, range_start, range_end, unpublished FROM (SELECT c.relname::text AS name,
        NULL::timestamptz AS range_start, NULL::timestamptz AS range_end, 0::bigint AS unpublished
        FROM pg_class c WHERE regress_planted.noted(c.relname::text)) p;
GRANT ALL ON outbox.sinks, outbox.events TO PUBLIC;
RESET ROLE;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
ALTER TABLE outbox.counts ALTER COLUMN shard TYPE smallint;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
ALTER TABLE outbox.routes DROP CONSTRAINT planted_check;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
DROP INDEX outbox.planted_index;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
DROP RULE planted_rule ON outbox.routes;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
DROP TABLE regress_planted.routes_child;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
DROP TRIGGER planted_trigger ON outbox.routes;
SET ROLE regress_outbox_owner;
-- Code reached other than by calling a function: outbox's own counting
-- trigger function under a WHEN clause of its own, an operator of its own in
-- a CHECK, a cast to a domain of its own in a CHECK (each refused).
CREATE TRIGGER planted_when AFTER UPDATE ON outbox.events FOR EACH STATEMENT
    WHEN (regress_planted.noted('when')) EXECUTE FUNCTION outbox.count_changes();
CREATE FUNCTION regress_planted.op(text, text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
    'BEGIN RAISE NOTICE ''planted operator ran as %'', current_user; RETURN true; END';
CREATE OPERATOR regress_planted.=== (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_planted.op);
ALTER TABLE outbox.counts ADD CONSTRAINT planted_operator
    CHECK (topic OPERATOR(regress_planted.===) topic);
CREATE DOMAIN regress_planted.checked_pattern AS text CHECK (regress_planted.noted(VALUE));
ALTER TABLE outbox.routes ADD CONSTRAINT planted_cast
    CHECK ((pattern::regress_planted.checked_pattern) IS NOT NULL);
RESET ROLE;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
ALTER TABLE outbox.routes DROP CONSTRAINT planted_cast;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
ALTER TABLE outbox.counts DROP CONSTRAINT planted_operator;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
DROP TRIGGER planted_when ON outbox.events;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
SET ROLE regress_outbox_owner;
ALTER TABLE outbox.counts ADD CONSTRAINT planted_xml
    CHECK (query_to_xml('SELECT regress_planted.noted(''xml'')', true, false, '') IS NOT NULL);
ALTER TABLE outbox.sinks ADD COLUMN planted text
    DEFAULT query_to_xml('SELECT regress_planted.noted(''default'')', true, false, '')::text;
RESET ROLE;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
ALTER TABLE outbox.counts DROP CONSTRAINT planted_xml;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
ALTER TABLE outbox.sinks DROP COLUMN planted;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
ALTER EXTENSION outbox DROP FUNCTION outbox.backdoor();
DROP FUNCTION outbox.backdoor();
-- emit() made STRICT would drop an event with a NULL key without a word.
ALTER FUNCTION outbox.emit(text, jsonb, text, jsonb) STRICT;
SELECT error_of('ALTER EXTENSION outbox UPDATE');
ALTER FUNCTION outbox.emit(text, jsonb, text, jsonb) CALLED ON NULL INPUT;
-- A grant to a role whose name needs quotes is taken away like any other
-- (it used to be quoted twice, and the update failed on it).
CREATE ROLE "Regress Reporting";
GRANT SELECT ON outbox.events TO "Regress Reporting";
GRANT SELECT (pattern) ON outbox.routes TO "Regress Reporting";
ALTER EXTENSION outbox UPDATE;
SELECT has_table_privilege('Regress Reporting', 'outbox.events', 'SELECT') AS reporting_reads_events,
       has_column_privilege('Regress Reporting', 'outbox.routes', 'pattern', 'SELECT') AS reporting_reads_patterns;
DROP ROLE "Regress Reporting";
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
SELECT position('regress_planted' IN prosrc) = 0 AS recount_is_outboxs
  FROM pg_proc WHERE oid = 'outbox.recount()'::regprocedure;
SELECT position('regress_planted' IN pg_get_viewdef('outbox.partitions'::regclass)) = 0
       AS partitions_view_is_outboxs;
SELECT has_table_privilege('public', 'outbox.sinks', 'SELECT') AS public_reads_sinks,
       has_table_privilege('public', 'outbox.events', 'INSERT') AS public_writes_events;
SELECT count(*) AS planted_code_ran FROM regress_planted.ran;
DROP EXTENSION outbox;
DROP SCHEMA regress_planted CASCADE;
DROP ROLE regress_outbox_owner;

-- CREATE EXTENSION where a schema outbox exists already says what to do.
CREATE SCHEMA outbox;
CREATE TABLE outbox.leftover (x int);
DO $$
DECLARE
    state text;
    message text;
    detail text;
    hint text;
BEGIN
    CREATE EXTENSION outbox;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    RAISE NOTICE '%: % / % / %', state, message, detail, hint;
END $$;
DROP SCHEMA outbox CASCADE;
CREATE EXTENSION outbox;
