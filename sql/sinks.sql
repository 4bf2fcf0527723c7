-- outbox.create_sink() / drop_sink(): validation and SQLSTATEs.

-- Kafka: librdkafka properties, checked by librdkafka itself.
SELECT outbox.create_sink('kafka-main', 'kafka',
    '{"bootstrap.servers": "127.0.0.1:9092", "linger.ms": "1", "compression.type": "lz4"}');
SELECT name, kind, options FROM outbox.sinks ORDER BY name;
SELECT error_of($$SELECT outbox.create_sink('kafka-main', 'kafka', '{"bootstrap.servers": "h:1"}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "no.such.property": "1"}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "acks": "banana"}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "linger.ms": "-5"}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "linger.ms": 5}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"linger.ms": "5"}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": ""}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "plugin.library.paths": "/tmp/x.so"}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "security.protocol": "sasl_plaintext", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "touch /tmp/outbox-pwned"}')$$);
-- An allowlist of producer properties: a property
-- librdkafka knows but a sink has no business setting is refused unset.
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "log.queue": "false"}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "interceptors": "x"}')$$);
-- Options that make the server open a file, fetch a URL or run Kerberos
-- (whose default kinit command interpolates principal and keytab into a
-- shell) are a superuser's: a role with the extension owner's privileges
-- that is not a superuser cannot set them.
CREATE ROLE regress_outbox_sinkadmin;
GRANT postgres TO regress_outbox_sinkadmin;
SET ROLE regress_outbox_sinkadmin;
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "ssl.ca.location": "/etc/passwd"}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "security.protocol": "sasl_plaintext", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.principal": "$(touch /tmp/outbox-pwned)"}')$$);
SELECT error_of($$SELECT outbox.create_sink('k-admin', 'kafka', '{"bootstrap.servers": "h:1", "sasl.username": "u", "sasl.password": "p"}')$$);
-- Nor values from the server's environment: one error whether the variable
-- exists (OUTBOX_REGRESS_SET does, test/lib/private_server.sh), is missing,
-- or may not be read at all, so its errors tell such a role nothing about
-- the server's environment.
SELECT error_of($$SELECT outbox.create_sink('k2', 'kafka', '{"bootstrap.servers": "h:1", "sasl.password": {"env": "OUTBOX_REGRESS_SET"}}')$$);
SELECT error_of($$SELECT outbox.create_sink('k2', 'kafka', '{"bootstrap.servers": "h:1", "sasl.password": {"env": "OUTBOX_REGRESS_UNSET"}}')$$);
SELECT error_of($$SELECT outbox.create_sink('k2', 'kafka', '{"bootstrap.servers": "h:1", "sasl.password": {"env": "PATH"}}')$$);
SELECT error_of($$SELECT outbox.create_sink('r2', 'redis', '{"password": {"env": "OUTBOX_REGRESS_SET"}}')$$);
SELECT error_of($$SELECT outbox.create_sink('r2', 'redis', '{"password": {"env": "OUTBOX_REGRESS_UNSET"}}')$$);
RESET ROLE;
SELECT error_of($$SELECT outbox.create_sink('k-file', 'kafka', '{"bootstrap.servers": "h:1", "ssl.ca.location": "/etc/ssl/certs"}')$$);
SELECT outbox.drop_sink('k-file');
SELECT outbox.drop_sink('k-admin');
DROP ROLE regress_outbox_sinkadmin;
-- A secret from the server's environment instead of SQL text: {"env": NAME}
-- with NAME an OUTBOX_ variable (no such variable is set here).
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "sasl.password": {"env": "OUTBOX_REGRESS_UNSET"}}')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "sasl.password": {"env": "PATH"}}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"password": {"env": "OUTBOX_REGRESS_UNSET"}}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"password": {"env": "OUTBOX_X", "more": 1}}')$$);
-- Secrets never appear in error messages: an error names the option, never a
-- secret's value (here next to a bad option, or of the wrong JSON type).
SELECT e AS error, position('hunter2' IN e) = 0 AS secret_hidden
  FROM error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "sasl.password": "hunter2-secret", "acks": "banana"}')$$) e;
SELECT position('424242' IN error_of($$SELECT outbox.create_sink('k1', 'kafka', '{"bootstrap.servers": "h:1", "sasl.password": 424242}')$$)) = 0
    AS secret_hidden;
SELECT position('424242' IN error_of($$SELECT outbox.create_sink('r1', 'redis', '{"password": 424242}')$$)) = 0
    AS secret_hidden;
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', '["bootstrap.servers"]')$$);
SELECT error_of($$SELECT outbox.create_sink('k1', 'kafka', NULL)$$);

-- Redis: the contract's keys; numbers accepted for port, db and maxlen.
SELECT outbox.create_sink('redis-default', 'redis', '{}');
SELECT outbox.create_sink('redis-stream', 'redis',
    '{"host": "cache.internal", "port": 6380, "db": "2", "password": "s3cret", "mode": "stream", "maxlen": 10000}');
SELECT outbox.create_sink('redis-pubsub', 'redis', '{"mode": "publish", "port": "6379"}');
SELECT outbox.create_sink('redis-list', 'redis', '{"mode": "list", "db": 0}');
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"hostname": "x"}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"port": 0}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"port": "65536"}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"port": "63 79"}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"port": 6379.5}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"db": -1}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"mode": "queue"}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"mode": "list", "maxlen": 5}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"maxlen": 0}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"host": 127}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"password": true}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', 'redis', '{"host": ""}')$$);

-- Names and kinds.
SELECT error_of($$SELECT outbox.create_sink(NULL, 'redis', '{}')$$);
SELECT error_of($$SELECT outbox.create_sink('', 'redis', '{}')$$);
SELECT error_of($$SELECT outbox.create_sink('my sink', 'redis', '{}')$$);
SELECT error_of($$SELECT outbox.create_sink('x"; DROP TABLE outbox.sinks; --', 'redis', '{}')$$);
SELECT error_of(format('SELECT outbox.create_sink(%L, %L, %L)', repeat('s', 64), 'redis', '{}'));
SELECT error_of(format('SELECT outbox.create_sink(%L, %L, %L)', repeat('s', 63), 'redis', '{}'));
SELECT error_of($$SELECT outbox.create_sink('r1', 'rabbitmq', '{}')$$);
SELECT error_of($$SELECT outbox.create_sink('r1', NULL, '{}')$$);

-- Failed creations left nothing behind.
SELECT name, kind FROM outbox.sinks ORDER BY name;

-- drop_sink: unknown names, and sinks still in use, are refused.
SELECT error_of($$SELECT outbox.drop_sink('nope')$$);
SELECT error_of($$SELECT outbox.drop_sink(NULL)$$);
SELECT outbox.add_route('inventory.*', 'redis-list');
SELECT error_of($$SELECT outbox.drop_sink('redis-list')$$);
SELECT outbox.remove_route('inventory.*');
SELECT outbox.drop_sink('redis-list');
SELECT outbox.drop_sink(repeat('s', 63));
SELECT name FROM outbox.sinks ORDER BY name;
