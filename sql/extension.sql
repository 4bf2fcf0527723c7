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

-- DROP EXTENSION removes every table, partition included; CREATE brings
-- them back.
DROP EXTENSION outbox;
SELECT count(*) AS outbox_relations_left
  FROM pg_class WHERE relnamespace = 'outbox'::regnamespace;
CREATE EXTENSION outbox;
SELECT count(*) AS partitions FROM outbox.partitions;
SELECT count(*) AS events FROM outbox.events;
