-- The extension as a package: versions, members, pinned search_path,
-- SECURITY DEFINER only where needed, settings, and a clean drop/recreate.

SELECT extversion FROM pg_extension WHERE extname = 'outbox';
SELECT default_version FROM pg_available_extensions WHERE name = 'outbox';
SELECT version FROM pg_available_extension_versions WHERE name = 'outbox' ORDER BY version;
-- Every update path between shipped versions is complete.
SELECT source, target, path FROM pg_extension_update_paths('outbox')
 WHERE path IS NULL AND source < target;

-- Every function pins search_path.
SELECT p.oid::regprocedure AS unpinned
  FROM pg_proc p
 WHERE p.pronamespace = 'outbox'::regnamespace
   AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%');
-- SECURITY DEFINER is used by emit() only.
SELECT p.oid::regprocedure AS security_definer
  FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace AND p.prosecdef;
-- No function is executable by PUBLIC: emit() is granted to roles explicitly.
SELECT p.oid::regprocedure AS public_executable
  FROM pg_proc p
 WHERE p.pronamespace = 'outbox'::regnamespace
   AND has_function_privilege('public', p.oid, 'EXECUTE');

-- The objects the extension owns (partitions are data, not members).
SELECT pg_describe_object(classid, objid, objsubid) AS member
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
   AND deptype = 'e'
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
-- A schema outbox someone else created first is never taken over (issue
-- 14, finding 2: its owner could plant functions the install script calls,
-- or drop partitions holding pending events later).
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
ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
-- What pg_dump dumps the rows of, among the members: the same as a fresh
-- install's (the events of the default partition included).
SELECT pg_catalog.array_agg(c::regclass::text ORDER BY c::regclass::text) AS dumped_members
  FROM pg_extension, pg_catalog.unnest(extconfig) c WHERE extname = 'outbox';
CREATE TEMP TABLE updated_shape AS SELECT * FROM pg_temp.outbox_shape();
-- The one difference: 0.1.0's CREATE EXTENSION made the schema without
-- making it a member (0.2.0's script creates it), and an update cannot
-- change that. DROP EXTENSION leaves it behind there; it is dropped by hand.
SELECT 'only after the update' AS side, * FROM (TABLE updated_shape EXCEPT TABLE fresh_shape) u
UNION ALL
SELECT 'only in a fresh install', * FROM (TABLE fresh_shape EXCEPT TABLE updated_shape) f
 WHERE object <> 'schema outbox';
DROP EXTENSION outbox;
DROP SCHEMA outbox;
CREATE EXTENSION outbox;
