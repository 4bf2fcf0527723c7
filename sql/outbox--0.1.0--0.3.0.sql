-- outbox 0.1.0 -> 0.3.0, in one step: PostgreSQL takes it over the two
-- steps through 0.2.0 (the shortest path), and outbox--0.1.0--0.2.0.sql is
-- no longer installed. Never edit it once released. Brings a 0.1.0
-- installation to what outbox--0.3.0.sql installs (the regression test
-- "extension" compares the two): 0.1.0 -> 0.2.0's statements, with a check
-- that no code anyone planted on outbox.routes runs as the superuser who
-- updates, then 0.2.0 -> 0.3.0's.

\echo Use "ALTER EXTENSION outbox UPDATE" to load this file. \quit

-- 0.1.0's CREATE EXTENSION took over a schema outbox that existed before it,
-- and whoever owned it, or owned something in it, could plant functions and
-- operators the statements below (and the publisher) might run, or drop
-- partitions that hold pending events. 0.2.0 refuses such a schema at
-- CREATE EXTENSION, and this update, which makes the schema the
-- extension's, refuses it too: the schema and everything in it must belong
-- to the extension's owner (or a superuser, who could do anything anyway).
DO $$
DECLARE
    ext_owner oid := (SELECT extowner FROM pg_catalog.pg_extension
                       WHERE extname OPERATOR(pg_catalog.=) 'outbox');
    schema_oid oid := (SELECT oid FROM pg_catalog.pg_namespace
                        WHERE nspname OPERATOR(pg_catalog.=) 'outbox');
    foreign_objects text;
BEGIN
    IF NOT (SELECT nspowner OPERATOR(pg_catalog.=) ext_owner OR r.rolsuper
              FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
             WHERE n.oid OPERATOR(pg_catalog.=) schema_oid) THEN
        RAISE EXCEPTION 'schema outbox is owned by %, not by the owner of extension outbox (%)',
            (SELECT nspowner::pg_catalog.regrole FROM pg_catalog.pg_namespace
              WHERE oid OPERATOR(pg_catalog.=) schema_oid), ext_owner::pg_catalog.regrole
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Someone may have created the schema before CREATE EXTENSION. Check what '
                         'it holds, then ALTER SCHEMA outbox OWNER TO the extension''s owner and '
                         'update again.';
    END IF;
    SELECT pg_catalog.string_agg(o.what, ', ' ORDER BY o.what) INTO foreign_objects
      FROM (SELECT pg_catalog.format('relation outbox.%I (owner %s)', relname, relowner::pg_catalog.regrole) AS what
              FROM pg_catalog.pg_class
             WHERE relnamespace OPERATOR(pg_catalog.=) schema_oid
               AND relowner OPERATOR(pg_catalog.<>) ext_owner
               AND NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE oid OPERATOR(pg_catalog.=) relowner)
            UNION ALL
            SELECT pg_catalog.format('function %s (owner %s)', oid::pg_catalog.regprocedure, proowner::pg_catalog.regrole)
              FROM pg_catalog.pg_proc
             WHERE pronamespace OPERATOR(pg_catalog.=) schema_oid
               AND proowner OPERATOR(pg_catalog.<>) ext_owner
               AND NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE oid OPERATOR(pg_catalog.=) proowner)
            UNION ALL
            SELECT pg_catalog.format('operator %s (owner %s)', oid::pg_catalog.regoperator, oprowner::pg_catalog.regrole)
              FROM pg_catalog.pg_operator
             WHERE oprnamespace OPERATOR(pg_catalog.=) schema_oid
               AND oprowner OPERATOR(pg_catalog.<>) ext_owner
               AND NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE oid OPERATOR(pg_catalog.=) oprowner)
            UNION ALL
            SELECT pg_catalog.format('type %s (owner %s)', oid::pg_catalog.regtype, typowner::pg_catalog.regrole)
              FROM pg_catalog.pg_type
             WHERE typnamespace OPERATOR(pg_catalog.=) schema_oid
               AND typowner OPERATOR(pg_catalog.<>) ext_owner
               AND NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE oid OPERATOR(pg_catalog.=) typowner)) o;
    IF foreign_objects IS NOT NULL THEN
        RAISE EXCEPTION 'schema outbox holds objects the owner of extension outbox does not own'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = foreign_objects,
                  HINT = 'They could run as whoever uses outbox. Drop them or move them to '
                         'another schema, then update again.';
    END IF;
END
$$;

-- The tables the statements below change, locked first and in the order
-- emit() and the publishers take them: outbox.events (then each of its
-- partitions) before outbox.counts, which the counting triggers write after
-- a partition's rows. Taken later (hand_to_writer changes owners: counts,
-- then the partitions), a publisher holding a partition and waiting for
-- counts deadlocked the update. Emits and publishing wait until it commits.
LOCK TABLE outbox.events, outbox.counts IN ACCESS EXCLUSIVE MODE;

-- The UPDATE of outbox.routes below runs as the superuser who updates. The
-- owner of the extension or of the table (who need not be a superuser) may
-- have put code on the table that an UPDATE runs: a trigger, a rule, a CHECK
-- constraint, a generated column or a column of a domain type calling
-- functions or operators of their own, an index with an expression or an
-- operator class of their own. Such code would run with the updater's
-- rights: the update refuses, naming each object. (Built-in code, and
-- 0.1.0's own constraints and indexes, pass.)
DO $$
DECLARE
    routes oid := 'outbox.routes'::pg_catalog.regclass;
    planted text;
BEGIN
    SELECT pg_catalog.string_agg(p.what, ', ' ORDER BY p.what) INTO planted
      FROM (SELECT pg_catalog.format('trigger %I', tgname) AS what
              FROM pg_catalog.pg_trigger
             WHERE tgrelid OPERATOR(pg_catalog.=) routes AND NOT tgisinternal
            UNION ALL
            SELECT pg_catalog.format('rule %I', rulename)
              FROM pg_catalog.pg_rewrite
             WHERE ev_class OPERATOR(pg_catalog.=) routes
            UNION ALL
            -- Constraints whose expression or operators use anything outside
            -- pg_catalog, and foreign keys but 0.1.0's own.
            SELECT pg_catalog.format('constraint %I', c.conname)
              FROM pg_catalog.pg_constraint c
             WHERE c.conrelid OPERATOR(pg_catalog.=) routes
               AND ((c.contype OPERATOR(pg_catalog.=) 'f'
                     AND NOT (c.conname OPERATOR(pg_catalog.=) 'routes_sink_fkey'
                              AND c.confrelid OPERATOR(pg_catalog.=) 'outbox.sinks'::pg_catalog.regclass))
                    OR EXISTS (
                       SELECT FROM pg_catalog.pg_depend d
                        WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_constraint'::pg_catalog.regclass
                          AND d.objid OPERATOR(pg_catalog.=) c.oid
                          AND d.refclassid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_class'::pg_catalog.regclass
                          AND d.refclassid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_constraint'::pg_catalog.regclass
                          AND d.refobjid OPERATOR(pg_catalog.<>) ALL (
                              SELECT oid FROM pg_catalog.pg_proc
                               WHERE pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
                              UNION ALL
                              SELECT oid FROM pg_catalog.pg_operator
                               WHERE oprnamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
                              UNION ALL
                              SELECT oid FROM pg_catalog.pg_type
                               WHERE typnamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
                              UNION ALL
                              SELECT oid FROM pg_catalog.pg_collation
                               WHERE collnamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace)))
            UNION ALL
            SELECT pg_catalog.format('index %I', ic.relname)
              FROM pg_catalog.pg_index i
              JOIN pg_catalog.pg_class ic ON ic.oid OPERATOR(pg_catalog.=) i.indexrelid
             WHERE i.indrelid OPERATOR(pg_catalog.=) routes
               AND (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL
                    OR EXISTS (SELECT FROM pg_catalog.pg_opclass o
                                WHERE o.oid OPERATOR(pg_catalog.=) ANY (i.indclass)
                                  AND o.opcnamespace OPERATOR(pg_catalog.<>) 'pg_catalog'::pg_catalog.regnamespace)
                    OR EXISTS (SELECT FROM pg_catalog.pg_collation co
                                WHERE co.oid OPERATOR(pg_catalog.=) ANY (i.indcollation)
                                  AND co.collnamespace OPERATOR(pg_catalog.<>) 'pg_catalog'::pg_catalog.regnamespace))
            UNION ALL
            SELECT pg_catalog.format('column %I', a.attname)
              FROM pg_catalog.pg_attribute a
              JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid
             WHERE a.attrelid OPERATOR(pg_catalog.=) routes AND a.attnum OPERATOR(pg_catalog.>) 0
               AND NOT a.attisdropped
               AND (a.attgenerated OPERATOR(pg_catalog.<>) ''
                    OR t.typnamespace OPERATOR(pg_catalog.<>) 'pg_catalog'::pg_catalog.regnamespace)) p;
    IF planted IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.routes has code on it that outbox did not put there: %', planted
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The update changes rows of outbox.routes; this code would run as the '
                           'superuser who updates.',
                  HINT = 'Drop those objects (or check who made them), then update again.';
    END IF;
END
$$;

-- The statements a publisher claims events with, as it prepares them: to
-- EXPLAIN them, and for the isolation tests, which run them from concurrent
-- sessions.
CREATE FUNCTION outbox.publisher_statements(OUT name text, OUT statement text)
RETURNS SETOF record
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_publisher_statements';
COMMENT ON FUNCTION outbox.publisher_statements() IS
    'The SQL of the publisher''s claim statements (parameters: see src/publisher/claim.cpp)';
REVOKE ALL ON FUNCTION outbox.publisher_statements() FROM PUBLIC;

-- pg_dump leaves out a member table's rows unless it is marked: the events
-- the default partition holds must be dumped.
SELECT pg_catalog.pg_extension_config_dump('outbox.events_default', '');

-- 0.3.0: outbox.routes.sink no longer references outbox.sinks (pg_restore -j
-- loads the rows of both tables in parallel, in either order). Dropped
-- before the UPDATE below, so that no foreign key trigger fires for it.
ALTER TABLE outbox.routes DROP CONSTRAINT routes_sink_fkey;

-- 0.3.0: the AMQP (RabbitMQ), NATS JetStream, MQTT and HTTP sinks. Checking the new
-- constraint reads outbox.sinks' rows and evaluates only this built-in
-- comparison (no trigger, rule or policy runs for it). The name is the one
-- PostgreSQL gave the old constraint, so updated and fresh installs agree.
ALTER TABLE outbox.sinks DROP CONSTRAINT sinks_kind_check,
    ADD CONSTRAINT sinks_kind_check CHECK (kind IN ('kafka', 'redis', 'amqp', 'nats', 'mqtt', 'http'));

-- Routes may name the format debezium-expanded (Debezium's outbox event
-- router with table.expand.json.payload=true). The constraint keeps the
-- name a fresh install gives it.
ALTER TABLE outbox.routes DROP CONSTRAINT routes_format_check,
    ADD CONSTRAINT routes_format_check
        CHECK (format IN ('raw', 'cloudevents', 'debezium', 'debezium-expanded'));

-- The UPDATE below runs every CHECK, default, index expression and trigger
-- of outbox.routes as the superuser who updates. The check above sees what
-- the catalogs record; code can also name what it runs as text (a CHECK
-- calling query_to_xml('SELECT someones_function()', ...)). So the table
-- must also pass the rule for code that runs when emit() writes: only
-- built-in, immutable code (src/emit/writer_code_rule.hpp).
CREATE FUNCTION outbox.refuse_code_on_routes() RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'outbox_refuse_code_on_routes';
SELECT outbox.refuse_code_on_routes();
DROP FUNCTION outbox.refuse_code_on_routes();

-- In 0.1.0, format debezium sent the payload as JSON: what 0.2.0 calls
-- debezium-expanded (0.2.0's debezium follows the EventRouter's defaults, the
-- payload as a JSON string). Routes made under 0.1.0 keep the shape their
-- consumers read.
UPDATE ONLY outbox.routes SET format = 'debezium-expanded' WHERE format = 'debezium';

-- emit() writes its row as its owner and pins search_path itself (see the
-- install script): declared as a plain function, it no longer pays for the
-- server doing both around every call.
ALTER FUNCTION outbox.emit(text, jsonb, text, jsonb) SECURITY INVOKER RESET search_path;

-- outbox.key_slot() calls the one definition of the key-slot hash
-- (src/shmem/key_slot.cpp), which emit() and the claims use too.
CREATE OR REPLACE FUNCTION outbox.key_slot(key text) RETURNS int
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_key_slot';

-- The pattern among `patterns` whose route events of `topic` take: an exact
-- pattern beats any wildcard, a longer wildcard a shorter one, then byte
-- order; NULL when none matches. The publisher's own precedence (the one
-- definition, src/core/route_match.cpp), for outbox.route_lag and for
-- anyone's queries: it reads no table, so every role may call it.
CREATE FUNCTION outbox.best_pattern(topic text, patterns text[]) RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_best_pattern';
COMMENT ON FUNCTION outbox.best_pattern(text, text[]) IS
    'The pattern a route for this topic takes among the given ones (route precedence); NULL if none matches';
-- As a fresh install grants it (the same ACL: revoked, then granted).
REVOKE ALL ON FUNCTION outbox.best_pattern(text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.best_pattern(text, text[]) TO PUBLIC;

-- Per route: the lag (age of its oldest pending event) and backlog, from
-- outbox.stats. Each topic goes to the route the publisher picks
-- (outbox.best_pattern). Topics no route matches are summed in one row with
-- pattern NULL.
CREATE OR REPLACE VIEW outbox.route_lag AS
WITH patterns AS (
    SELECT pg_catalog.array_agg(pattern) AS patterns FROM outbox.routes),
topic_route AS (
    SELECT s.topic, s.pending, s.dead, s.oldest_pending_age,
           outbox.best_pattern(s.topic, p.patterns) AS pattern
      FROM outbox.stats s, patterns p)
SELECT r.pattern, r.sink, r.target, r.format, r.paused,
       pg_catalog.count(t.topic) AS topics,
       coalesce(pg_catalog.sum(t.pending), 0)::bigint AS pending,
       coalesce(pg_catalog.sum(t.dead), 0)::bigint AS dead,
       pg_catalog.max(t.oldest_pending_age) AS oldest_pending_age
  FROM outbox.routes r
  LEFT JOIN topic_route t ON t.pattern OPERATOR(pg_catalog.=) r.pattern
 GROUP BY r.pattern, r.sink, r.target, r.format, r.paused
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, pg_catalog.count(*), pg_catalog.sum(pending)::bigint,
       pg_catalog.sum(dead)::bigint, pg_catalog.max(oldest_pending_age)
  FROM topic_route
 WHERE pattern IS NULL
HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0;
COMMENT ON VIEW outbox.route_lag IS
    'Per route: topics, pending and dead events, and the age of its oldest pending event (lag)';

-- outbox.count_changes() in C (src/catalog/event_counts.cpp): the same counts, at a
-- fraction of the PL/pgSQL version's cost per statement.
CREATE OR REPLACE FUNCTION outbox.count_changes()
RETURNS trigger
LANGUAGE c
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_count_changes';

-- 0.1.0's control file had CREATE EXTENSION make schema outbox and record
-- the extension in it; 0.2.0 records the extension in pg_catalog and its
-- install script creates the schema, which so is a member. An updated
-- installation is made the same: pg_dump then writes what it writes for a
-- fresh one (CREATE EXTENSION outbox, no CREATE SCHEMA), which restores; as
-- it was, the restore refused "WITH SCHEMA outbox" against the control
-- file's pg_catalog. The extension must leave the schema before the schema
-- can join it, and no ALTER EXTENSION moves a non-relocatable extension:
-- its catalog row and its dependency on the schema are changed here (an
-- update of an untrusted extension runs as a superuser).
UPDATE pg_catalog.pg_extension
   SET extnamespace = 'pg_catalog'::pg_catalog.regnamespace
 WHERE extname OPERATOR(pg_catalog.=) 'outbox';
DELETE FROM pg_catalog.pg_depend
 WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
   AND objid OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_extension
                                      WHERE extname OPERATOR(pg_catalog.=) 'outbox')
   AND refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
   AND refobjid OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace
   AND deptype OPERATOR(pg_catalog.=) 'n';
ALTER EXTENSION outbox ADD SCHEMA outbox;
-- ADD SCHEMA records the schema's privileges as they are now as its initial
-- ones, which pg_dump writes only the difference from; a restore's CREATE
-- EXTENSION starts from a fresh install's (USAGE for PUBLIC). Recorded as a
-- fresh install records them, so that grants and revokes made since dump
-- and restore (and no role dropped since lingers there).
UPDATE pg_catalog.pg_init_privs i
   SET initprivs = pg_catalog.array_append(pg_catalog.acldefault('n', n.nspowner),
                                           pg_catalog.makeaclitem(0, n.nspowner, 'USAGE', false))
  FROM pg_catalog.pg_namespace n
 WHERE n.nspname OPERATOR(pg_catalog.=) 'outbox'
   AND i.objoid OPERATOR(pg_catalog.=) n.oid
   AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
   AND i.objsubid OPERATOR(pg_catalog.=) 0;

-- 0.3.0: outbox.home and outbox.publish_here(). The INSERT writes a table
-- made just above: nobody could have put code on it.
-- Which database these tables belong to (src/catalog/database_home.hpp). CREATE
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

-- ---------------------------------------------------------------------------
-- outbox's own code again, as outbox--0.3.0.sql makes it: the functions not
-- written in C and the views, whose owner until now could have replaced
-- them (with code that would then run as outbox_writer, or as whoever reads
-- a view). CREATE OR REPLACE keeps their grants.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox.prepare_partition(partition regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('CREATE TRIGGER events_count_insert AFTER INSERT ON %s'
                   ' REFERENCING NEW TABLE AS new_rows'
                   ' FOR EACH STATEMENT EXECUTE FUNCTION outbox.count_changes()', partition);
    EXECUTE format('CREATE TRIGGER events_count_update AFTER UPDATE ON %s'
                   ' REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows'
                   ' FOR EACH STATEMENT EXECUTE FUNCTION outbox.count_changes()', partition);
    EXECUTE format('CREATE TRIGGER events_count_delete AFTER DELETE ON %s'
                   ' REFERENCING OLD TABLE AS old_rows'
                   ' FOR EACH STATEMENT EXECUTE FUNCTION outbox.count_changes()', partition);
    EXECUTE format('CREATE TRIGGER events_count_truncate AFTER TRUNCATE ON %s'
                   ' FOR EACH STATEMENT EXECUTE FUNCTION outbox.count_changes()', partition);
    EXECUTE format('CREATE STATISTICS outbox.%I (mcv) ON status, next_attempt_at FROM %s',
                   (SELECT relname || '_state' FROM pg_class WHERE oid = partition), partition);
END
$$;

CREATE OR REPLACE FUNCTION outbox.recount()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    LOCK TABLE outbox.counts IN EXCLUSIVE MODE;
    DELETE FROM outbox.counts;
    INSERT INTO outbox.counts (day, topic, waiting, published, dead)
    SELECT (created_at AT TIME ZONE 'UTC')::date, topic,
           count(*) FILTER (WHERE status = 'pending' AND next_attempt_at IS NOT NULL),
           count(*) FILTER (WHERE status = 'published'),
           count(*) FILTER (WHERE status = 'dead')
      FROM outbox.events
     GROUP BY 1, 2
    HAVING count(*) FILTER (WHERE status <> 'pending' OR next_attempt_at IS NOT NULL) > 0;
END
$$;

CREATE OR REPLACE FUNCTION outbox.retry_dead(topic text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH revived AS (
        UPDATE outbox.events e
           SET status = 'pending', attempts = 0, next_attempt_at = now()
         WHERE e.status = 'dead'
           AND ($1 IS NULL OR e.topic = $1)
        RETURNING 1)
    SELECT count(*) FROM revived, LATERAL (SELECT outbox.wakeup()) w
$$;

CREATE OR REPLACE VIEW outbox.stats AS
WITH per_day AS (
    SELECT topic, day, sum(waiting) AS waiting, sum(published) AS published, sum(dead) AS dead
      FROM outbox.counts
     GROUP BY topic, day),
counted AS (
    SELECT topic, sum(waiting) AS waiting, sum(published) AS published, sum(dead) AS dead,
           min(day) FILTER (WHERE waiting > 0) AS first_waiting_day
      FROM per_day
     GROUP BY topic),
untried AS (
    SELECT topic, count(*) AS pending, min(created_at) AS oldest
      FROM outbox.events
     WHERE status = 'pending' AND next_attempt_at IS NULL
     GROUP BY topic)
SELECT topic,
       (coalesce(c.waiting, 0) + coalesce(u.pending, 0))::bigint AS pending,
       coalesce(c.published, 0)::bigint AS published,
       coalesce(c.dead, 0)::bigint AS dead,
       now() - least(u.oldest,
                     -- Only the first day with waiting events can hold the
                     -- oldest: one partition probed, the others pruned.
                     (SELECT min(e.created_at) FROM outbox.events e
                       WHERE e.topic = c.topic AND e.status = 'pending'
                         AND e.next_attempt_at IS NOT NULL
                         AND e.created_at >= c.first_waiting_day::timestamp AT TIME ZONE 'UTC'
                         AND e.created_at < (c.first_waiting_day + 1)::timestamp AT TIME ZONE 'UTC'))
       AS oldest_pending_age
  FROM counted c
  FULL JOIN untried u USING (topic)
 WHERE coalesce(c.waiting, 0) + coalesce(u.pending, 0) + coalesce(c.published, 0)
       + coalesce(c.dead, 0) > 0;

CREATE OR REPLACE VIEW outbox.route_lag AS
WITH patterns AS (
    SELECT pg_catalog.array_agg(pattern) AS patterns FROM outbox.routes),
topic_route AS (
    SELECT s.topic, s.pending, s.dead, s.oldest_pending_age,
           outbox.best_pattern(s.topic, p.patterns) AS pattern
      FROM outbox.stats s, patterns p)
SELECT r.pattern, r.sink, r.target, r.format, r.paused,
       pg_catalog.count(t.topic) AS topics,
       coalesce(pg_catalog.sum(t.pending), 0)::bigint AS pending,
       coalesce(pg_catalog.sum(t.dead), 0)::bigint AS dead,
       pg_catalog.max(t.oldest_pending_age) AS oldest_pending_age
  FROM outbox.routes r
  LEFT JOIN topic_route t ON t.pattern OPERATOR(pg_catalog.=) r.pattern
 GROUP BY r.pattern, r.sink, r.target, r.format, r.paused
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, pg_catalog.count(*), pg_catalog.sum(pending)::bigint,
       pg_catalog.sum(dead)::bigint, pg_catalog.max(oldest_pending_age)
  FROM topic_route
 WHERE pattern IS NULL
HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0;

CREATE OR REPLACE VIEW outbox.partitions AS
SELECT c.relname::text AS name,
       b.day::timestamp AT TIME ZONE 'UTC' AS range_start,
       (b.day + 1)::timestamp AT TIME ZONE 'UTC' AS range_end,
       coalesce(u.unpublished, 0) AS unpublished
  FROM pg_catalog.pg_inherits i
  JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
 CROSS JOIN LATERAL (
       SELECT CASE WHEN c.relname ~ '^events_p[0-9]{8}$'
                   THEN to_date(substr(c.relname, 9), 'YYYYMMDD') END AS day) b
  LEFT JOIN (SELECT tableoid, count(*) AS unpublished
               FROM (SELECT tableoid FROM outbox.events
                      WHERE status = 'pending' AND next_attempt_at IS NULL
                     UNION ALL
                     SELECT tableoid FROM outbox.events
                      WHERE status = 'pending' AND next_attempt_at IS NOT NULL
                     UNION ALL
                     SELECT tableoid FROM outbox.events WHERE status = 'dead') x
              GROUP BY tableoid) u ON u.tableoid = c.oid
 WHERE i.inhparent = 'outbox.events'::regclass
 ORDER BY b.day NULLS LAST, c.relname;

CREATE OR REPLACE VIEW outbox.workers AS SELECT * FROM outbox.worker_stats();

COMMENT ON TABLE outbox.sinks IS
    'Brokers events are delivered to. options may hold secrets: superusers only.';

-- Sinks, routes and their controls check their caller themselves (superusers
-- and the extension owner: src/catalog/sink_catalog.hpp) and then act as
-- outbox_writer, which owns them: anyone may call them, only those pass.
GRANT EXECUTE ON FUNCTION outbox.create_sink(text, text, jsonb), outbox.drop_sink(text),
    outbox.add_route(text, text, text, text), outbox.remove_route(text), outbox.pause(text),
    outbox.resume(text), outbox.replay(timestamptz, text), outbox.publish_here() TO PUBLIC;

-- ---------------------------------------------------------------------------
-- The owner of all of the above: role outbox_writer (src/catalog/writer_role.cpp),
-- made here when it is missing, refused when it is more than outbox makes
-- (a login, a superuser, members, memberships, anything it owns or holds
-- here). emit() writes and the publishers run as it, never as a superuser.
-- Refused too while a trigger, rule or policy outbox did not make is on
-- its tables. The role is shared by every database and stays after DROP
-- EXTENSION (docs/security.md says how to drop it).
-- ---------------------------------------------------------------------------
CREATE FUNCTION outbox.hand_to_writer() RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_hand_to_writer';
SELECT outbox.hand_to_writer();
DROP FUNCTION outbox.hand_to_writer();
