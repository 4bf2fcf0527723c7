-- outbox's tables belong to role outbox_writer (src/catalog/writer_role.cpp): never
-- a superuser, never logs in, shared by every database. CREATE EXTENSION
-- makes it, or takes the one that exists only when it is no more than
-- outbox makes; DROP EXTENSION leaves it.
SELECT rolsuper, rolcanlogin, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, rolinherit
  FROM pg_roles WHERE rolname = 'outbox_writer';
-- Every table, partition, view, statistics object and function of outbox
-- is the writer's; emit() writes as the owner of outbox.emit().
SELECT c.relkind, count(*) FILTER (WHERE c.relowner <> 'outbox_writer'::regrole) AS not_the_writers
  FROM pg_class c
 WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S', 'm')
 GROUP BY 1 ORDER BY 1;
SELECT count(*) AS statistics_not_the_writers FROM pg_statistic_ext
 WHERE stxnamespace = 'outbox'::regnamespace AND stxowner <> 'outbox_writer'::regrole;
SELECT count(*) AS functions_not_the_writers FROM pg_proc
 WHERE pronamespace = 'outbox'::regnamespace AND proowner <> 'outbox_writer'::regrole;
-- The initial privileges pg_dump compares outbox's objects with name the
-- writer as ALTER ... OWNER left their privileges (and PUBLIC): a dump
-- GRANTs and REVOKEs nothing to roles a restore's cluster may lack. Also
-- after an update from 0.2.0 (at the end of this file).
CREATE VIEW public.initial_privileges_of_others AS
SELECT count(*) AS initial_privileges_of_others
  FROM pg_init_privs i CROSS JOIN LATERAL aclexplode(i.initprivs) a
 WHERE ((i.classoid = 'pg_class'::regclass
         AND i.objoid IN (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE n.nspname = 'outbox'))
     OR (i.classoid = 'pg_proc'::regclass
         AND i.objoid IN (SELECT p.oid FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                           WHERE n.nspname = 'outbox')))
   AND (a.grantee NOT IN (0, (SELECT oid FROM pg_roles WHERE rolname = 'outbox_writer'))
        OR a.grantor <> (SELECT oid FROM pg_roles WHERE rolname = 'outbox_writer'));
SELECT * FROM public.initial_privileges_of_others;
-- It may create the day partitions in schema outbox, and holds nothing else.
SELECT has_schema_privilege('outbox_writer', 'outbox', 'CREATE') AS creates_partitions,
       has_database_privilege('outbox_writer', current_database(), 'CREATE') AS creates_schemas,
       has_table_privilege('outbox_writer', 'pg_catalog.pg_authid', 'SELECT') AS reads_authid;
SELECT count(*) AS memberships FROM pg_auth_members
 WHERE member = 'outbox_writer'::regrole OR roleid = 'outbox_writer'::regrole;

-- A role of that name made beforehand is taken only when it is what
-- outbox makes; otherwise CREATE EXTENSION says what is wrong with it.
CREATE FUNCTION public.create_extension_error() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    message text;
    detail text;
BEGIN
    CREATE EXTENSION outbox;
    DROP EXTENSION outbox;
    RETURN 'created';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || message || ' / ' || detail;
END $$;
DROP EXTENSION outbox;
-- Gone with the extension: everything the role owned here.
SELECT count(*) AS still_owned FROM pg_shdepend
 WHERE refobjid = 'outbox_writer'::regrole
   AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database());
ALTER ROLE outbox_writer LOGIN;
SELECT public.create_extension_error() AS with_login;
ALTER ROLE outbox_writer NOLOGIN CREATEDB;
SELECT public.create_extension_error() AS creates_databases;
ALTER ROLE outbox_writer NOCREATEDB;
CREATE ROLE regress_writer_member;
GRANT outbox_writer TO regress_writer_member;
SELECT public.create_extension_error() AS with_a_member;
REVOKE outbox_writer FROM regress_writer_member;
GRANT pg_read_server_files TO outbox_writer;
SELECT public.create_extension_error() AS a_member_of_another_role;
REVOKE pg_read_server_files FROM outbox_writer;
CREATE TABLE public.regress_writer_owns (x int);
ALTER TABLE public.regress_writer_owns OWNER TO outbox_writer;
SELECT public.create_extension_error() AS owning_a_table;
ALTER TABLE public.regress_writer_owns OWNER TO CURRENT_USER;
-- A privilege another role grants it on an object of its own opens only
-- that object to it, and is no refusal (else any role owning something
-- could block CREATE EXTENSION in the whole cluster).
GRANT SELECT ON public.regress_writer_owns TO outbox_writer;
SELECT public.create_extension_error() AS granted_a_table;
DROP TABLE public.regress_writer_owns;
-- What `pg_dumpall --globals-only` restores first is what outbox makes.
DROP ROLE outbox_writer;
CREATE ROLE outbox_writer;
ALTER ROLE outbox_writer WITH NOSUPERUSER INHERIT NOCREATEROLE NOCREATEDB NOLOGIN NOREPLICATION NOBYPASSRLS;
SELECT public.create_extension_error() AS as_dumpall_writes_it;
-- With none, CREATE EXTENSION makes it.
DROP ROLE outbox_writer;
SELECT public.create_extension_error() AS without_the_role;
SELECT count(*) AS writer_roles FROM pg_roles WHERE rolname = 'outbox_writer';
DROP FUNCTION public.create_extension_error();
DROP ROLE regress_writer_member;

-- The extension owner manages sinks and routes through outbox's functions,
-- which act as the writer: it needs no privilege on the tables. A role
-- that is neither it nor a superuser is refused by the functions
-- themselves, which anyone may call.
-- REASSIGN OWNED away from the superuser who installed outbox gives the
-- extension to another role, and nothing else of outbox's: schema, tables
-- and functions stay the writer's, and the initial privileges a dump
-- compares with name no one else.
CREATE ROLE regress_writer_installer SUPERUSER;
CREATE ROLE regress_writer_heir;
SET ROLE regress_writer_installer;
CREATE EXTENSION outbox;
RESET ROLE;
REASSIGN OWNED BY regress_writer_installer TO regress_writer_heir;
SELECT e.extowner::regrole AS extension_owner, n.nspowner::regrole AS schema_owner,
       (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid AND relkind IN ('r', 'p', 'v')
           AND relowner <> 'outbox_writer'::regrole) AS relations_not_the_writers
  FROM pg_extension e, pg_namespace n WHERE e.extname = 'outbox' AND n.nspname = 'outbox';
SELECT * FROM public.initial_privileges_of_others;
SELECT count(*) AS schema_initial_privileges_of_others
  FROM pg_init_privs i CROSS JOIN LATERAL aclexplode(i.initprivs) a
 WHERE i.classoid = 'pg_namespace'::regclass AND i.objoid = 'outbox'::regnamespace
   AND (a.grantee NOT IN (0, 'outbox_writer'::regrole::oid) OR a.grantor <> 'outbox_writer'::regrole::oid);
DROP EXTENSION outbox;
DROP ROLE regress_writer_installer, regress_writer_heir;
CREATE EXTENSION outbox;
CREATE ROLE regress_writer_admin;
GRANT postgres TO regress_writer_admin;
SET ROLE regress_writer_admin;
SELECT outbox.create_sink('writer-r', 'redis', '{}');
SELECT outbox.add_route('writer.*', 'writer-r');
SELECT outbox.pause('writer.*');
SELECT outbox.resume('writer.*');
SELECT outbox.remove_route('writer.*');
SELECT outbox.drop_sink('writer-r');
RESET ROLE;
CREATE ROLE regress_writer_stranger;
SET ROLE regress_writer_stranger;
SELECT error_of($$SELECT outbox.create_sink('writer-s', 'redis', '{}')$$);
RESET ROLE;
DROP ROLE regress_writer_admin, regress_writer_stranger;

DROP EXTENSION outbox;
CREATE EXTENSION outbox VERSION '0.2.0';
-- A role given CREATE on schema outbox under 0.2.0 could take the name of a
-- day's partition before maintenance made it: the update takes it back
-- (USAGE stays).
CREATE ROLE regress_writer_creator;
GRANT CREATE, USAGE ON SCHEMA outbox TO regress_writer_creator;
ALTER EXTENSION outbox UPDATE;
SELECT a.grantee::regrole AS grantee, a.privilege_type
  FROM pg_namespace n, aclexplode(n.nspacl) a
 WHERE n.nspname = 'outbox' AND a.grantee <> 'outbox_writer'::regrole
 ORDER BY 1, 2;
REVOKE USAGE ON SCHEMA outbox FROM regress_writer_creator;
-- (The role stays: on 17 and later the update's REVOKE, run inside the
-- extension script, records it as a dependency of the schema's initial
-- privileges, which DROP ROLE refuses while the extension exists.)
SELECT * FROM public.initial_privileges_of_others;
DROP EXTENSION outbox;
CREATE EXTENSION outbox;
DROP VIEW public.initial_privileges_of_others;
