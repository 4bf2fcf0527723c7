-- Every kind of sink: which kinds exist, which this build has, each kind's
-- options refused with 22023 naming the option (nothing connects), and the
-- route targets and formats each kind takes.

CREATE FUNCTION pg_temp.error_and_hint(statement text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    hint text;
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
    RETURN SQLSTATE || ': ' || SQLERRM || coalesce(' (hint: ' || nullif(hint, '') || ')', '');
END
$$;

-- Kinds: an unknown one lists the known ones; a known one this build was
-- made without says which library it lacks (HTTP is not built yet).
SELECT pg_temp.error_and_hint($$SELECT outbox.create_sink('s', 'smtp', '{}')$$);
SELECT pg_temp.error_and_hint($$SELECT outbox.create_sink('h', 'http', '{}')$$);

-- AMQP: defaults are valid; a bad value or an unknown key names the option.
SELECT error_of($$SELECT outbox.create_sink('rabbit', 'amqp', '{}')$$);
SELECT error_of($$SELECT outbox.create_sink('r2', 'amqp', '{"port": "x"}')$$);
SELECT error_of($$SELECT outbox.create_sink('r2', 'amqp', '{"no_such_option": "1"}')$$);
SELECT error_of($$SELECT outbox.create_sink('r2', 'amqp', '{"tls": true}')$$);
SELECT error_of($$SELECT outbox.create_sink('r2', 'amqp', '{"heartbeat": "-1"}')$$);

-- NATS: likewise; credentials inside a server address are refused (they
-- would show in logs).
SELECT error_of($$SELECT outbox.create_sink('jet', 'nats', '{}')$$);
SELECT error_of($$SELECT outbox.create_sink('j2', 'nats', '{"servers": "nats://u:secret@10.0.0.1:4222"}')$$);
SELECT error_of($$SELECT outbox.create_sink('j2', 'nats', '{"ack_timeout_ms": 5}')$$);
SELECT error_of($$SELECT outbox.create_sink('j2', 'nats', '{"no_such_option": "1"}')$$);

-- MQTT: likewise; trusted certificates are PEM text, never a file's name.
SELECT error_of($$SELECT outbox.create_sink('mq', 'mqtt', '{}')$$);
SELECT error_of($$SELECT outbox.create_sink('m2', 'mqtt', '{"qos": 0}')$$);
SELECT error_of($$SELECT outbox.create_sink('m2', 'mqtt', '{"protocol": "3.1"}')$$);
SELECT error_of($$SELECT outbox.create_sink('m2', 'mqtt', '{"tls": "true", "tls_ca": "/etc/ssl/certs/ca-certificates.crt"}')$$);
SELECT error_of($$SELECT outbox.create_sink('m2', 'mqtt', '{"no_such_option": "1"}')$$);
SELECT name, kind, options FROM outbox.sinks WHERE name IN ('rabbit', 'jet', 'mq') ORDER BY name;

-- Route targets: an AMQP routing key is at most 255 bytes; a NATS subject is
-- literal (no wildcard, no empty token).
SELECT error_of($$SELECT outbox.add_route('a.*', 'rabbit', repeat('k', 256))$$);
SELECT error_of($$SELECT outbox.add_route('a.*', 'rabbit', repeat('k', 255))$$);
SELECT error_of($$SELECT outbox.add_route('n.*', 'jet', 'orders.*')$$);
SELECT error_of($$SELECT outbox.add_route('n.*', 'jet', 'orders..created')$$);
SELECT error_of($$SELECT outbox.add_route('n.*', 'jet', 'orders.created')$$);
-- An MQTT topic has no wildcard and no empty level.
SELECT error_of($$SELECT outbox.add_route('m.*', 'mq', 'orders/+/created')$$);
SELECT error_of($$SELECT outbox.add_route('m.*', 'mq', 'orders//created')$$);
SELECT error_of($$SELECT outbox.add_route('m.*', 'mq', 'orders/eu/created')$$);

-- Formats: raw and cloudevents on both; the Debezium formats are Kafka's
-- and Redis's.
SELECT error_of($$SELECT outbox.add_route('c.*', 'rabbit', NULL, 'cloudevents')$$);
SELECT error_of($$SELECT outbox.add_route('d.*', 'jet', NULL, 'debezium')$$);
SELECT error_of($$SELECT outbox.add_route('d.*', 'rabbit', 'q', 'debezium-expanded')$$);
SELECT error_of($$SELECT outbox.add_route('e.*', 'mq', NULL, 'debezium')$$);
SELECT error_of($$SELECT outbox.add_route('e.*', 'mq', NULL, 'cloudevents')$$);
SELECT pattern, sink, target IS NULL AS to_topic, length(target), format
  FROM outbox.routes ORDER BY pattern;

SELECT outbox.remove_route(pattern) FROM outbox.routes ORDER BY pattern;
SELECT outbox.drop_sink('rabbit'), outbox.drop_sink('jet'), outbox.drop_sink('mq');
