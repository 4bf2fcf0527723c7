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
-- src/event_insert.hpp): through the INSERT statement as well as straight
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

-- A CHECK constraint an operator puts on outbox.events is judged with
-- search_path pinned (pg_catalog, pg_temp), whatever the caller's: here
-- only the caller's schema holds the table the constraint looks for, so the
-- row is refused, both ways.
CREATE SCHEMA regress_app_schema AUTHORIZATION regress_outbox_app;
CREATE TABLE regress_app_schema.regress_planted ();
ALTER TABLE outbox.events ADD CONSTRAINT regress_lookup_check
    CHECK (to_regclass('regress_planted') IS NOT NULL) NOT VALID;
SET ROLE regress_outbox_app;
SET search_path = regress_app_schema, public;
SELECT to_regclass('regress_planted') IS NOT NULL AS caller_sees_it;
SELECT regexp_replace(error_of($$SELECT outbox.emit('priv.check', '{}')$$),
                      'events_p[0-9]+', 'events_pYYYYMMDD') AS straight;
RESET ROLE;
SET outbox.emit_direct_insert = off;
SET ROLE regress_outbox_app;
SELECT regexp_replace(error_of($$SELECT outbox.emit('priv.check', '{}')$$),
                      'events_p[0-9]+', 'events_pYYYYMMDD') AS through_insert;
RESET ROLE;
RESET outbox.emit_direct_insert;
RESET search_path;
ALTER TABLE outbox.events DROP CONSTRAINT regress_lookup_check;
DROP SCHEMA regress_app_schema CASCADE;
SELECT count(*) AS refused_rows FROM outbox.events WHERE topic = 'priv.check';

-- Indexes an operator adds on outbox.events run as emit()'s owner, in the
-- caller's backend, where PL/pgSQL binds a function's names the first time
-- it runs, with whatever search_path the caller had then: emit() runs only
-- functions declared with SET search_path (42501 otherwise), which are
-- compiled under their own path.
CREATE SCHEMA regress_plant_schema AUTHORIZATION regress_outbox_app;
CREATE FUNCTION public.regress_norm_topic(t text) RETURNS text LANGUAGE plpgsql IMMUTABLE
    AS $$ BEGIN RETURN lower(t); END $$;
CREATE INDEX regress_norm_topic_idx ON outbox.events (public.regress_norm_topic(topic));
SET ROLE regress_outbox_app;
CREATE FUNCTION regress_plant_schema.lower(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'planted lower() runs as %', current_user;
    RETURN $1;
END $$;
SET search_path = regress_plant_schema, pg_catalog;
SELECT public.error_of($$SELECT outbox.emit('priv.index', '{}')$$) AS unpinned_function;
RESET ROLE;
ALTER FUNCTION public.regress_norm_topic(text) SET search_path = pg_catalog, pg_temp;
SET ROLE regress_outbox_app;
-- The caller's lower() never runs, both ways.
SELECT outbox.emit('priv.index', '{}') IS NOT NULL AS emitted_straight;
RESET ROLE;
SET outbox.emit_direct_insert = off;
SET ROLE regress_outbox_app;
SELECT outbox.emit('priv.index', '{}') IS NOT NULL AS emitted_through_insert;
RESET ROLE;
RESET outbox.emit_direct_insert;
RESET search_path;
-- Declared so, and then not: the next emit() sees it.
ALTER FUNCTION public.regress_norm_topic(text) RESET search_path;
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.index', '{}')$$) AS reset_function;
RESET ROLE;
DROP INDEX outbox.regress_norm_topic_idx;
SELECT count(*) AS indexed_rows FROM outbox.events WHERE topic = 'priv.index';

-- An SQL function in an index predicate is inlined when a backend first
-- loads the index, with that backend's search_path: a caller who makes its
-- backend load it (a refused SELECT is planned first) binds its own
-- starts_with() into its copy. The function does not pin search_path, so
-- emit() refuses it (42501), both ways, also with a statement trigger on
-- outbox.events, and the planted function never runs.
CREATE FUNCTION public.regress_is_audit(t text) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$ SELECT starts_with(t, 'audit.') $$;
CREATE INDEX regress_audit_idx ON outbox.events (id) WHERE public.regress_is_audit(topic);
SET ROLE regress_outbox_app;
CREATE FUNCTION regress_plant_schema.starts_with(text, text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RAISE NOTICE 'planted starts_with() runs as %', current_user;
    RETURN false;
END $$;
SET search_path = regress_plant_schema, pg_catalog;
SELECT public.error_of($$SELECT count(*) FROM outbox.events$$);
RESET search_path;
SELECT regexp_replace(error_of($$SELECT outbox.emit('priv.inlined', '{}')$$),
                      'events_p[0-9]+', 'events_pYYYYMMDD', 'g') AS straight;
RESET ROLE;
SET outbox.emit_direct_insert = off;
SET ROLE regress_outbox_app;
SELECT regexp_replace(error_of($$SELECT outbox.emit('priv.inlined', '{}')$$),
                      'events_p[0-9]+', 'events_pYYYYMMDD', 'g') AS through_insert;
RESET ROLE;
RESET outbox.emit_direct_insert;
-- Also when outbox.events has what makes every emit() take the INSERT (a
-- statement trigger, row security, a rule).
CREATE FUNCTION public.regress_statement_trigger() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER regress_statement_trigger AFTER INSERT ON outbox.events
    FOR EACH STATEMENT EXECUTE FUNCTION public.regress_statement_trigger();
SET ROLE regress_outbox_app;
SELECT regexp_replace(error_of($$SELECT outbox.emit('priv.inlined', '{}')$$),
                      'events_p[0-9]+', 'events_pYYYYMMDD', 'g') AS with_statement_trigger;
RESET ROLE;
DROP TRIGGER regress_statement_trigger ON outbox.events;
DROP INDEX outbox.regress_audit_idx;
-- The index gone, the same caller emits again.
SET ROLE regress_outbox_app;
SELECT outbox.emit('priv.inlined', '{}') IS NOT NULL AS emitted_after_drop;
RESET ROLE;

-- Code run as emit()'s owner runs as a security-restricted operation, as
-- REFRESH MATERIALIZED VIEW runs its owner's: a trigger of the owner's
-- cannot leave a temporary object behind for the caller to run into, and a
-- setting it changes does not outlive the call.
CREATE FUNCTION public.regress_plant_temp() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM set_config('work_mem', '77kB', false);
    IF NEW.topic = 'priv.temp' THEN
        CREATE TEMPORARY TABLE regress_planted_temp ();
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER regress_plant_temp AFTER INSERT ON outbox.events
    FOR EACH ROW EXECUTE FUNCTION public.regress_plant_temp();
SET ROLE regress_outbox_app;
SHOW work_mem;
SELECT outbox.emit('priv.setting', '{}') IS NOT NULL AS emitted;
SHOW work_mem;
SELECT error_of($$SELECT outbox.emit('priv.temp', '{}')$$);
SELECT current_user, to_regclass('pg_temp.regress_planted_temp') AS planted;
RESET ROLE;
DROP TRIGGER regress_plant_temp ON outbox.events;

-- An index function that calls emit() itself (a loop an owner could build):
-- the nested call writes its own row and the outer one completes.
CREATE FUNCTION public.regress_echo(t text) RETURNS text LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF t = 'priv.outer' THEN
        PERFORM outbox.emit('priv.inner', '{}');
    END IF;
    RETURN t;
END $$;
CREATE INDEX regress_echo_idx ON outbox.events (public.regress_echo(topic));
CREATE INDEX regress_later_idx ON outbox.events (lower(topic));
SET ROLE regress_outbox_app;
SELECT outbox.emit('priv.outer', '{}') IS NOT NULL AS emitted;
RESET ROLE;
DROP INDEX outbox.regress_echo_idx, outbox.regress_later_idx;
SELECT topic, count(*) FROM outbox.events WHERE topic IN ('priv.outer', 'priv.inner')
 GROUP BY topic ORDER BY topic;

-- An index expression whose function emit() folds while it loads the index
-- (immutable, on constants) and which calls emit() itself: refused, and the
-- backend lives on.
CREATE FUNCTION public.regress_folded(s text) RETURNS text LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('regress.folding', true) IS DISTINCT FROM 'on' THEN
        PERFORM set_config('regress.folding', 'on', true);
        PERFORM outbox.emit('priv.folded', '{}');
    END IF;
    RETURN s;
END $$;
SET regress.folding = 'on';
CREATE INDEX regress_folded_idx ON outbox.events ((topic || public.regress_folded('.x')));
RESET regress.folding;
\c -
SET ROLE regress_outbox_app;
SELECT regexp_replace(public.error_of($$SELECT outbox.emit('priv.folding', '{}')$$),
                      'events_p[0-9]+', 'events_pYYYYMMDD', 'g') AS nested_while_loading;
RESET ROLE;
DROP INDEX outbox.regress_folded_idx;
SELECT count(*) AS folded_rows FROM outbox.events WHERE topic LIKE 'priv.fold%';
-- The same rule for everything else an INSERT into outbox.events runs as
-- emit()'s owner: a column default, a trigger's WHEN condition, a row
-- security policy (forced on the owner or not: emit()'s owner need not own
-- the table), a rule.
CREATE FUNCTION public.regress_unpinned(t text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE
    AS $$ BEGIN RETURN t IS NOT NULL; END $$;
CREATE FUNCTION public.regress_pinned_trigger() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN NEW; END $$;
ALTER TABLE outbox.events ADD COLUMN regress_flag boolean DEFAULT public.regress_unpinned('x');
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS column_default;
RESET ROLE;
ALTER TABLE outbox.events DROP COLUMN regress_flag;
CREATE TRIGGER regress_when BEFORE INSERT ON outbox.events FOR EACH ROW
    WHEN (public.regress_unpinned(NEW.topic)) EXECUTE FUNCTION public.regress_pinned_trigger();
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS trigger_condition;
RESET ROLE;
DROP TRIGGER regress_when ON outbox.events;
CREATE POLICY regress_policy ON outbox.events WITH CHECK (public.regress_unpinned(topic));
ALTER TABLE outbox.events ENABLE ROW LEVEL SECURITY;
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS policy;
RESET ROLE;
ALTER TABLE outbox.events DISABLE ROW LEVEL SECURITY;
DROP POLICY regress_policy ON outbox.events;
CREATE RULE regress_rule AS ON INSERT TO outbox.events
    WHERE public.regress_unpinned(NEW.topic) DO ALSO NOTHING;
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS rule_condition;
RESET ROLE;
DROP RULE regress_rule ON outbox.events;
-- A search_path that lets the caller in is no pin: pg_temp must come last
-- (else the caller's temporary types and tables come first), and every
-- other schema must be pg_catalog or one that only emit()'s owner or a
-- superuser owns (public belongs to pg_database_owner).
CREATE FUNCTION public.regress_path_trigger() RETURNS trigger LANGUAGE plpgsql
    SET search_path = public AS $$ DECLARE t text; BEGIN RETURN NEW; END $$;
CREATE TRIGGER regress_path_trigger BEFORE INSERT ON outbox.events
    FOR EACH ROW EXECUTE FUNCTION public.regress_path_trigger();
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS path_public;
RESET ROLE;
ALTER FUNCTION public.regress_path_trigger() SET search_path = pg_catalog, public, pg_temp;
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS path_with_public;
RESET ROLE;
ALTER FUNCTION public.regress_path_trigger() SET search_path = pg_temp, pg_catalog;
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS path_temp_first;
RESET ROLE;
-- A superuser's schema others may create in (public before PostgreSQL 15)
-- is no pin either: a caller's function of a closer argument type wins.
CREATE SCHEMA regress_open_schema;
GRANT CREATE ON SCHEMA regress_open_schema TO PUBLIC;
ALTER FUNCTION public.regress_path_trigger() SET search_path = regress_open_schema, pg_temp;
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS path_open_schema;
RESET ROLE;
REVOKE CREATE ON SCHEMA regress_open_schema FROM PUBLIC;
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS path_closed_schema;
RESET ROLE;
DROP SCHEMA regress_open_schema;
ALTER FUNCTION public.regress_path_trigger() SET search_path = pg_catalog, pg_temp;
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS path_pinned;
RESET ROLE;
DROP TRIGGER regress_path_trigger ON outbox.events;

-- An immutable function on constants in an index is run (folded) when a
-- backend loads the index: emit() judges the index as stored before it
-- loads it, so an unpinned one never runs as its owner.
CREATE FUNCTION public.regress_folded_status() RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF current_setting('role') <> 'none' THEN
        RAISE NOTICE 'folded as % for %', current_user, current_setting('role');
    END IF;
    RETURN 'pending';
END $$;
CREATE INDEX regress_folded_status_idx ON outbox.events (id)
    WHERE status = public.regress_folded_status();
\c -
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS folded_when_loaded;
RESET ROLE;
DROP INDEX outbox.regress_folded_status_idx;

-- A column of a domain whose CHECK calls such a function: the INSERT coerces
-- the column's default (NULL) to the domain, so its CHECK runs as the owner.
CREATE DOMAIN public.regress_checked AS text CHECK (public.regress_unpinned(coalesce(VALUE, 'none')));
ALTER TABLE outbox.events ADD COLUMN regress_checked public.regress_checked;
SET ROLE regress_outbox_app;
SELECT public.error_of($$SELECT outbox.emit('priv.other', '{}')$$) AS domain_column;
RESET ROLE;
ALTER TABLE outbox.events DROP COLUMN regress_checked;
DROP DOMAIN public.regress_checked;
SET ROLE regress_outbox_app;
SELECT outbox.emit('priv.other', '{}') IS NOT NULL AS emitted_after_all_dropped;
RESET ROLE;
SELECT count(*) AS other_rows FROM outbox.events WHERE topic = 'priv.other';
DROP SCHEMA regress_plant_schema CASCADE;

DROP OWNED BY regress_outbox_app, regress_outbox_other, regress_outbox_monitor;
DROP ROLE regress_outbox_app;
DROP ROLE regress_outbox_other;
DROP ROLE regress_outbox_monitor;
