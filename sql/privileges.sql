-- Who may do what: emit() only when granted; sinks, routes, events and
-- controls only for superusers and the extension owner.
CREATE ROLE regress_outbox_app;
CREATE ROLE regress_outbox_other;

SET ROLE regress_outbox_app;
SELECT error_of($$SELECT outbox.emit('priv.t', '{}')$$);
RESET ROLE;

GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO regress_outbox_app;
SET ROLE regress_outbox_app;
-- Granted: emit works without any privilege on the events table ...
SELECT outbox.emit('priv.t', '{"by": "app"}') IS NOT NULL AS emitted;
-- ... which the role still cannot read or change.
SELECT error_of($$SELECT count(*) FROM outbox.events$$);
SELECT error_of($$UPDATE outbox.events SET status = 'published'$$);
SELECT error_of($$INSERT INTO outbox.events (id, topic, payload) VALUES (gen_random_uuid(), 'x', '{}')$$);
-- Sink options hold secrets: unreadable.
SELECT error_of($$SELECT options FROM outbox.sinks$$);
SELECT error_of($$SELECT * FROM outbox.routes$$);
SELECT error_of($$SELECT outbox.create_sink('priv', 'redis', '{}')$$);
SELECT error_of($$SELECT outbox.drop_sink('redis-r')$$);
SELECT error_of($$SELECT outbox.add_route('priv.*', 'redis-r')$$);
SELECT error_of($$SELECT outbox.remove_route('orders.*')$$);
SELECT error_of($$SELECT * FROM outbox.route_for('orders.created')$$);
SELECT error_of($$SELECT outbox.retry_dead()$$);
SELECT error_of($$SELECT outbox.pause('orders.*')$$);
SELECT error_of($$SELECT outbox.resume('orders.*')$$);
SELECT error_of($$SELECT outbox.replay(now())$$);
SELECT error_of($$SELECT outbox.wakeup()$$);
SELECT error_of($$SELECT outbox.maintain()$$);
SELECT error_of($$SELECT * FROM outbox.stats$$);
SELECT error_of($$SELECT * FROM outbox.partitions$$);
SELECT error_of($$SELECT * FROM outbox.workers$$);
SELECT error_of($$SELECT * FROM outbox.route_lag$$);
SELECT error_of($$SELECT * FROM outbox.counts$$);
SELECT error_of($$SELECT outbox.recount()$$);
SELECT error_of($$SET outbox.max_payload_bytes = '100MB'$$);
SELECT error_of($$SET outbox.cloudevents_source = 'x'$$);
RESET ROLE;

-- A monitoring role reads the views once granted (README "Monitoring"),
-- and still nothing else.
CREATE ROLE regress_outbox_monitor;
GRANT SELECT ON outbox.stats, outbox.route_lag, outbox.partitions, outbox.workers
   TO regress_outbox_monitor;
GRANT EXECUTE ON FUNCTION outbox.worker_stats() TO regress_outbox_monitor;
SET ROLE regress_outbox_monitor;
SELECT error_of($$SELECT * FROM outbox.stats$$);
SELECT error_of($$SELECT * FROM outbox.route_lag$$);
SELECT error_of($$SELECT * FROM outbox.partitions$$);
SELECT error_of($$SELECT * FROM outbox.workers$$);
SELECT error_of($$SELECT options FROM outbox.sinks$$);
SELECT error_of($$SELECT count(*) FROM outbox.events$$);
RESET ROLE;

-- An ungranted role cannot emit.
SET ROLE regress_outbox_other;
SELECT error_of($$SELECT outbox.emit('priv.t', '{}')$$);
RESET ROLE;

-- Even if EXECUTE on sink management is granted by mistake, the functions
-- themselves refuse anyone but superusers and the extension owner.
GRANT EXECUTE ON FUNCTION outbox.create_sink(text, text, jsonb) TO regress_outbox_app;
GRANT EXECUTE ON FUNCTION outbox.drop_sink(text) TO regress_outbox_app;
GRANT EXECUTE ON FUNCTION outbox.add_route(text, text, text, text) TO regress_outbox_app;
GRANT EXECUTE ON FUNCTION outbox.remove_route(text) TO regress_outbox_app;
GRANT EXECUTE ON FUNCTION outbox.pause(text) TO regress_outbox_app;
GRANT EXECUTE ON FUNCTION outbox.replay(timestamptz, text) TO regress_outbox_app;
SET ROLE regress_outbox_app;
SELECT error_of($$SELECT outbox.create_sink('priv', 'redis', '{}')$$);
SELECT error_of($$SELECT outbox.drop_sink('redis-r')$$);
SELECT error_of($$SELECT outbox.add_route('priv.*', 'redis-r')$$);
SELECT error_of($$SELECT outbox.remove_route('orders.*')$$);
SELECT error_of($$SELECT outbox.pause('orders.*')$$);
SELECT error_of($$SELECT outbox.replay(now())$$);
RESET ROLE;

SELECT topic, payload FROM outbox.events WHERE topic = 'priv.t';

-- emit() writes as its owner, not as a SECURITY DEFINER function (see
-- src/emit/event_insert.hpp): through the INSERT statement as well as straight
-- into the partition, and the caller is itself again afterwards, in the
-- same transaction.
SET outbox.emit_direct_insert = off;
SET ROLE regress_outbox_app;
SELECT outbox.emit('priv.spi', '{"by": "app"}') IS NOT NULL AS emitted_through_insert;
RESET ROLE;
RESET outbox.emit_direct_insert;
SET ROLE regress_outbox_app;
DO $$
BEGIN
  PERFORM outbox.emit('priv.spi', '{"by": "app"}');
  RAISE NOTICE 'afterwards: %, %', current_user, session_user = current_user;
  PERFORM count(*) FROM outbox.events;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE NOTICE 'and still cannot read the events';
END $$;
RESET ROLE;
SELECT topic, count(*) FROM outbox.events WHERE topic = 'priv.spi' GROUP BY topic;

DROP OWNED BY regress_outbox_app, regress_outbox_other, regress_outbox_monitor;
DROP ROLE regress_outbox_app;
DROP ROLE regress_outbox_other;
DROP ROLE regress_outbox_monitor;
