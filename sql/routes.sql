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
-- Message formats: raw (default), cloudevents, debezium; nothing else.
SELECT outbox.add_route('fmt.ce', 'kafka-a', NULL, 'cloudevents');
SELECT outbox.add_route('fmt.dbz', 'redis-r', 'dbz', format => 'debezium');
SELECT * FROM outbox.route_for('fmt.ce');
SELECT * FROM outbox.route_for('fmt.dbz');
SELECT error_of($$SELECT outbox.add_route('fmt.x', 'kafka-a', NULL, 'json')$$);
SELECT error_of($$SELECT outbox.add_route('fmt.x', 'kafka-a', NULL, 'RAW')$$);
SELECT error_of($$SELECT outbox.add_route('fmt.x', 'kafka-a', NULL, NULL)$$);
SELECT outbox.remove_route('fmt.ce');
SELECT outbox.remove_route('fmt.dbz');
SELECT error_of($$SELECT outbox.remove_route('no.such.*')$$);
SELECT error_of($$SELECT outbox.remove_route(NULL)$$);
SELECT error_of($$SELECT outbox.route_for(NULL)$$);

SELECT pattern, sink, target FROM outbox.routes ORDER BY pattern;
