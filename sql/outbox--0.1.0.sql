-- outbox 0.1.0: the transactional outbox inside PostgreSQL.
-- Install script. Never edit it once released: ship outbox--0.1.0--X.Y.Z.sql.

\echo Use "CREATE EXTENSION outbox" to load this file. \quit

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

CREATE TABLE outbox.events_default PARTITION OF outbox.events DEFAULT;

-- ---------------------------------------------------------------------------
-- Sinks and routes (configuration: kept by pg_dump)
-- ---------------------------------------------------------------------------

CREATE TABLE outbox.sinks (
    name       text        PRIMARY KEY,
    kind       text        NOT NULL CHECK (kind IN ('kafka', 'redis')),
    options    jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.sinks IS
    'Brokers events are delivered to. options may hold secrets: owner-only.';

CREATE TABLE outbox.routes (
    pattern    text        PRIMARY KEY,
    sink       text        NOT NULL REFERENCES outbox.sinks (name),
    target     text,
    paused     boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX routes_sink_idx ON outbox.routes (sink);
COMMENT ON TABLE outbox.routes IS
    'Which sink each topic goes to; target NULL means the event''s topic.';

SELECT pg_catalog.pg_extension_config_dump('outbox.sinks', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.routes', '');

-- ---------------------------------------------------------------------------
-- Functions. Every one pins search_path.
-- ---------------------------------------------------------------------------

-- SECURITY DEFINER so a role granted EXECUTE can emit without any privilege
-- on outbox.events (it cannot read, update or delete events).
CREATE FUNCTION outbox.emit(topic text, payload jsonb, key text DEFAULT NULL,
                            headers jsonb DEFAULT NULL)
RETURNS uuid
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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

CREATE FUNCTION outbox.add_route(pattern text, sink text, target text DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_add_route';
COMMENT ON FUNCTION outbox.add_route(text, text, text) IS
    'Send topics matching pattern (* = any run of characters) to a sink';

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

CREATE FUNCTION outbox.route_for(topic text,
                                 OUT pattern text, OUT sink text, OUT target text)
RETURNS SETOF record
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_route_for';
COMMENT ON FUNCTION outbox.route_for(text) IS
    'The route events of this topic take now, with the target resolved; no row if none';

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

CREATE VIEW outbox.stats AS
SELECT topic,
       count(*) FILTER (WHERE status = 'pending')   AS pending,
       count(*) FILTER (WHERE status = 'published') AS published,
       count(*) FILTER (WHERE status = 'dead')      AS dead,
       now() - min(created_at) FILTER (WHERE status = 'pending') AS oldest_pending_age
  FROM outbox.events
 GROUP BY topic;
COMMENT ON VIEW outbox.stats IS 'Per topic: pending, published and dead events retained';

CREATE FUNCTION outbox.worker_stats(
    OUT database text, OUT pid int, OUT state text, OUT sinks text,
    OUT published bigint, OUT failures bigint, OUT last_error text,
    OUT last_error_at timestamptz, OUT last_batch_size int, OUT last_batch_ms float8)
RETURNS SETOF record
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_worker_stats';
COMMENT ON FUNCTION outbox.worker_stats() IS 'The rows of outbox.workers';

-- One row per running publisher: what it is doing, its sinks' connection
-- states (names only: options hold secrets), what it published and failed
-- since it started, its last error, and its last batch.
CREATE VIEW outbox.workers AS SELECT * FROM outbox.worker_stats();
COMMENT ON VIEW outbox.workers IS 'The publishers: state, sinks, counts, last error, last batch';

-- range_start/range_end come from the partition name (maintain() names each
-- partition after the day that is its bound); the default partition has none.
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
-- Privileges: everything owner-only except emit(), which is granted by the
-- owner to application roles (GRANT EXECUTE ON FUNCTION outbox.emit TO app).
-- ---------------------------------------------------------------------------

GRANT USAGE ON SCHEMA outbox TO PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- First partitions, and a word if the publisher cannot run here.
-- ---------------------------------------------------------------------------

SELECT outbox.maintain();
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
