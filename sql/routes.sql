-- outbox.add_route() / remove_route() / route_for(): matching and precedence.

SELECT outbox.create_sink('kafka-a', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092"}');
SELECT outbox.create_sink('kafka-b', 'kafka', '{"bootstrap.servers": "127.0.0.1:9093"}');
SELECT outbox.create_sink('redis-r', 'redis', '{}');

SELECT outbox.add_route('*', 'kafka-a');
SELECT outbox.add_route('orders.*', 'kafka-b');
SELECT outbox.add_route('orders.created', 'redis-r', 'orders:created');
SELECT outbox.add_route('orders.*.eu', 'kafka-a', 'orders-eu');
SELECT outbox.add_route('*.audit', 'kafka-b', 'audit');
SELECT outbox.add_route('billing*', 'kafka-a', 'billing-all');
SELECT outbox.add_route('bill*', 'kafka-b', 'bill-all');
SELECT pattern, sink, target FROM outbox.routes ORDER BY pattern;

-- An exact pattern beats every wildcard, whatever its length.
SELECT * FROM outbox.route_for('orders.created');
-- Among wildcards the longest pattern wins.
SELECT * FROM outbox.route_for('orders.paid');
SELECT * FROM outbox.route_for('orders.paid.eu');
SELECT * FROM outbox.route_for('billing.invoice');
SELECT * FROM outbox.route_for('bills');
-- Equal lengths: the smaller pattern in byte order wins, deterministically.
SELECT outbox.add_route('*.x', 'kafka-a', 'star-dot-x');
SELECT outbox.add_route('a.*', 'kafka-b', 'a-dot-star');
SELECT * FROM outbox.route_for('a.x');
-- '*' matches any run, including an empty one; a NULL target is the topic.
SELECT * FROM outbox.route_for('orders.');
SELECT * FROM outbox.route_for('anything-else');
SELECT * FROM outbox.route_for('billing');

-- Without a catch-all, an unmatched topic has no route (its events wait).
SELECT outbox.remove_route('*');
SELECT count(*) AS routes_found FROM outbox.route_for('anything-else');

-- Bad input.
SELECT error_of($$SELECT outbox.add_route(NULL, 'kafka-a')$$);
SELECT error_of($$SELECT outbox.add_route('', 'kafka-a')$$);
SELECT error_of($$SELECT outbox.add_route('orders.?', 'kafka-a')$$);
SELECT error_of($$SELECT outbox.add_route('orders created', 'kafka-a')$$);
SELECT error_of($$SELECT outbox.add_route('x.*', 'kafka-a', '..')$$);
SELECT error_of(format('SELECT outbox.add_route(%L, %L)', repeat('*', 250), 'kafka-a'));
SELECT error_of($$SELECT outbox.add_route('x.*', NULL)$$);
SELECT error_of($$SELECT outbox.add_route('x.*', 'no-such-sink')$$);
SELECT error_of($$SELECT outbox.add_route('orders.*', 'kafka-a')$$);
SELECT error_of($$SELECT outbox.add_route('x.*', 'kafka-a', 'not a topic')$$);
SELECT error_of($$SELECT outbox.add_route('x.*', 'kafka-a', '')$$);
SELECT error_of($$SELECT outbox.add_route('x.*', 'redis-r', '')$$);
SELECT error_of($$SELECT outbox.add_route('x.*', 'redis-r', 'any key: with spaces {and} braces')$$);
-- Message formats: raw (default), cloudevents, debezium,
-- debezium-expanded; nothing else.
SELECT outbox.add_route('fmt.ce', 'kafka-a', NULL, 'cloudevents');
SELECT outbox.add_route('fmt.dbz', 'redis-r', 'dbz', format => 'debezium');
SELECT outbox.add_route('fmt.dbzx', 'kafka-a', NULL, 'debezium-expanded');
SELECT * FROM outbox.route_for('fmt.ce');
SELECT * FROM outbox.route_for('fmt.dbz');
SELECT * FROM outbox.route_for('fmt.dbzx');
SELECT error_of($$SELECT outbox.add_route('fmt.x', 'kafka-a', NULL, 'json')$$);
SELECT error_of($$SELECT outbox.add_route('fmt.x', 'kafka-a', NULL, 'RAW')$$);
SELECT error_of($$SELECT outbox.add_route('fmt.x', 'kafka-a', NULL, 'debezium_expanded')$$);
SELECT error_of($$SELECT outbox.add_route('fmt.x', 'kafka-a', NULL, NULL)$$);
SELECT outbox.remove_route('fmt.ce');
SELECT outbox.remove_route('fmt.dbz');
SELECT outbox.remove_route('fmt.dbzx');
SELECT error_of($$SELECT outbox.remove_route('no.such.*')$$);
SELECT error_of($$SELECT outbox.remove_route(NULL)$$);
SELECT error_of($$SELECT outbox.route_for(NULL)$$);

SELECT pattern, sink, target FROM outbox.routes ORDER BY pattern;

-- outbox.best_pattern() is the publisher's precedence as a function: it
-- agrees with route_for() on every topic the routes above take or not.
SELECT t AS topic, (SELECT pattern FROM outbox.route_for(t)) AS route_for,
       outbox.best_pattern(t, (SELECT array_agg(pattern) FROM outbox.routes)) AS best_pattern
  FROM unnest(ARRAY['orders.created', 'orders.x', 'payments.refunded', 'nothing.here',
                    'o', 'orders.']) t
 ORDER BY t;
-- An exact pattern beats any wildcard, a longer wildcard a shorter one, then
-- byte order; NULL elements are ignored; no match, an empty array or a NULL
-- argument give NULL.
SELECT outbox.best_pattern('a.b.c', ARRAY['*', 'a.*', 'a.b.c', NULL]) AS exact,
       outbox.best_pattern('a.b.c', ARRAY['*', 'a.*', '*.c', 'a.*.c']) AS longest,
       outbox.best_pattern('a.b.c', ARRAY['b*', 'a.*', '*.c']) AS byte_order,
       outbox.best_pattern('a.b.c', ARRAY['x.*', NULL]) AS no_match,
       outbox.best_pattern('a.b.c', '{}') AS empty,
       outbox.best_pattern(NULL, ARRAY['*']) AS null_topic,
       outbox.best_pattern('a', NULL) AS null_patterns;
-- Any role may call it (route_lag does for its readers), so its cost is
-- bounded: only what can be a topic or a pattern (at most 249 bytes) is
-- matched...
SELECT outbox.best_pattern(repeat('a', 250), ARRAY['*']) AS topic_too_long,
       outbox.best_pattern('a', ARRAY[repeat('*', 250), 'a*']) AS pattern_too_long_ignored;
-- ... and a cancel or statement timeout stops a call over many patterns,
-- each as costly to match as a pattern can be, long before it would end.
SET statement_timeout = '300ms';
DO $$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    PERFORM outbox.best_pattern(repeat('a', 249),
                                ARRAY(SELECT '*' || repeat('a', 124) || 'b' FROM generate_series(1, 400000)));
    RAISE NOTICE 'best_pattern ran to its end';
EXCEPTION WHEN query_canceled THEN
    RAISE NOTICE 'cancelled within 2 s: %', clock_timestamp() - t0 < interval '2 s';
END $$;
RESET statement_timeout;
