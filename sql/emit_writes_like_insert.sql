-- emit() writes its row straight into the day's partition (event_insert.cpp)
-- rather than through an INSERT statement. What it leaves behind must be
-- exactly what the INSERT would: the same row, every index entry, the same
-- errors; and whenever outbox.events is changed so that a direct write would
-- differ (a column of the user's, a row trigger, ...), emit() goes through
-- the INSERT again. A DEBUG1 line says which way it writes, once each time
-- it looks at the table anew.
CREATE EXTENSION IF NOT EXISTS amcheck;

-- Every index of every partition holds exactly the entries its heap calls
-- for (amcheck's heapallindexed walks the heap and looks each row up).
CREATE FUNCTION public.indexes_complete() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    idx regclass;
BEGIN
    FOR idx IN SELECT i.indexrelid::regclass
                 FROM pg_index i
                 JOIN pg_inherits h ON h.inhrelid = i.indrelid
                 JOIN pg_class c ON c.oid = i.indexrelid
                WHERE h.inhparent = 'outbox.events'::regclass AND c.relkind = 'i'
    LOOP
        PERFORM bt_index_check(idx, true);
    END LOOP;
    RETURN true;
END
$$;

SET client_min_messages = debug1;
-- The first emit() of a session looks at the table.
SELECT outbox.emit('direct.same', '{"a": 1}', 'k', '{"h": "v"}') IS NOT NULL AS emitted;
-- With the direct write off, the same call goes through the INSERT.
SET outbox.emit_direct_insert = off;
SELECT outbox.emit('direct.same', '{"a": 1}', 'k', '{"h": "v"}') IS NOT NULL AS emitted;
RESET outbox.emit_direct_insert;
RESET client_min_messages;

-- Both ways store the same row, in the same partition.
SELECT count(*) AS events,
       count(DISTINCT (topic, key, payload, headers, status, attempts, published_at,
                       last_error, next_attempt_at, tableoid, created_at::date)) AS distinct_rows
  FROM outbox.events WHERE topic = 'direct.same';
SELECT status, attempts, next_attempt_at IS NULL AS never_tried,
       tableoid <> 'outbox.events_default'::regclass AS in_day_partition
  FROM outbox.events WHERE topic = 'direct.same' LIMIT 1;
-- And the index entries the INSERT would make (the claims' ready index
-- has both, the other partial indexes neither).
SELECT public.indexes_complete();

-- The event is visible to the next statement of the same function, as an
-- INSERT's row is.
DO $$
DECLARE
    v_id uuid;
    n int;
BEGIN
    v_id := outbox.emit('direct.visible', '{}');
    SELECT count(*) INTO n FROM outbox.events WHERE id = v_id;
    RAISE NOTICE 'the next statement sees % event(s)', n;
END
$$;

-- NULL key and headers, large payloads (stored out of line) and many rows
-- in one statement.
SELECT count(outbox.emit('direct.many', jsonb_build_object('n', n, 'pad', repeat('x', n * 10)),
                         CASE WHEN n % 2 = 0 THEN 'k' || n END,
                         CASE WHEN n % 3 = 0 THEN jsonb_build_object('n', n::text) END))
  FROM generate_series(1, 3000) AS n;
SELECT count(*) AS events, count(key) AS with_key, count(headers) AS with_headers,
       bool_and(payload = jsonb_build_object('n', (payload->>'n')::int,
                                             'pad', repeat('x', (payload->>'n')::int * 10))
                AND key IS NOT DISTINCT FROM CASE WHEN (payload->>'n')::int % 2 = 0
                                                  THEN 'k' || (payload->>'n') END)
         AS rows_intact
  FROM outbox.events WHERE topic = 'direct.many';
SELECT public.indexes_complete();

-- An index the user adds gets entries from the next emit() on.
CREATE INDEX events_topic_idx ON outbox.events (topic, key);
SELECT outbox.emit('direct.indexed', '{}', 'k') IS NOT NULL AS emitted;
SELECT public.indexes_complete();
DROP INDEX outbox.events_topic_idx;

-- A column of the user's, with a default: emit() goes through the INSERT,
-- so the default is filled in. Dropped again, emit() writes directly again.
SET client_min_messages = debug1;
ALTER TABLE outbox.events ADD COLUMN tenant text NOT NULL DEFAULT 'acme';
SELECT outbox.emit('direct.column', '{}') AS id \gset
SELECT tenant FROM outbox.events WHERE id = :'id';
ALTER TABLE outbox.events DROP COLUMN tenant;
SELECT outbox.emit('direct.column', '{}') IS NOT NULL AS emitted;
RESET client_min_messages;
SELECT count(*) AS events FROM outbox.events WHERE topic = 'direct.column';
SELECT public.indexes_complete();

-- A row trigger on outbox.events fires for emit() as for an INSERT.
CREATE FUNCTION public.note_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'trigger saw topic %', NEW.topic;
    RETURN NEW;
END
$$;
CREATE TRIGGER note_event BEFORE INSERT ON outbox.events
    FOR EACH ROW EXECUTE FUNCTION public.note_event();
SELECT outbox.emit('direct.trigger', '{}') IS NOT NULL AS emitted;
DROP TRIGGER note_event ON outbox.events;
SELECT outbox.emit('direct.trigger', '{}') IS NOT NULL AS emitted;
SELECT count(*) AS events FROM outbox.events WHERE topic = 'direct.trigger';

-- A NOT NULL the user puts on key is enforced for emit() as for an INSERT.
BEGIN;
TRUNCATE outbox.events;
ALTER TABLE outbox.events ALTER COLUMN key SET NOT NULL;
SELECT regexp_replace(public.error_of($$SELECT outbox.emit('direct.notnull', '{}')$$),
                      'events_p[0-9]{8}', 'events_pYYYYMMDD') AS error;
SELECT outbox.emit('direct.notnull', '{}', 'k') IS NOT NULL AS emitted;
SELECT count(*) AS events FROM outbox.events WHERE topic = 'direct.notnull';
ROLLBACK;

-- No partition for today: the event lands in the default partition, also
-- when that happens inside the transaction that emitted before.
BEGIN;
SELECT outbox.emit('direct.default', '{}') IS NOT NULL AS emitted;
DO $$
BEGIN
    EXECUTE (SELECT format('ALTER TABLE outbox.events DETACH PARTITION outbox.%I', name)
               FROM outbox.partitions WHERE now() >= range_start AND now() < range_end);
END
$$;
SELECT outbox.emit('direct.default', '{}') AS id \gset
SELECT tableoid::regclass AS partition FROM outbox.events WHERE id = :'id';
SELECT public.indexes_complete();
ROLLBACK;

-- emit() and maintenance in one transaction: emit() holds nothing that
-- keeps maintain() from creating, attaching or moving partitions.
BEGIN;
SELECT outbox.emit('direct.maintain', '{}') IS NOT NULL AS emitted;
SELECT outbox.maintain(now() + interval '1 day');
SELECT outbox.emit('direct.maintain', '{}') IS NOT NULL AS emitted;
COMMIT;
SELECT count(*) AS events FROM outbox.events WHERE topic = 'direct.maintain';

-- After TRUNCATE (new files for every partition) in the same transaction.
BEGIN;
TRUNCATE outbox.events;
SELECT outbox.emit('direct.truncated', '{}') IS NOT NULL AS emitted;
SELECT count(*) AS events FROM outbox.events;
SELECT public.indexes_complete();
ROLLBACK;

-- Rolled-back subtransactions take their events with them; the next emit()
-- in the transaction still writes.
BEGIN;
SAVEPOINT s;
SELECT outbox.emit('direct.savepoint', '{}') IS NOT NULL AS emitted;
ROLLBACK TO SAVEPOINT s;
SELECT outbox.emit('direct.savepoint', '{"kept": true}') IS NOT NULL AS emitted;
COMMIT;
SELECT payload FROM outbox.events WHERE topic = 'direct.savepoint';

-- A read-only transaction refuses emit() as it refuses an INSERT.
BEGIN READ ONLY;
SELECT public.error_of($$SELECT outbox.emit('direct.readonly', '{}')$$);
ROLLBACK;
SELECT count(*) AS events FROM outbox.events WHERE topic = 'direct.readonly';

-- Nothing above left a reference or lock behind: DROP of the extension's
-- table works in the session that emitted; emit() then writes into the
-- tables CREATE EXTENSION makes anew, and after the ROLLBACK into the old
-- ones again.
BEGIN;
SELECT outbox.emit('direct.drop', '{}') IS NOT NULL AS emitted;
DROP EXTENSION outbox;
CREATE EXTENSION outbox;
SELECT outbox.emit('direct.recreated', '{}') IS NOT NULL AS emitted;
SELECT topic FROM outbox.events;
ROLLBACK;
SELECT outbox.emit('direct.after_rollback', '{}') IS NOT NULL AS emitted;
SELECT topic, count(*) AS events FROM outbox.events
 WHERE topic IN ('direct.drop', 'direct.recreated', 'direct.after_rollback')
 GROUP BY topic ORDER BY topic;
SELECT public.indexes_complete();

DROP FUNCTION public.indexes_complete();
DROP FUNCTION public.note_event();
