-- outbox.emit(): what a committed, rolled-back or bad call leaves behind.

-- An emit returns a UUIDv7 and stores exactly what was given, pending, with
-- created_at the time of the call.
BEGIN;
SELECT outbox.emit('orders.created', '{"order": 1, "total": 9.5}', 'order-1',
                   '{"source": "regress"}') AS id \gset
SELECT substr(:'id', 15, 1) AS version,
       substr(:'id', 20, 1) IN ('8', '9', 'a', 'b') AS rfc_variant;
SELECT topic, key, payload, headers, status, attempts, published_at, last_error,
       next_attempt_at, created_at BETWEEN now() AND clock_timestamp() AS created_now
  FROM outbox.events WHERE id = :'id';
COMMIT;

-- The id's 48-bit millisecond timestamp is created_at's millisecond, so an
-- id tells which daily partition holds its event.
SELECT ('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint
         = floor(extract(epoch FROM created_at) * 1000)::bigint AS id_time_is_created_at
  FROM outbox.events WHERE id = :'id';

-- Ids from one session sort in emit order, even within one millisecond.
CREATE TEMP TABLE burst AS
SELECT n, outbox.emit('orders.burst', jsonb_build_object('n', n), 'k') AS id
  FROM generate_series(1, 2000) AS n;
SELECT count(*) AS events,
       count(DISTINCT id) AS distinct_ids,
       bool_and(rank_by_id = n) AS ids_follow_emit_order
  FROM (SELECT n, id, row_number() OVER (ORDER BY id) AS rank_by_id FROM burst) s;

-- NULL key and NULL headers are stored as NULL; an empty key is a key.
SELECT outbox.emit('orders.nokey', '{}') AS id \gset
SELECT key IS NULL AS key_null, headers IS NULL AS headers_null
  FROM outbox.events WHERE id = :'id';
SELECT outbox.emit('orders.emptykey', '{}', '') AS id \gset
SELECT key = '' AS empty_key FROM outbox.events WHERE id = :'id';

-- Any JSON value is a payload.
SELECT outbox.emit('t.scalar', '"just text"') AS id \gset
SELECT payload FROM outbox.events WHERE id = :'id';
SELECT outbox.emit('t.array', '[1, 2, {"x": null}]') AS id \gset
SELECT payload FROM outbox.events WHERE id = :'id';

-- Named arguments, as ORMs and stored procedures call it.
SELECT outbox.emit(topic => 't.named', payload => '{}', headers => '{"a": "b"}') AS id \gset
SELECT headers FROM outbox.events WHERE id = :'id';

-- A rolled-back transaction leaves nothing.
BEGIN;
SELECT outbox.emit('orders.rolledback', '{}') IS NOT NULL AS emitted;
ROLLBACK;
SELECT count(*) FROM outbox.events WHERE topic = 'orders.rolledback';

-- A rolled-back subtransaction takes its events, and only its events.
BEGIN;
SELECT outbox.emit('orders.sub', '{"step": "before"}') IS NOT NULL AS emitted;
SAVEPOINT s;
SELECT outbox.emit('orders.sub', '{"step": "inside"}') IS NOT NULL AS emitted;
ROLLBACK TO SAVEPOINT s;
SELECT outbox.emit('orders.sub', '{"step": "after"}') IS NOT NULL AS emitted;
COMMIT;
SELECT payload->>'step' AS step FROM outbox.events WHERE topic = 'orders.sub' ORDER BY id;

-- An exception block in PL/pgSQL is a subtransaction too.
DO $$
BEGIN
    PERFORM outbox.emit('orders.plpgsql', '{"kept": true}');
    BEGIN
        PERFORM outbox.emit('orders.plpgsql', '{"kept": false}');
        RAISE EXCEPTION 'business rule failed';
    EXCEPTION WHEN raise_exception THEN
        NULL;
    END;
END
$$;
SELECT payload FROM outbox.events WHERE topic = 'orders.plpgsql';

-- From a stored procedure that commits, and through a prepared statement.
CREATE PROCEDURE place_order(n int) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox.emit('orders.proc', jsonb_build_object('n', n), n::text);
    COMMIT;
    PERFORM outbox.emit('orders.proc', jsonb_build_object('n', n + 1), n::text);
    ROLLBACK;
END
$$;
CALL place_order(10);
SELECT payload FROM outbox.events WHERE topic = 'orders.proc';
PREPARE emit_stmt(text, jsonb, text, jsonb) AS SELECT outbox.emit($1, $2, $3, $4);
EXECUTE emit_stmt('orders.prepared', '{"p": 1}', 'k', NULL) \gset
EXECUTE emit_stmt('orders.prepared', '{"p": 2}', 'k', '{"h": "v"}') \gset
SELECT payload, headers FROM outbox.events WHERE topic = 'orders.prepared' ORDER BY id;

-- Bad topics: SQLSTATE 22023 naming the argument.
SELECT error_of($$SELECT outbox.emit(NULL, '{}')$$);
SELECT error_of($$SELECT outbox.emit('', '{}')$$);
SELECT error_of($$SELECT outbox.emit('orders created', '{}')$$);
SELECT error_of($$SELECT outbox.emit('orders/created', '{}')$$);
SELECT error_of($$SELECT outbox.emit('orders.*', '{}')$$);
SELECT error_of($$SELECT outbox.emit('zamówienia', '{}')$$);
SELECT error_of($$SELECT outbox.emit('a''b', '{}')$$);
SELECT error_of(format('SELECT outbox.emit(%L, %L)', repeat('t', 249), '{}'));
SELECT error_of(format('SELECT outbox.emit(%L, %L)', repeat('t', 250), '{}'));
SELECT error_of($$SELECT outbox.emit('Az09._-', '{}')$$);

-- Bad payloads.
SELECT error_of($$SELECT outbox.emit('t', NULL)$$);
SET outbox.max_payload_bytes = 8;
SELECT octet_length('{"a": 1}'::jsonb::text) AS bytes_as_text;
SELECT error_of($$SELECT outbox.emit('t.ok', '{"a": 1}')$$);
SELECT error_of($$SELECT outbox.emit('t.size', '{"a": 12}')$$);
RESET outbox.max_payload_bytes;
SELECT error_of($$SELECT outbox.emit('t.ok', '{"a": 12}')$$);
-- (The range at the end reads "(1 .. 536870912)" up to 16, with units from 17.)
SELECT regexp_replace(error_of($$SET outbox.max_payload_bytes = 0$$), ' \([^)]*\)$', ' (range)')
    AS error_of;

-- Bad headers: an object whose values are all strings, or NULL.
SELECT error_of($$SELECT outbox.emit('t', '{}', NULL, '[]')$$);
SELECT error_of($$SELECT outbox.emit('t', '{}', NULL, '"h"')$$);
SELECT error_of($$SELECT outbox.emit('t', '{}', NULL, '{"n": 1}')$$);
SELECT error_of($$SELECT outbox.emit('t', '{}', NULL, '{"b": true}')$$);
SELECT error_of($$SELECT outbox.emit('t', '{}', NULL, '{"z": null}')$$);
SELECT error_of($$SELECT outbox.emit('t', '{}', NULL, '{"o": {"x": "y"}}')$$);
SELECT error_of($$SELECT outbox.emit('t', '{}', NULL, '{"ok": "a", "bad": ["x"]}')$$);
SELECT error_of($$SELECT outbox.emit('t.ok', '{}', NULL, '{}')$$);

-- Size limits on what an application attaches (the security model: nothing
-- an emit() caller sends may exhaust the publisher's memory): a key of at
-- most 4096 bytes, headers of at most 16384 bytes as JSON text, whatever
-- their binary size (control characters grow sixfold as text).
SELECT error_of(format('SELECT outbox.emit(%L, %L, %L)', 't.ok', '{}', repeat('k', 4096)));
SELECT error_of(format('SELECT outbox.emit(%L, %L, %L)', 't.key', '{}', repeat('k', 4097)));
SELECT error_of(format('SELECT outbox.emit(%L, %L, %L)', 't.key', '{}', repeat('ą', 2049)));
SELECT error_of(format('SELECT outbox.emit(%L, %L, NULL, %L)', 't.ok', '{}',
                       jsonb_build_object('h', repeat('v', 16384 - 9))));
SELECT error_of(format('SELECT outbox.emit(%L, %L, NULL, %L)', 't.hdr', '{}',
                       jsonb_build_object('h', repeat('v', 16384 - 8))));
SELECT error_of(format('SELECT outbox.emit(%L, %L, NULL, %L)', 't.hdr', '{}',
                       jsonb_build_object('h', repeat(chr(1), 3000))));
SELECT error_of(format('SELECT outbox.emit(%L, %L, NULL, %L)', 't.hdr', '{}',
                       jsonb_build_object('h', repeat(chr(1), 1000000))));

-- Failed calls left no rows behind.
SELECT count(*) AS stray_rows FROM outbox.events WHERE topic IN ('t', 't.size', 't.key', 't.hdr');

-- outbox.stats counts what is retained, per topic.
SELECT topic, pending, published, dead, oldest_pending_age >= '0'::interval AS has_age
  FROM outbox.stats WHERE topic LIKE 'orders.%' ORDER BY topic;

-- outbox.key_slot(): the slot a key hashes into (with outbox.workers > 1,
-- one publisher at a time owns a slot and handles every event of its keys).
-- The same key always lands in the same slot, every slot is in 0 .. 1023,
-- and keys spread over all of them.
SELECT outbox.key_slot('order-42') = outbox.key_slot('order' || '-42') AS stable,
       outbox.key_slot(NULL) IS NULL AS keyless_has_no_slot;
SELECT min(s) >= 0 AS from_zero, max(s) <= 1023 AS to_1023, count(DISTINCT s) > 1000 AS spread
  FROM (SELECT outbox.key_slot('k' || i) AS s FROM generate_series(1, 20000) i) slots;
-- It is what the README says, hashtext(key) & 1023, for any key (non-ASCII
-- and empty ones included).
SELECT count(*) FILTER (WHERE outbox.key_slot(k) <> (pg_catalog.hashtext(k) & 1023)) AS differ,
       count(*) AS keys
  FROM (SELECT 'k' || i AS k FROM generate_series(1, 20000) i
        UNION ALL VALUES (''), ('ü-ключ-鍵'), (repeat('x', 4096))) keys;
