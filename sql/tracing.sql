-- W3C trace context: SET LOCAL outbox.traceparent (and tracestate) in the
-- transaction, and emit() copies them into the event's headers, so a trace
-- crosses the broker.

BEGIN;
SET LOCAL outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
SET LOCAL outbox.tracestate = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE';
SELECT outbox.emit('trace.orders', '{"n": 1}') AS id \gset
SELECT headers FROM outbox.events WHERE id = :'id';
-- The user's own headers are kept, and win on a name clash.
SELECT outbox.emit('trace.orders', '{"n": 2}', NULL,
                   '{"source": "app", "tracestate": "mine=1"}') AS id \gset
SELECT headers FROM outbox.events WHERE id = :'id';
COMMIT;

-- SET LOCAL ends with the transaction: no trace context afterwards.
SELECT outbox.emit('trace.orders', '{"n": 3}') AS id \gset
SELECT headers IS NULL AS no_headers FROM outbox.events WHERE id = :'id';

-- tracestate alone is not copied (it qualifies a traceparent).
BEGIN;
SET LOCAL outbox.tracestate = 'rojo=1';
SELECT outbox.emit('trace.orders', '{"n": 4}', NULL, '{"a": "b"}') AS id \gset
SELECT headers FROM outbox.events WHERE id = :'id';
COMMIT;

-- Malformed values are refused when set (22023), not at emit time.
SELECT error_of($$SET outbox.traceparent = 'not-a-traceparent'$$);
SELECT error_of($$SET outbox.traceparent = '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01'$$);
SELECT error_of($$SET outbox.traceparent = '00-00000000000000000000000000000000-00f067aa0ba902b7-01'$$);
SELECT left(error_of(format('SET outbox.tracestate = %L', repeat('x', 513))), 64) AS error_of;
SELECT error_of($$SET outbox.traceparent = ''$$);

-- Only from the session: a database owner's ALTER DATABASE ... SET (or a
-- role setting) would put one trace context into every session's events,
-- other roles' included.
SELECT error_of(format($$ALTER DATABASE %I SET outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'$$,
                       current_database()));
SELECT error_of(format($$ALTER DATABASE %I SET outbox.tracestate = 'vendor=forged'$$, current_database()));
CREATE ROLE regress_trace_role;
SELECT error_of($$ALTER ROLE regress_trace_role SET outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'$$);
DROP ROLE regress_trace_role;
