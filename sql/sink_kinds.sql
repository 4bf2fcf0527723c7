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

-- Kinds: an unknown one lists the known ones. (A known kind a build lacks
-- says which library it needs; CI builds every kind, so none is refused so
-- here.)
SELECT pg_temp.error_and_hint($$SELECT outbox.create_sink('s', 'smtp', '{}')$$);

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

-- HTTP: a URL is required, http or https only, {target} only in the path;
-- reserved headers and unknown keys are refused naming the option, and the
-- secret is never quoted.
SELECT error_of($$SELECT outbox.create_sink('h', 'http', '{}')$$);
SELECT error_of($$SELECT outbox.create_sink('h', 'http', '{"url": "file:///etc/passwd"}')$$);
SELECT error_of($$SELECT outbox.create_sink('h', 'http', '{"url": "gopher://127.0.0.1:70/"}')$$);
SELECT error_of($$SELECT outbox.create_sink('h', 'http', '{"url": "http://h/?to={target}"}')$$);
SELECT error_of($$SELECT outbox.create_sink('h', 'http', '{"url": "http://h/", "headers": "webhook-signature: v1,forged"}')$$);
SELECT error_of($$SELECT outbox.create_sink('h', 'http', '{"url": "http://h/", "secret": "whsec_dG9vIHNob3J0"}')$$);
SELECT error_of($$SELECT outbox.create_sink('h', 'http', '{"url": "http://h/", "tls_ca": "/etc/ssl/certs/ca-certificates.crt"}')$$);
SELECT error_of($$SELECT outbox.create_sink('h', 'http', '{"url": "http://h/", "proxy": "http://p/"}')$$);
SELECT error_of($$SELECT outbox.create_sink('hooks', 'http', '{"url": "https://hooks.example/in/{target}"}')$$);
-- MQTT: likewise; trusted certificates are PEM text, never a file's name.
SELECT error_of($$SELECT outbox.create_sink('mq', 'mqtt', '{}')$$);
SELECT error_of($$SELECT outbox.create_sink('m2', 'mqtt', '{"qos": 0}')$$);
SELECT error_of($$SELECT outbox.create_sink('m2', 'mqtt', '{"protocol": "3.1"}')$$);
SELECT error_of($$SELECT outbox.create_sink('m2', 'mqtt', '{"tls": "true", "tls_ca": "/etc/ssl/certs/ca-certificates.crt"}')$$);
SELECT error_of($$SELECT outbox.create_sink('m2', 'mqtt', '{"no_such_option": "1"}')$$);
SELECT error_of($$SELECT outbox.create_sink('m2', 'mqtt', '{"connections": 17}')$$);
SELECT error_of($$SELECT outbox.create_sink('m3', 'mqtt', '{"connections": 1}')$$);
SELECT outbox.drop_sink('m3');
SELECT name, kind, options FROM outbox.sinks WHERE name IN ('rabbit', 'jet', 'hooks', 'mq') ORDER BY name;

-- Route targets: an AMQP routing key is at most 255 bytes; a NATS subject is
-- literal (no wildcard, no empty token).
SELECT error_of($$SELECT outbox.add_route('a.*', 'rabbit', repeat('k', 256))$$);
SELECT error_of($$SELECT outbox.add_route('a.*', 'rabbit', repeat('k', 255))$$);
SELECT error_of($$SELECT outbox.add_route('n.*', 'jet', 'orders.*')$$);
SELECT error_of($$SELECT outbox.add_route('n.*', 'jet', 'orders..created')$$);
SELECT error_of($$SELECT outbox.add_route('n.*', 'jet', 'orders.created')$$);
-- An HTTP target is path segments, none ".." or ".".
SELECT error_of($$SELECT outbox.add_route('h.*', 'hooks', '..')$$);
SELECT error_of($$SELECT outbox.add_route('h.*', 'hooks', 'a/./b')$$);
SELECT error_of($$SELECT outbox.add_route('h.*', 'hooks', 'orders/created')$$);
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
SELECT outbox.drop_sink('rabbit'), outbox.drop_sink('jet'), outbox.drop_sink('hooks'), outbox.drop_sink('mq');
