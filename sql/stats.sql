-- outbox.stats stays exact through every change an event goes through, while
-- reading running counts instead of the events (outbox.counts, kept by
-- statement triggers); outbox.route_lag gives each route its backlog and lag;
-- outbox.recount() rebuilds the counts.
SET timezone = 'UTC';

CREATE FUNCTION stats_of(prefix text)
RETURNS TABLE (topic text, pending bigint, published bigint, dead bigint, has_age boolean)
LANGUAGE sql AS $$
    SELECT topic, pending, published, dead, oldest_pending_age IS NOT NULL
      FROM outbox.stats WHERE topic LIKE prefix || '%' ORDER BY topic
$$;
-- What outbox.stats must say, counted the slow way.
CREATE FUNCTION stats_counted(prefix text)
RETURNS TABLE (topic text, pending bigint, published bigint, dead bigint, has_age boolean)
LANGUAGE sql AS $$
    SELECT topic, count(*) FILTER (WHERE status = 'pending'),
           count(*) FILTER (WHERE status = 'published'),
           count(*) FILTER (WHERE status = 'dead'),
           bool_or(status = 'pending')
      FROM outbox.events WHERE topic LIKE prefix || '%' GROUP BY topic ORDER BY topic
$$;
CREATE FUNCTION stats_exact(prefix text) RETURNS boolean
LANGUAGE sql AS $$
    SELECT NOT EXISTS (SELECT * FROM stats_of(prefix) EXCEPT SELECT * FROM stats_counted(prefix))
       AND NOT EXISTS (SELECT * FROM stats_counted(prefix) EXCEPT SELECT * FROM stats_of(prefix))
$$;

-- Emitted events are pending, counted from the ready index (emit() itself
-- writes no count).
SELECT count(outbox.emit('st.orders', jsonb_build_object('n', n), 'k' || (n % 3)))
  FROM generate_series(1, 6) n;
SELECT count(outbox.emit('st.payments', '{}')) FROM generate_series(1, 4);
SELECT * FROM stats_of('st.');
SELECT count(*) AS counted_rows FROM outbox.counts WHERE topic LIKE 'st.%';

-- The publisher's outcomes, written to a partition by name as it does:
-- published, waiting for a retry, dead.
CREATE FUNCTION today_partition() RETURNS text LANGUAGE sql AS $$
    SELECT 'outbox.events_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')
$$;
DO $$
BEGIN
    EXECUTE format($q$UPDATE %s SET status = 'published', published_at = now()
                      WHERE topic = 'st.payments'$q$, today_partition());
    EXECUTE format($q$UPDATE %s SET attempts = 1, next_attempt_at = now() + interval '1 min'
                      WHERE topic = 'st.orders' AND key = 'k1'$q$, today_partition());
    EXECUTE format($q$UPDATE %s SET status = 'dead', attempts = 10
                      WHERE topic = 'st.orders' AND key = 'k2'$q$, today_partition());
END
$$;
SELECT * FROM stats_of('st.');
SELECT stats_exact('st.');

-- The oldest pending age covers waiting events too.
SELECT oldest_pending_age >= now() - (SELECT min(created_at) FROM outbox.events
                                       WHERE topic = 'st.orders' AND status = 'pending')
       AS age_of_oldest_pending
  FROM outbox.stats WHERE topic = 'st.orders';

-- retry_dead() and replay() move counts; so does an operator's own UPDATE
-- through outbox.events, and a DELETE.
SELECT outbox.retry_dead('st.orders');
SELECT outbox.replay('-infinity', 'st.payments');
SELECT stats_exact('st.');
UPDATE outbox.events SET status = 'dead' WHERE topic = 'st.payments' AND status = 'pending';
SELECT * FROM stats_of('st.');
DELETE FROM outbox.events WHERE topic = 'st.payments';
SELECT * FROM stats_of('st.');
SELECT stats_exact('st.');

-- A rolled-back change leaves the counts as they were.
BEGIN;
UPDATE outbox.events SET status = 'published' WHERE topic = 'st.orders';
SELECT * FROM stats_of('st.');
ROLLBACK;
SELECT stats_exact('st.');

-- Rows inserted through outbox.events that are not new pending events are
-- not counted until outbox.recount().
INSERT INTO outbox.events (id, topic, payload, status)
VALUES (gen_random_uuid(), 'st.imported', '{}', 'published');
SELECT * FROM stats_of('st.imported');
SELECT outbox.recount();
SELECT * FROM stats_of('st.imported');
SELECT stats_exact('st.');

-- TRUNCATE of a partition recounts.
CREATE TEMP TABLE saved AS SELECT * FROM outbox.events_default;
INSERT INTO outbox.events_default (id, topic, payload, created_at, status)
VALUES (gen_random_uuid(), 'st.old', '{}', '1999-01-01 12:00+00', 'published');
SELECT * FROM stats_of('st.old');
TRUNCATE outbox.events_default;
SELECT * FROM stats_of('st.old');
INSERT INTO outbox.events_default SELECT * FROM saved;

-- Per-route lag: each topic under the route route_for() picks; unrouted
-- topics in one row without a pattern.
SELECT outbox.create_sink('st_sink', 'kafka', '{"bootstrap.servers": "127.0.0.1:9"}');
SELECT outbox.add_route('st.*', 'st_sink');
SELECT outbox.add_route('st.orders', 'st_sink', 'orders-topic', 'debezium');
SELECT outbox.add_route('st.or*', 'st_sink');
SELECT pattern, sink, target, format, paused, topics, pending, dead,
       oldest_pending_age IS NOT NULL AS has_lag
  FROM outbox.route_lag WHERE pattern LIKE 'st%' ORDER BY pattern;
SELECT outbox.pause('st.orders');
SELECT pattern, paused, pending FROM outbox.route_lag WHERE pattern = 'st.orders';
-- Each topic is counted under exactly the route route_for() names.
SELECT s.topic, r.pattern = l.pattern AS same_route
  FROM outbox.stats s
  CROSS JOIN LATERAL outbox.route_for(s.topic) r
  JOIN LATERAL (SELECT pattern FROM outbox.route_lag) l ON l.pattern = r.pattern
 WHERE s.topic LIKE 'st.%' ORDER BY s.topic;
SELECT outbox.remove_route('st.*');
SELECT outbox.remove_route('st.or*');
SELECT outbox.remove_route('st.orders');
SELECT outbox.drop_sink('st_sink');

-- Events of no route show in one row.
SELECT pattern IS NULL AS unrouted, topics >= 1 AS has_topics, pending >= 5 AS has_pending
  FROM outbox.route_lag WHERE pattern IS NULL;

-- The counting trigger reads the events' columns as their types: fired on
-- another table whose columns have those names and other types, it stops
-- with an error instead of reading one type as another.
CREATE TABLE not_events (created_at timestamptz, topic text, status int, next_attempt_at timestamptz);
CREATE TRIGGER not_events_count AFTER INSERT ON not_events REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.count_changes();
SELECT error_of($$INSERT INTO not_events VALUES (now(), 't', 1, NULL)$$);
DROP TABLE not_events;
CREATE TABLE not_events (id int);
CREATE TRIGGER not_events_count AFTER INSERT ON not_events REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.count_changes();
SELECT error_of($$INSERT INTO not_events VALUES (1)$$);
DROP TABLE not_events;
SELECT error_of($$SELECT outbox.count_changes()$$);

-- Leave nothing behind for the next files.
DELETE FROM outbox.events WHERE topic LIKE 'st.%';
SELECT count(*) FROM stats_of('st.');
DROP FUNCTION stats_exact(text), stats_of(text), stats_counted(text), today_partition();
