-- outbox 0.3.0: the transactional outbox inside PostgreSQL.
-- Install script. Never edit it once released: ship outbox--0.3.0--X.Y.Z.sql.
-- outbox--0.2.0--0.3.0.sql brings a 0.2.0 installation to the same state
-- (and outbox--0.1.0--0.3.0.sql a 0.1.0 one).

\echo Use "CREATE EXTENSION outbox" to load this file. \quit

-- The schema is created here, never taken over: a schema outbox that exists
-- already (made by someone who could then plant functions, operators or
-- triggers in it, or drop partitions holding pending events) makes CREATE
-- EXTENSION fail, saying what to do, and this one belongs to the extension
-- (DROP EXTENSION drops it; pg_dump leaves it to CREATE EXTENSION).
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'outbox') THEN
        RAISE EXCEPTION 'schema "outbox" already exists'
            USING ERRCODE = 'duplicate_schema',
                  DETAIL = pg_catalog.format('CREATE EXTENSION outbox creates schema outbox itself; '
                      'this one is owned by %s (relations and functions in it: %s).',
                      (SELECT nspowner::pg_catalog.regrole FROM pg_catalog.pg_namespace
                        WHERE nspname OPERATOR(pg_catalog.=) 'outbox'),
                      (SELECT pg_catalog.count(*) FROM pg_catalog.pg_class c
                        JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                       WHERE n.nspname OPERATOR(pg_catalog.=) 'outbox')
                      OPERATOR(pg_catalog.+)
                      (SELECT pg_catalog.count(*) FROM pg_catalog.pg_proc p
                        JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
                       WHERE n.nspname OPERATOR(pg_catalog.=) 'outbox')),
                  HINT = 'If it is left from an earlier outbox, or empty, drop it (DROP SCHEMA outbox, '
                         'after checking what it holds) or rename it, then create the extension. '
                         'Outbox never takes over a schema someone else made: its owner could plant '
                         'code there that outbox would run.';
    END IF;
END
$$;
CREATE SCHEMA outbox;

-- ---------------------------------------------------------------------------
-- The event store
-- ---------------------------------------------------------------------------

-- Every retained event. Partitioned by UTC day on created_at; partitions are
-- named events_pYYYYMMDD and managed by outbox.maintain(). events_default
-- catches rows for a day without a partition, so emit() never fails when
-- maintenance has not run; the next maintenance moves them out.
--
-- Layout kept lean because every byte and index entry here is paid by every
-- business transaction that emits: one index only (below), no primary key
-- (ids are UUIDv7 from a strong random source), NULL for everything the
-- publisher fills in later.
CREATE TABLE outbox.events (
    id              uuid        NOT NULL,
    topic           text        NOT NULL,
    key             text,
    payload         jsonb       NOT NULL,
    headers         jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    status          text        NOT NULL DEFAULT 'pending'
                    CONSTRAINT events_status_check
                    CHECK (status IN ('pending', 'published', 'dead')),
    attempts        int         NOT NULL DEFAULT 0,
    published_at    timestamptz,
    last_error      text,
    next_attempt_at timestamptz  -- NULL: never tried; see events_retry_idx
) PARTITION BY RANGE (created_at);

COMMENT ON TABLE outbox.events IS
    'Every retained event, one partition per UTC day (outbox.partitions).';
COMMENT ON COLUMN outbox.events.status IS 'pending, published or dead';
COMMENT ON COLUMN outbox.events.next_attempt_at IS
    'NULL: never tried; else when the publisher tries it next (infinity: no route yet)';

-- Three partial indexes, and an emitted event enters exactly one of them:
-- - ready: pending events never tried (next_attempt_at NULL), in id (= emit
--   time) order. Every insert writes this entry and nothing else; the
--   publisher claims from here.
-- - retry: pending events waiting for a retry, or parked behind an earlier
--   event of the same key, or for a route ('infinity'), or revived by
--   retry_dead() (due at once), by due time.
-- - dead: events that failed outbox.max_attempts times.
-- A published event is in none of them, so neither a claim nor a retention
-- check ever walks published rows, and a claim never walks failing ones.
CREATE INDEX events_ready_idx ON outbox.events (id)
    WHERE status = 'pending' AND next_attempt_at IS NULL;
CREATE INDEX events_retry_idx ON outbox.events (next_attempt_at, id)
    WHERE status = 'pending' AND next_attempt_at IS NOT NULL;
CREATE INDEX events_dead_idx ON outbox.events (id)
    WHERE status = 'dead';
-- Per topic, the oldest event waiting for a retry, for outbox.stats'
-- oldest_pending_age without walking the waiting events. Written by the
-- publisher's UPDATEs only (an emitted event is never waiting): no cost to emit.
CREATE INDEX events_waiting_idx ON outbox.events (topic, created_at)
    WHERE status = 'pending' AND next_attempt_at IS NOT NULL;

CREATE TABLE outbox.events_default PARTITION OF outbox.events DEFAULT;

-- ---------------------------------------------------------------------------
-- Running counts, so outbox.stats answers in milliseconds however many
-- events are retained (counting partitions would read every row).
-- ---------------------------------------------------------------------------

-- Events per UTC day of created_at and topic, by state. An emitted event is
-- not counted here while it is never tried (pending, next_attempt_at NULL):
-- counting it would cost emit() a write to a shared row. outbox.stats adds
-- those from events_ready_idx, which holds about one batch while a publisher
-- runs. Every other change of an event is counted by the statement triggers
-- below, in the transaction that makes it:
-- - UPDATE and DELETE through outbox.events or any partition (the publisher,
--   retry_dead(), replay(), maintenance, or an operator's own statement);
-- - INSERT naming a partition (maintenance moving rows out of events_default).
-- An INSERT through outbox.events (emit) fires no trigger; inserting rows
-- that are not new pending events that way is not counted: run
-- outbox.recount() after doing so. Dropping a partition deletes its day's
-- rows here (maintenance does both in one transaction).
--
-- Each (day, topic) is split into shards (src/catalog/event_counts.cpp says how
-- they are picked): a counted change locks its shard's row until its
-- transaction ends, so parallel publishers writing one shared row would
-- wait for each other's commits, and an operator's retry_dead() under
-- REPEATABLE READ would fail on a row a publisher changed after its
-- snapshot. A publisher writes the shard of its slot in the proc array;
-- anyone else one of 1024 negative shards, picked per transaction;
-- recount() writes shard 0. A shard's numbers alone mean nothing (an event
-- can become waiting in one shard and published in another); only their
-- sums per day and topic do.
CREATE TABLE outbox.counts (
    day       date     NOT NULL,
    topic     text     NOT NULL,
    waiting   bigint   NOT NULL DEFAULT 0,  -- pending and tried (next_attempt_at set)
    published bigint   NOT NULL DEFAULT 0,
    dead      bigint   NOT NULL DEFAULT 0,
    shard     smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (day, topic, shard)
);
COMMENT ON TABLE outbox.counts IS
    'Running event counts per day and topic behind outbox.stats (never-tried events excluded)';

-- The statement trigger of every change to outbox.events (see above): adds
-- the new rows' states and subtracts the old ones', per day and topic, in
-- (day, topic) order so that concurrent writers cannot deadlock on it; a
-- TRUNCATE recounts. In C (src/catalog/event_counts.cpp): it runs after every
-- statement the publisher records outcomes with.
CREATE FUNCTION outbox.count_changes()
RETURNS trigger
LANGUAGE c
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_count_changes';
COMMENT ON FUNCTION outbox.count_changes() IS
    'Trigger keeping outbox.counts in step with outbox.events';

-- What every partition of outbox.events gets (maintain() calls this for each
-- partition it creates, before moving rows into it):
-- - the counting triggers (see outbox.counts);
-- - statistics on (status, next_attempt_at) together: without them the
--   planner multiplies "pending" by "next_attempt_at IS NULL" and expects
--   thousands of never-tried events where a running publisher leaves a few,
--   and picks parallel plans for outbox.stats that cost more than the read.
CREATE FUNCTION outbox.prepare_partition(partition regclass)
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
COMMENT ON FUNCTION outbox.prepare_partition(regclass) IS
    'Create the counting triggers and planner statistics of one partition of outbox.events';

-- On the parent: UPDATE, DELETE and TRUNCATE only. No INSERT trigger: emit()
-- inserts through the parent and must stay as cheap as a plain INSERT.
CREATE TRIGGER events_count_update AFTER UPDATE ON outbox.events
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.count_changes();
CREATE TRIGGER events_count_delete AFTER DELETE ON outbox.events
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.count_changes();
CREATE TRIGGER events_count_truncate AFTER TRUNCATE ON outbox.events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.count_changes();
SELECT outbox.prepare_partition('outbox.events_default'::pg_catalog.regclass);

-- Rebuild outbox.counts from the events themselves. Exact; reads every
-- retained event, so it takes as long as counting them. Blocks concurrent
-- changes to the counts (the publisher waits) while it runs; a change made
-- by a transaction still open is applied on top when it commits, so nothing
-- is counted twice or lost.
CREATE FUNCTION outbox.recount()
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
COMMENT ON FUNCTION outbox.recount() IS
    'Rebuild the running counts behind outbox.stats from the events (slow; exact)';

-- ---------------------------------------------------------------------------
-- Sinks and routes (configuration: kept by pg_dump)
-- ---------------------------------------------------------------------------

CREATE TABLE outbox.sinks (
    name       text        PRIMARY KEY,
    kind       text        NOT NULL CHECK (kind IN ('kafka', 'redis', 'amqp', 'nats', 'mqtt', 'http')),
    options    jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.sinks IS
    'Brokers events are delivered to. options may hold secrets: superusers only.';

CREATE TABLE outbox.routes (
    pattern    text        PRIMARY KEY,
    -- No foreign key: pg_restore -j loads the two tables' rows in parallel,
    -- in either order. add_route() refuses an unknown sink, drop_sink() one
    -- that routes use; a route naming a sink that is not there delivers
    -- nothing (its events wait, as unrouted ones do).
    sink       text        NOT NULL,
    target     text,
    paused     boolean     NOT NULL DEFAULT false,
    format     text        NOT NULL DEFAULT 'raw'
               CHECK (format IN ('raw', 'cloudevents', 'debezium', 'debezium-expanded')),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX routes_sink_idx ON outbox.routes (sink);
COMMENT ON TABLE outbox.routes IS
    'Which sink each topic goes to; target NULL means the event''s topic.';

SELECT pg_catalog.pg_extension_config_dump('outbox.sinks', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.routes', '');
-- The default partition is a member (CREATE EXTENSION makes it): without
-- this, pg_dump would leave out the events it holds. The day partitions are
-- ordinary tables (maintain() makes them outside the extension) and are
-- dumped with their rows like any table.
SELECT pg_catalog.pg_extension_config_dump('outbox.events_default', '');

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

-- ---------------------------------------------------------------------------
-- Functions. Every one pins search_path.
-- ---------------------------------------------------------------------------

-- A role granted EXECUTE can emit without any privilege on outbox.events
-- (it cannot read, update or delete events): the C function writes its row
-- as this function's owner, as SECURITY DEFINER would, and pins search_path
-- itself where it could resolve a name. Neither is declared here because
-- the server would then do both around every call, at about half of what an
-- emit() statement costs (src/emit/event_insert.hpp).
CREATE FUNCTION outbox.emit(topic text, payload jsonb, key text DEFAULT NULL,
                            headers jsonb DEFAULT NULL)
RETURNS uuid
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'outbox_emit';
COMMENT ON FUNCTION outbox.emit(text, jsonb, text, jsonb) IS
    'Write one event in the caller''s transaction; returns its UUIDv7 id';

CREATE FUNCTION outbox.create_sink(name text, kind text, options jsonb)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_create_sink';
COMMENT ON FUNCTION outbox.create_sink(text, text, jsonb) IS
    'Define a kafka or redis sink; options are validated';

CREATE FUNCTION outbox.drop_sink(name text)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_drop_sink';
COMMENT ON FUNCTION outbox.drop_sink(text) IS 'Remove a sink no route uses';

-- format: how messages look at the broker (docs/formats.md): raw (the
-- contract's format), cloudevents, debezium or debezium-expanded.
CREATE FUNCTION outbox.add_route(pattern text, sink text, target text DEFAULT NULL,
                                 format text DEFAULT 'raw')
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_add_route';
COMMENT ON FUNCTION outbox.add_route(text, text, text, text) IS
    'Send topics matching pattern (* = any run of characters) to a sink, in a message format';

CREATE FUNCTION outbox.remove_route(pattern text)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_remove_route';
COMMENT ON FUNCTION outbox.remove_route(text) IS 'Remove the route with this pattern';

CREATE FUNCTION outbox.pause(pattern text)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_pause';
COMMENT ON FUNCTION outbox.pause(text) IS
    'Stop delivering events of the route with this pattern; they wait until resume()';

CREATE FUNCTION outbox.resume(pattern text)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_resume';
COMMENT ON FUNCTION outbox.resume(text) IS
    'Deliver the events of a paused route again, waiting ones first';

CREATE FUNCTION outbox.replay(since timestamptz, topic text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_replay';
COMMENT ON FUNCTION outbox.replay(timestamptz, text) IS
    'Publish again the retained published events emitted since a time (all, or one topic''s)';

CREATE FUNCTION outbox.route_for(topic text, OUT pattern text, OUT sink text,
                                 OUT target text, OUT format text)
RETURNS SETOF record
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_route_for';
COMMENT ON FUNCTION outbox.route_for(text) IS
    'The route events of this topic take now, with the target resolved; no row if none';

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

CREATE FUNCTION outbox.retry_dead(topic text DEFAULT NULL)
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
COMMENT ON FUNCTION outbox.retry_dead(text) IS
    'Put dead events (all, or one topic''s) back to pending; returns how many';

CREATE FUNCTION outbox.maintain(at timestamptz DEFAULT now())
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_maintain';
COMMENT ON FUNCTION outbox.maintain(timestamptz) IS
    'Create partitions ahead and drop those past retention, as if the time were at';

CREATE FUNCTION outbox.wakeup()
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_wakeup';
COMMENT ON FUNCTION outbox.wakeup() IS
    'Wake this database''s publishers when the current transaction commits';

CREATE FUNCTION outbox.publish_here()
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_publish_here';
COMMENT ON FUNCTION outbox.publish_here() IS
    'In a copy of another database (CREATE DATABASE ... TEMPLATE): publish its events from here';
REVOKE ALL ON FUNCTION outbox.publish_here() FROM PUBLIC;

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

CREATE FUNCTION outbox.publisher_preloaded()
RETURNS boolean
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_publisher_preloaded';
COMMENT ON FUNCTION outbox.publisher_preloaded() IS
    'Whether outbox is in shared_preload_libraries, so the publisher can run';

-- ---------------------------------------------------------------------------
-- Views
-- ---------------------------------------------------------------------------

-- From the running counts (outbox.counts) plus the never-tried events,
-- which the ready index holds: about one batch while a publisher runs, so
-- this reads a few hundred rows whatever is retained. The oldest waiting
-- event of a topic is one probe of events_waiting_idx in the partition of
-- the first day the counts show waiting events for it.
CREATE VIEW outbox.stats AS
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
COMMENT ON VIEW outbox.stats IS
    'Per topic: pending, published and dead events retained, and the age of the oldest pending';

-- Per route: the lag (age of its oldest pending event) and backlog, from
-- outbox.stats. Each topic goes to the route the publisher picks
-- (outbox.best_pattern). Topics no route matches are summed in one row with
-- pattern NULL.
CREATE VIEW outbox.route_lag AS
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

CREATE FUNCTION outbox.worker_stats(
    OUT database text, OUT pid int, OUT state text, OUT sinks text,
    OUT published bigint, OUT failures bigint, OUT last_error text,
    OUT last_error_at timestamptz, OUT last_batch_size int, OUT last_batch_ms float8,
    OUT publisher int, OUT key_slots int)
RETURNS SETOF record
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_worker_stats';
COMMENT ON FUNCTION outbox.worker_stats() IS 'The rows of outbox.workers';

-- One row per running publisher: what it is doing, its sinks' connection
-- states (names only: options hold secrets), what it published and failed
-- since it started, its last error, its last batch, its index among the
-- database's publishers and how many key slots it owns.
CREATE VIEW outbox.workers AS SELECT * FROM outbox.worker_stats();
COMMENT ON VIEW outbox.workers IS
    'The publishers: state, sinks, counts, last error, last batch, index, key slots owned';

-- Which key slot a key hashes into: hashtext(key) & 1023. With
-- outbox.workers > 1 each slot is owned by one publisher at a time, which
-- handles every event of the keys in it. The one definition of the hash
-- (src/shmem/key_slot.cpp): emit() uses it to wake the key's publisher, and the
-- claims call this function on the key column.
CREATE FUNCTION outbox.key_slot(key text) RETURNS int
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_key_slot';
COMMENT ON FUNCTION outbox.key_slot(text) IS
    'The key slot (0 .. 1023) of an event key; with outbox.workers > 1 one publisher owns each slot';

-- range_start/range_end come from the partition name (maintain() names each
-- partition after the day that is its bound); the default partition has none.
-- unpublished is counted from the events themselves (through the three
-- partial indexes, never walking published rows), not from outbox.counts:
-- it is what retention decides on, so it holds whatever wrote the rows.
CREATE VIEW outbox.partitions AS
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
COMMENT ON VIEW outbox.partitions IS
    'One row per partition of outbox.events, with its unpublished (pending + dead) count';

-- ---------------------------------------------------------------------------
-- Privileges: everything for the owner (outbox_writer, below) and superusers
-- only, except emit(), which a superuser grants to application roles (GRANT
-- EXECUTE ON FUNCTION outbox.emit TO app), and the functions granted here.
-- ---------------------------------------------------------------------------

GRANT USAGE ON SCHEMA outbox TO PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
-- Reads no table and shows nothing: outbox.route_lag calls it for whoever
-- may read that view.
GRANT EXECUTE ON FUNCTION outbox.best_pattern(text, text[]) TO PUBLIC;
-- Sinks, routes and their controls check their caller themselves (superusers
-- and the extension owner: src/catalog/sink_catalog.hpp) and then act as
-- outbox_writer, which owns them: anyone may call them, only those pass.
GRANT EXECUTE ON FUNCTION outbox.create_sink(text, text, jsonb), outbox.drop_sink(text),
    outbox.add_route(text, text, text, text), outbox.remove_route(text), outbox.pause(text),
    outbox.resume(text), outbox.replay(timestamptz, text), outbox.publish_here() TO PUBLIC;

-- ---------------------------------------------------------------------------
-- First partitions, and a word if the publisher cannot run here.
-- ---------------------------------------------------------------------------

SELECT outbox.maintain();
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

-- Publishing starts as soon as CREATE EXTENSION commits.
SELECT outbox.wakeup();

DO $$
BEGIN
    IF NOT outbox.publisher_preloaded() THEN
        RAISE WARNING 'outbox is not in shared_preload_libraries: events are stored but not published'
            USING HINT = 'Add outbox to shared_preload_libraries and restart the server; '
                         'pending events are published then.';
    END IF;
END
$$;
