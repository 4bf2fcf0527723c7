-- outbox 0.2.0 -> 0.3.0. Never edit it once released.
-- Brings a 0.2.0 installation to what outbox--0.3.0.sql installs (the
-- regression test "extension" compares the two). DDL only: no statement
-- here writes a row of outbox's tables (one constraint check reads
-- outbox.sinks), so no trigger or rule anyone planted on them runs as the
-- superuser who updates.

\echo Use "ALTER EXTENSION outbox UPDATE TO '0.3.0'" to load this file. \quit

-- The tables the statements below change, locked first and in the order
-- emit() and the publishers take them: outbox.events (then each of its
-- partitions) before outbox.counts, which the counting triggers write after
-- a partition's rows. Taken later (hand_to_writer changes owners: counts,
-- then the partitions), a publisher holding a partition and waiting for
-- counts deadlocked the update. Emits and publishing wait until it commits.
LOCK TABLE outbox.events, outbox.counts IN ACCESS EXCLUSIVE MODE;

-- outbox.routes.sink no longer references outbox.sinks: pg_restore -j loads
-- the rows of both tables in parallel, in either order, and a route whose
-- sink was not restored yet failed the restore. The foreign key's name is
-- PostgreSQL's default one, the same whether 0.2.0 was installed or
-- updated from 0.1.0.
ALTER TABLE outbox.routes DROP CONSTRAINT routes_sink_fkey;

-- 0.3.0: the AMQP (RabbitMQ), NATS JetStream, MQTT and HTTP sinks. Checking the new
-- constraint reads outbox.sinks' rows and evaluates only this built-in
-- comparison (no trigger, rule or policy runs for it). The name is the one
-- PostgreSQL gave the old constraint, so updated and fresh installs agree.
ALTER TABLE outbox.sinks DROP CONSTRAINT sinks_kind_check,
    ADD CONSTRAINT sinks_kind_check CHECK (kind IN ('kafka', 'redis', 'amqp', 'nats', 'mqtt', 'http'));

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
