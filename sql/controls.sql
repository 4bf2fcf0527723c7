-- Controls: pause(pattern) / resume(pattern) for a route, replay(since, topic).

-- pause() and resume() flip a route's flag; the publisher parks the events of
-- a paused route and lets them flow, in order, on resume.
SELECT outbox.pause('orders.*');
SELECT pattern, paused FROM outbox.routes WHERE pattern IN ('orders.*', 'orders.created')
 ORDER BY pattern;
SELECT outbox.pause('orders.*');  -- pausing twice is harmless
SELECT outbox.resume('orders.*');
SELECT pattern, paused FROM outbox.routes WHERE pattern = 'orders.*';
SELECT error_of($$SELECT outbox.pause('no.such.*')$$);
SELECT error_of($$SELECT outbox.resume('no.such.*')$$);
SELECT error_of($$SELECT outbox.pause(NULL)$$);

-- replay() puts published events emitted since a time back to pending, due
-- at once, with their attempts reset; it returns how many.
CREATE TEMP TABLE replayed AS
SELECT outbox.emit('replay.a', jsonb_build_object('n', n)) AS id FROM generate_series(1, 3) n;
INSERT INTO replayed
SELECT outbox.emit('replay.b', jsonb_build_object('n', n)) FROM generate_series(1, 2) n;
UPDATE outbox.events SET status = 'published', published_at = now(), attempts = 2
 WHERE id IN (SELECT id FROM replayed);
SELECT outbox.replay(now() + interval '1 hour') AS nothing_that_recent;
SELECT outbox.replay(now() - interval '1 hour', 'replay.b') AS one_topic;
SELECT topic, status, attempts, next_attempt_at IS NOT NULL AS due
  FROM outbox.events WHERE id IN (SELECT id FROM replayed) ORDER BY topic, id;
SELECT outbox.replay(now() - interval '1 hour') AS all_topics;
SELECT count(*) FILTER (WHERE status = 'pending') AS pending FROM outbox.events
 WHERE id IN (SELECT id FROM replayed);
SELECT error_of($$SELECT outbox.replay(NULL)$$);

-- The database outbox publishes from is this one: publish_here() has
-- nothing to do (a copy made with CREATE DATABASE ... TEMPLATE names its
-- template, and publishes nothing until publish_here(): TAP 067). Only
-- superusers and the extension owner may call it.
SELECT database = (SELECT oid FROM pg_database WHERE datname = current_database()) AS home_is_here
  FROM outbox.home;
SELECT outbox.publish_here();
CREATE ROLE regress_outbox_stranger;
SET ROLE regress_outbox_stranger;
SELECT error_of($$SELECT outbox.publish_here()$$);
SELECT error_of($$SELECT * FROM outbox.home$$);
RESET ROLE;
DROP ROLE regress_outbox_stranger;
