-- Daily partitions: outbox.maintain(at) creates them ahead, drops them past
-- retention, and never drops one that holds pending or dead events.

SET timezone = 'UTC';

-- CREATE EXTENSION made today's partition and outbox.premake (3) days ahead.
SELECT count(*) AS partitions_from_today,
       min(name) = 'events_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') AS first_is_today,
       bool_and(range_end - range_start = '1 day') AS each_one_day
  FROM outbox.partitions WHERE range_start IS NOT NULL;
SELECT name, range_start, range_end FROM outbox.partitions WHERE range_start IS NULL;

-- The earlier files' events count as delivered from here on, so that the
-- moves in time below may drop today's partitions.
UPDATE outbox.events SET status = 'published', published_at = now();

-- Names and bounds are UTC days whatever the session's time zone.
SET timezone = 'America/New_York';
SET outbox.premake = 5;
SELECT outbox.maintain('2030-06-01 22:30:00-04');  -- 2030-06-02 02:30 UTC
SET timezone = 'UTC';
SELECT name, range_start, range_end, unpublished
  FROM outbox.partitions WHERE range_start >= '2030-01-01' ORDER BY name;
RESET outbox.premake;

-- Rows land in the partition of their UTC day, bounds included.
INSERT INTO outbox.events (id, topic, payload, created_at, status) VALUES
    (gen_random_uuid(), 'p.edge', '{"at": "start"}', '2030-06-03 00:00:00+00', 'published'),
    (gen_random_uuid(), 'p.edge', '{"at": "end"}',   '2030-06-03 23:59:59.999999+00', 'published');
SELECT tableoid::regclass AS partition, payload FROM outbox.events
 WHERE topic = 'p.edge' ORDER BY created_at;

-- Maintenance is idempotent.
SELECT outbox.maintain('2030-06-02 02:30:00+00');
SELECT count(*) FROM outbox.partitions WHERE range_start >= '2030-01-01';

-- Retention: at 2030-06-20 with 7 days, every partition ending on or before
-- 2030-06-13 goes, except those holding pending or dead events.
INSERT INTO outbox.events (id, topic, payload, created_at, status) VALUES
    (gen_random_uuid(), 'p.kept', '{}', '2030-06-04 12:00+00', 'pending'),
    (gen_random_uuid(), 'p.kept', '{}', '2030-06-05 12:00+00', 'dead'),
    (gen_random_uuid(), 'p.gone', '{}', '2030-06-06 12:00+00', 'published');
SELECT name, unpublished FROM outbox.partitions
 WHERE range_start >= '2030-01-01' ORDER BY name;
SET outbox.premake = 0;
SELECT outbox.maintain('2030-06-20 00:00:00+00');
SELECT name, unpublished FROM outbox.partitions
 WHERE range_start >= '2030-01-01' ORDER BY name;
SELECT topic, status FROM outbox.events WHERE topic IN ('p.kept', 'p.gone') ORDER BY topic, status;

-- Once their events are published, kept partitions go at the next run.
UPDATE outbox.events SET status = 'published', published_at = now()
 WHERE topic = 'p.kept';
SELECT outbox.maintain('2030-06-20 00:00:00+00');
SELECT name FROM outbox.partitions WHERE range_start >= '2030-01-01' ORDER BY name;

-- A partition is dropped only when its whole day is older than retention:
-- at 2030-07-21, the last second of 2030-06-20 is within 30 days 1 second,
-- and no longer within 30 days.
SET outbox.retention = '30 days 1 second';
SELECT outbox.maintain('2030-07-21 00:00:00+00');
SELECT name FROM outbox.partitions WHERE range_start >= '2030-01-01' ORDER BY name;
SET outbox.retention = '30 days';
SELECT outbox.maintain('2030-07-21 00:00:00+00');
SELECT name FROM outbox.partitions WHERE range_start >= '2030-01-01' ORDER BY name;
SELECT error_of($$SET outbox.retention = 'forever'$$);
SELECT error_of($$SET outbox.retention = '-1 day'$$);
RESET outbox.retention;
RESET outbox.premake;

-- emit() never fails for lack of a partition: with every partition for today
-- gone (their events marked published so retention may drop them), events
-- land in events_default ...
SET outbox.retention = '0';
UPDATE outbox.events SET status = 'published' WHERE status <> 'published';
SELECT outbox.maintain(now() + interval '10 days');
RESET outbox.retention;
SELECT count(*) AS partitions_covering_now
  FROM outbox.partitions WHERE now() >= range_start AND now() < range_end;
SELECT outbox.emit('p.default', '{"n": 1}') IS NOT NULL AS emitted;
SELECT tableoid::regclass AS partition FROM outbox.events WHERE topic = 'p.default';
-- ... and the next maintenance moves them into their day's new partition.
SELECT outbox.maintain();
SELECT tableoid::regclass::text = 'outbox.events_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')
       AS moved_to_today, status
  FROM outbox.events WHERE topic = 'p.default';
SELECT unpublished FROM outbox.partitions WHERE name = 'events_default';

-- Rows stranded in the default partition for days older than retention:
-- published ones are deleted, pending ones kept with a WARNING.
INSERT INTO outbox.events (id, topic, payload, created_at, status) VALUES
    (gen_random_uuid(), 'p.old', '{}', '2020-01-01 10:00+00', 'published'),
    (gen_random_uuid(), 'p.old', '{}', '2020-01-02 10:00+00', 'pending');
SELECT tableoid::regclass AS partition, created_at, status FROM outbox.events
 WHERE topic = 'p.old' ORDER BY created_at;
SELECT outbox.maintain();
SELECT tableoid::regclass AS partition, created_at, status FROM outbox.events
 WHERE topic = 'p.old' ORDER BY created_at;
DELETE FROM outbox.events WHERE topic = 'p.old';

-- Rows dated -infinity or infinity (possible only by hand) belong to no day:
-- they stay in the default partition, and maintenance goes on around them.
INSERT INTO outbox.events (id, topic, payload, created_at, status) VALUES
    (gen_random_uuid(), 'p.inf', '{}', 'infinity', 'published'),
    (gen_random_uuid(), 'p.inf', '{}', '-infinity', 'pending');
SELECT error_of($$SELECT outbox.maintain()$$) AS maintain_beside_infinite_dates;
SELECT tableoid::regclass AS partition, created_at, status FROM outbox.events
 WHERE topic = 'p.inf' ORDER BY created_at;
DELETE FROM outbox.events WHERE topic = 'p.inf';

SELECT error_of($$SELECT outbox.maintain(NULL)$$);
SELECT error_of($$SELECT outbox.maintain('infinity')$$);
SELECT error_of($$SELECT outbox.maintain('-infinity')$$);

-- A view on a partition past retention (any role may create one, a
-- temporary one included) keeps that partition, with a WARNING naming the
-- view; maintenance goes on with the rest: the other day past retention is
-- dropped and the next day made. Once the view is gone, so is the day.
-- (Every event published first: no other day is kept with a WARNING.)
UPDATE outbox.events SET status = 'published', published_at = now()
 WHERE status <> 'published';
SET outbox.premake = 0;
SELECT outbox.maintain('2031-01-01 12:00:00+00');
SELECT outbox.maintain('2031-01-02 12:00:00+00');
CREATE TEMP VIEW regress_pin AS SELECT id FROM outbox.events_p20310101;
SET outbox.retention = '0';
SELECT outbox.maintain('2031-01-03 12:00:00+00');
SELECT name FROM outbox.partitions WHERE range_start >= '2031-01-01' ORDER BY name;
DROP VIEW regress_pin;
SELECT outbox.maintain('2031-01-03 12:00:00+00');
SELECT name FROM outbox.partitions WHERE range_start >= '2031-01-01' ORDER BY name;
RESET outbox.retention;
RESET outbox.premake;
SELECT outbox.maintain();
