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

-- A row trigger on outbox.events makes emit() refuse, writing nothing
-- (emit_runs_only_built_in_code tests every such object); dropped, emit()
-- writes again.
CREATE FUNCTION public.note_event() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE NOTICE 'trigger saw topic %', NEW.topic;
    RETURN NEW;
END
$$;
CREATE TRIGGER note_event BEFORE INSERT ON outbox.events
    FOR EACH ROW EXECUTE FUNCTION public.note_event();
SELECT public.error_of($$SELECT outbox.emit('direct.trigger', '{}')$$);
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

-- emit() the same event once each way, the direct write first, then the
-- INSERT: the INSERT's row, and whether the direct write left the same one
-- (every column but id and created_at, in the same partition).
CREATE FUNCTION public.emit_both_ways(p_topic text, p_key text DEFAULT 'k')
RETURNS TABLE (status text, attempts int, published_at_set boolean, last_error text,
               next_attempt_at timestamptz, same_both_ways boolean)
LANGUAGE plpgsql
SET outbox.emit_direct_insert = on
AS $$
DECLARE
    direct_id uuid;
    insert_id uuid;
BEGIN
    direct_id := outbox.emit(p_topic, '{"n": 1}', p_key, '{"h": "v"}');
    SET LOCAL outbox.emit_direct_insert = off;
    insert_id := outbox.emit(p_topic, '{"n": 1}', p_key, '{"h": "v"}');
    RETURN QUERY
    SELECT i.status, i.attempts, i.published_at IS NOT NULL, i.last_error::text,
           i.next_attempt_at,
           (d.topic, d.key, d.payload, d.headers, d.status, d.attempts, d.published_at,
            d.last_error, d.next_attempt_at, d.tableoid)
           IS NOT DISTINCT FROM
           (i.topic, i.key, i.payload, i.headers, i.status, i.attempts, i.published_at,
            i.last_error, i.next_attempt_at, i.tableoid)
      FROM outbox.events d, outbox.events i
     WHERE d.id = direct_id AND i.id = insert_id;
END
$$;
-- The error of the same emit() each way, the direct write first, then the
-- INSERT (the partition's name, which holds today's date, masked).
CREATE FUNCTION public.emit_errors(p_topic text, p_key text DEFAULT 'k')
RETURNS TABLE (way text, error text)
LANGUAGE plpgsql
SET outbox.emit_direct_insert = on
AS $$
DECLARE
    call text := format('SELECT outbox.emit(%L, %L, %L)', p_topic, '{}', p_key);
BEGIN
    way := 'direct write';
    error := regexp_replace(public.error_of(call), 'events_p[0-9]{8}', 'events_pYYYYMMDD');
    RETURN NEXT;
    SET LOCAL outbox.emit_direct_insert = off;
    way := 'INSERT';
    error := regexp_replace(public.error_of(call), 'events_p[0-9]{8}', 'events_pYYYYMMDD');
    RETURN NEXT;
END
$$;

-- A default set on outbox.events is what emit() writes, as the INSERT does,
-- for each column emit() leaves to its default. A constant is written
-- straight into the partition (the INSERT's plan holds that very constant);
-- any other default is an expression only the INSERT evaluates, so emit()
-- goes through the INSERT while it is set. Each one dropped or restored,
-- emit() writes directly again, the extension's own row.
BEGIN;
ALTER TABLE outbox.events ALTER COLUMN status SET DEFAULT 'published';
SET client_min_messages = debug1;
SELECT * FROM public.emit_both_ways('default.status');
RESET client_min_messages;
ALTER TABLE outbox.events ALTER COLUMN status SET DEFAULT 'pending';
ALTER TABLE outbox.events ALTER COLUMN attempts SET DEFAULT 3;
SET client_min_messages = debug1;
SELECT * FROM public.emit_both_ways('default.attempts');
RESET client_min_messages;
ALTER TABLE outbox.events ALTER COLUMN attempts SET DEFAULT 0;
ALTER TABLE outbox.events ALTER COLUMN published_at SET DEFAULT now();
SET client_min_messages = debug1;
SELECT * FROM public.emit_both_ways('default.published_at');
RESET client_min_messages;
ALTER TABLE outbox.events ALTER COLUMN published_at DROP DEFAULT;
ALTER TABLE outbox.events ALTER COLUMN last_error SET DEFAULT 'not tried yet';
SET client_min_messages = debug1;
SELECT * FROM public.emit_both_ways('default.last_error');
RESET client_min_messages;
ALTER TABLE outbox.events ALTER COLUMN last_error DROP DEFAULT;
ALTER TABLE outbox.events ALTER COLUMN next_attempt_at SET DEFAULT 'infinity';
SET client_min_messages = debug1;
SELECT * FROM public.emit_both_ways('default.next_attempt_at');
RESET client_min_messages;
ALTER TABLE outbox.events ALTER COLUMN next_attempt_at DROP DEFAULT;
SET client_min_messages = debug1;
SELECT * FROM public.emit_both_ways('default.restored');
RESET client_min_messages;
-- The rows that are not pending and never tried got the index entries the
-- INSERT gives them (retry and waiting for 'infinity', none when published).
SELECT public.indexes_complete();
ROLLBACK;

-- attempts made an identity column: the INSERT takes the sequence's next
-- value, and so does emit().
BEGIN;
ALTER TABLE outbox.events ALTER COLUMN attempts DROP DEFAULT,
    ALTER COLUMN attempts ADD GENERATED BY DEFAULT AS IDENTITY;
SET client_min_messages = debug1;
SELECT outbox.emit('default.identity', '{}') AS id \gset
RESET client_min_messages;
SELECT attempts FROM outbox.events WHERE id = :'id';
ROLLBACK;

-- status without a default: the INSERT fails on its NOT NULL, and so does
-- emit().
BEGIN;
ALTER TABLE outbox.events ALTER COLUMN status DROP DEFAULT;
SET client_min_messages = debug1;
SELECT * FROM public.emit_errors('default.none');
RESET client_min_messages;
ROLLBACK;

-- A default set on the day's partition only is not the INSERT's, which
-- routes through outbox.events and takes its defaults; nor emit()'s.
BEGIN;
DO $$
BEGIN
    EXECUTE (SELECT format('ALTER TABLE outbox.%I ALTER COLUMN status SET DEFAULT %L',
                           name, 'dead')
               FROM outbox.partitions WHERE now() >= range_start AND now() < range_end);
END
$$;
SET client_min_messages = debug1;
SELECT * FROM public.emit_both_ways('default.partition');
RESET client_min_messages;
ROLLBACK;

-- A default that is built-in code but not a constant: the INSERT evaluates
-- it, and so does emit(), through the INSERT.
BEGIN;
ALTER TABLE outbox.events ALTER COLUMN last_error SET DEFAULT lower('FROM THE DEFAULT') || '';
SET client_min_messages = debug1;
SELECT * FROM public.emit_both_ways('default.expression');
RESET client_min_messages;
ROLLBACK;

-- Every CHECK constraint of the partition holds for emit()'s row as for the
-- INSERT's, whatever its name: events_status_check replaced by one that
-- refuses pending events refuses emit(), with the INSERT's error; replaced
-- by one on topic, it refuses that topic and lets every other through, the
-- row the INSERT writes. The extension's own constraint back, emit() writes
-- directly again.
BEGIN;
TRUNCATE outbox.events;
ALTER TABLE outbox.events DROP CONSTRAINT events_status_check,
    ADD CONSTRAINT events_status_check CHECK (status = 'published');
SET client_min_messages = debug1;
SELECT * FROM public.emit_errors('check.status');
RESET client_min_messages;
ALTER TABLE outbox.events DROP CONSTRAINT events_status_check,
    ADD CONSTRAINT events_status_check CHECK (topic <> 'forbidden');
SET client_min_messages = debug1;
SELECT * FROM public.emit_errors('forbidden');
SELECT * FROM public.emit_both_ways('allowed');
RESET client_min_messages;
ALTER TABLE outbox.events DROP CONSTRAINT events_status_check,
    ADD CONSTRAINT events_status_check CHECK (status IN ('pending', 'published', 'dead'));
SET client_min_messages = debug1;
SELECT * FROM public.emit_both_ways('check.restored');
RESET client_min_messages;
ROLLBACK;

-- A CHECK of the user's on topic, besides the extension's.
BEGIN;
ALTER TABLE outbox.events ADD CONSTRAINT topic_allowed CHECK (topic <> 'forbidden');
SET client_min_messages = debug1;
SELECT * FROM public.emit_errors('forbidden');
SELECT * FROM public.emit_both_ways('allowed');
RESET client_min_messages;
ROLLBACK;

-- A NOT VALID constraint holds for new rows, emit()'s too.
BEGIN;
ALTER TABLE outbox.events ADD CONSTRAINT no_pending CHECK (status <> 'pending') NOT VALID;
SET client_min_messages = debug1;
SELECT * FROM public.emit_errors('check.not_valid');
RESET client_min_messages;
ROLLBACK;

-- A constraint on the day's partition only holds for the rows routed there.
BEGIN;
DO $$
BEGIN
    EXECUTE (SELECT format('ALTER TABLE outbox.%I ADD CONSTRAINT key_allowed CHECK (%s)',
                           name, $c$key <> 'refused'$c$)
               FROM outbox.partitions WHERE now() >= range_start AND now() < range_end);
END
$$;
SET client_min_messages = debug1;
SELECT * FROM public.emit_errors('check.partition', 'refused');
SELECT * FROM public.emit_both_ways('check.partition', 'accepted');
RESET client_min_messages;
ROLLBACK;

-- A constraint over several columns, some emit() supplies, some it leaves
-- to their defaults.
BEGIN;
ALTER TABLE outbox.events ADD CONSTRAINT keyed_or_tried
    CHECK (key IS NOT NULL OR attempts > 0) NOT VALID;
SET client_min_messages = debug1;
SELECT * FROM public.emit_errors('check.columns', NULL);
SELECT * FROM public.emit_both_ways('check.columns', 'k');
RESET client_min_messages;
ROLLBACK;

-- A constraint on tableoid sees the partition the row goes to.
BEGIN;
ALTER TABLE outbox.events ADD CONSTRAINT nowhere CHECK (tableoid = 0) NOT VALID;
SET client_min_messages = debug1;
SELECT * FROM public.emit_errors('check.tableoid');
RESET client_min_messages;
ROLLBACK;

-- An error the INSERT raises too reads the same both ways, context line and
-- all: a unique index of the user's (on the day's partition) that already
-- holds the key, and a CHECK that fails to evaluate for the row.
BEGIN;
DO $$
BEGIN
    EXECUTE (SELECT format('CREATE UNIQUE INDEX events_key_once ON outbox.%I (key) %s',
                           name, $w$WHERE topic = 'error.unique'$w$)
               FROM outbox.partitions WHERE now() >= range_start AND now() < range_end);
END
$$;
SET client_min_messages = debug1;
SELECT outbox.emit('error.unique', '{}', 'once') IS NOT NULL AS emitted;
RESET client_min_messages;
SAVEPOINT direct_write;
SELECT outbox.emit('error.unique', '{}', 'once');
ROLLBACK TO SAVEPOINT direct_write;
RELEASE SAVEPOINT direct_write;
SET LOCAL outbox.emit_direct_insert = off;
SELECT outbox.emit('error.unique', '{}', 'once');
ROLLBACK;
BEGIN;
ALTER TABLE outbox.events ADD CONSTRAINT numbered CHECK ((payload->>'n')::int > 0) NOT VALID;
SET client_min_messages = debug1;
SELECT outbox.emit('error.check', '{"n": 1}') IS NOT NULL AS emitted;
RESET client_min_messages;
SAVEPOINT direct_write;
SELECT outbox.emit('error.check', '{"n": "one"}');
ROLLBACK TO SAVEPOINT direct_write;
RELEASE SAVEPOINT direct_write;
SET LOCAL outbox.emit_direct_insert = off;
SELECT outbox.emit('error.check', '{"n": "one"}');
ROLLBACK;

-- A CHECK that fails to plan (1/0, folded) fails every INSERT, but only
-- once NOT NULL holds: a NULL key in a NOT NULL column is reported first,
-- by emit() too; with a key, the planning error both ways.
BEGIN;
TRUNCATE outbox.events;
ALTER TABLE outbox.events ALTER COLUMN key SET NOT NULL;
ALTER TABLE outbox.events ADD CONSTRAINT unplannable CHECK (topic <> 'x' OR 1 / 0 = 0) NOT VALID;
SET client_min_messages = debug1;
SELECT * FROM public.emit_errors('check.unplannable', NULL);
SELECT * FROM public.emit_errors('check.unplannable', 'k');
RESET client_min_messages;
ROLLBACK;

-- A CHECK of built-in code that sends a notice (to_tsquery() of stop
-- words only) runs once for each row, as in the INSERT: once for each
-- emit(), also when it refuses the row. (A CHECK calling a function of the
-- user's, or one that is not immutable, makes emit() refuse:
-- emit_runs_only_built_in_code.)
BEGIN;
ALTER TABLE outbox.events ADD CONSTRAINT has_lexemes
    CHECK (numnode(to_tsquery('english', topic)) > 0) NOT VALID;
SET client_min_messages = debug1;
SELECT * FROM public.emit_errors('the');
RESET client_min_messages;
ROLLBACK;

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
DROP FUNCTION public.emit_both_ways(text, text);
DROP FUNCTION public.emit_errors(text, text);
