-- When emit() writes, only built-in code and outbox's own run (the rule of
-- src/emit/writer_code_rule.hpp). Each place where PostgreSQL runs code during
-- an INSERT into outbox.events is planted below, as a superuser or the
-- tables' owner could, with a function that announces itself (a NOTICE
-- "planted code ran") if it ever runs while emit() is called (the DDL that
-- plants it may run it, as the superuser's own statement): emit() refuses (42501, naming the
-- object and the table it is on), straight into the partition and through
-- the INSERT alike, and nothing planted runs. Each object gone, emit()
-- writes again. The role that emits owns a schema, and puts it first in
-- its search_path, with functions of the same names as built-in ones.
CREATE ROLE regress_rule_app;
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO regress_rule_app;
CREATE SCHEMA regress_rule_schema AUTHORIZATION regress_rule_app;
SET ROLE regress_rule_app;
CREATE FUNCTION regress_rule_schema.lower(text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF current_setting('regress.armed', true) = 'on' THEN
        RAISE NOTICE 'planted code ran as %', current_user;
    END IF;
    RETURN $1;
END $$;
RESET ROLE;
CREATE FUNCTION public.regress_announce() RETURNS void LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('regress.armed', true) = 'on' THEN
        RAISE NOTICE 'planted code ran as %', current_user;
    END IF;
END $$;
CREATE FUNCTION public.regress_planted(t text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM public.regress_announce();
    RETURN t;
END $$;
CREATE FUNCTION public.regress_planted_check(t text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM public.regress_announce();
    RETURN true;
END $$;
CREATE FUNCTION public.regress_planted_trigger() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM public.regress_announce();
    RETURN NEW;
END $$;
-- A plain SQL helper, as a DBA writes one: inlined where it is used, its
-- body's names looked up with the search_path of whoever loads it.
CREATE FUNCTION public.regress_bucket(t text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT lower(t) $$;
CREATE FUNCTION public.try_emit() RETURNS text LANGUAGE sql
    AS $$ SELECT regexp_replace(public.error_of($q$SELECT outbox.emit('rule.try', '{}')$q$),
                                'events_p[0-9]{8}', 'events_pYYYYMMDD', 'g') $$;
GRANT EXECUTE ON FUNCTION public.try_emit() TO regress_rule_app;
\set both 'SET regress.armed = on; SET ROLE regress_rule_app; SET search_path = regress_rule_schema, pg_catalog, public; SELECT public.try_emit() AS straight; RESET ROLE; SET outbox.emit_direct_insert = off; SET ROLE regress_rule_app; SELECT public.try_emit() AS through_insert; RESET ROLE; RESET outbox.emit_direct_insert; RESET search_path; RESET regress.armed;'
SELECT format('outbox.events_p%s', to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) AS today \gset
SELECT pg_get_expr(relpartbound, oid) AS today_bound FROM pg_class WHERE oid = :'today'::regclass \gset

-- As the extension made it, emit() writes.
:both

-- Triggers: row and statement, on outbox.events (cloned onto every
-- partition) or on the day's partition only, with a WHEN condition,
-- disabled, and a foreign key's (PostgreSQL's own trigger, which runs a
-- query).
CREATE TRIGGER regress_row BEFORE INSERT ON outbox.events
    FOR EACH ROW EXECUTE FUNCTION public.regress_planted_trigger();
:both
DROP TRIGGER regress_row ON outbox.events;
CREATE TRIGGER regress_statement AFTER INSERT ON outbox.events
    FOR EACH STATEMENT EXECUTE FUNCTION public.regress_planted_trigger();
:both
DROP TRIGGER regress_statement ON outbox.events;
CREATE TRIGGER regress_partition_row AFTER INSERT ON :today
    FOR EACH ROW EXECUTE FUNCTION public.regress_planted_trigger();
:both
DROP TRIGGER regress_partition_row ON :today;
CREATE TRIGGER regress_when BEFORE INSERT ON :today FOR EACH ROW
    WHEN (public.regress_planted_check(NEW.topic)) EXECUTE FUNCTION public.regress_planted_trigger();
ALTER TABLE :today DISABLE TRIGGER regress_when;
:both
DROP TRIGGER regress_when ON :today;
CREATE TABLE public.regress_topics (name text PRIMARY KEY);
INSERT INTO public.regress_topics VALUES ('rule.try');
ALTER TABLE :today ADD CONSTRAINT regress_known_topic
    FOREIGN KEY (topic) REFERENCES public.regress_topics (name) NOT VALID;
:both
ALTER TABLE :today DROP CONSTRAINT regress_known_topic;
DROP TABLE public.regress_topics;
-- outbox's own counting trigger, made again by hand, is outbox's own.
CREATE TRIGGER regress_counts_again AFTER INSERT ON :today
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.count_changes();
:both
DROP TRIGGER regress_counts_again ON :today;

-- Rules, row security and policies (enabled or not).
CREATE RULE regress_rule AS ON INSERT TO outbox.events
    WHERE public.regress_planted_check(NEW.topic) DO ALSO NOTHING;
:both
DROP RULE regress_rule ON outbox.events;
CREATE POLICY regress_policy ON outbox.events WITH CHECK (public.regress_planted_check(topic));
:both
ALTER TABLE outbox.events ENABLE ROW LEVEL SECURITY;
:both
DROP POLICY regress_policy ON outbox.events;
:both
ALTER TABLE outbox.events DISABLE ROW LEVEL SECURITY;
ALTER TABLE :today ENABLE ROW LEVEL SECURITY;
:both
ALTER TABLE :today DISABLE ROW LEVEL SECURITY;

-- Column defaults: a function of the user's, a built-in one that is not
-- immutable and reads more than a clock; a built-in immutable expression is
-- built-in code (the INSERT evaluates it), and so is now().
ALTER TABLE outbox.events ALTER COLUMN last_error SET DEFAULT public.regress_planted('x');
:both
ALTER TABLE outbox.events ALTER COLUMN last_error SET DEFAULT timeofday();
:both
ALTER TABLE outbox.events ALTER COLUMN last_error SET DEFAULT lower('NONE') || 'x';
:both
ALTER TABLE outbox.events ALTER COLUMN last_error DROP DEFAULT;
SELECT count(*) AS with_built_in_default FROM outbox.events
 WHERE topic = 'rule.try' AND last_error LIKE 'none%';
-- A default on a column emit() fills itself is refused all the same.
ALTER TABLE outbox.events ALTER COLUMN topic SET DEFAULT public.regress_planted('x');
:both
ALTER TABLE outbox.events ALTER COLUMN topic DROP DEFAULT;

-- Generated columns, domains, columns of the user's types.
ALTER TABLE outbox.events ADD COLUMN regress_generated text
    GENERATED ALWAYS AS (public.regress_planted(topic)) STORED;
:both
ALTER TABLE outbox.events DROP COLUMN regress_generated;
CREATE DOMAIN public.regress_checked AS text CHECK (public.regress_planted_check(VALUE));
ALTER TABLE outbox.events ADD COLUMN regress_checked public.regress_checked;
:both
ALTER TABLE outbox.events DROP COLUMN regress_checked;
ALTER TABLE outbox.events ALTER COLUMN last_error TYPE public.regress_checked;
:both
ALTER TABLE outbox.events ALTER COLUMN last_error TYPE text;
DROP DOMAIN public.regress_checked;
-- A column of a built-in type that emit() does not know: the INSERT fills
-- it (NULL), built-in code only.
ALTER TABLE outbox.events ADD COLUMN regress_note text;
:both
ALTER TABLE outbox.events DROP COLUMN regress_note;

-- CHECK constraints: a function of the user's; a stable built-in one that
-- looks a name up when it runs (the caller's schema holds the table it
-- looks for); an immutable built-in one is built-in code and holds.
ALTER TABLE outbox.events ADD CONSTRAINT regress_user_check
    CHECK (public.regress_planted_check(topic)) NOT VALID;
:both
ALTER TABLE outbox.events DROP CONSTRAINT regress_user_check;
CREATE TABLE regress_rule_schema.regress_lookup ();
ALTER TABLE outbox.events ADD CONSTRAINT regress_lookup_check
    CHECK (to_regclass('regress_lookup') IS NULL) NOT VALID;
:both
ALTER TABLE outbox.events DROP CONSTRAINT regress_lookup_check;
ALTER TABLE :today ADD CONSTRAINT regress_length_check CHECK (length(topic) <= 200);
:both
ALTER TABLE :today DROP CONSTRAINT regress_length_check;

-- Indexes: an expression or a predicate calling the user's function (a
-- plain SQL helper, inlined with the loader's search_path, or PL/pgSQL),
-- an operator class made by CREATE; an expression of
-- built-in immutable functions is built-in code.
CREATE INDEX regress_expr_idx ON outbox.events (public.regress_bucket(topic));
:both
DROP INDEX outbox.regress_expr_idx;
CREATE INDEX regress_pred_idx ON :today (id) WHERE public.regress_bucket(topic) = 'x';
-- The caller makes its backend load that index first, with its own path (a
-- refused SELECT is planned before it is refused).
SET regress.armed = on;
SET ROLE regress_rule_app;
SET search_path = regress_rule_schema, pg_catalog, public;
SELECT error_of($$SELECT count(*) FROM outbox.events WHERE id IS NOT NULL$$) AS planned;
RESET ROLE;
RESET search_path;
RESET regress.armed;
:both
DROP INDEX outbox.regress_pred_idx;
CREATE FUNCTION public.regress_cmp(a text, b text) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM public.regress_announce();
    RETURN pg_catalog.bttextcmp(a, b);
END $$;
CREATE OPERATOR CLASS public.regress_text_ops FOR TYPE text USING btree AS
    OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >,
    FUNCTION 1 public.regress_cmp(text, text);
CREATE INDEX regress_opclass_idx ON outbox.events (topic public.regress_text_ops);
:both
DROP INDEX outbox.regress_opclass_idx;
CREATE INDEX regress_built_in_idx ON outbox.events (lower(topic)) WHERE topic <> '';
:both
DROP INDEX outbox.regress_built_in_idx;

-- Partitions: the day taken by a table partitioned again on a key that
-- calls a plain SQL helper (the caller's lower() would be bound into it
-- when its backend loads the key: the escalation this rule closes), by a
-- table of an access method made by CREATE, and by a foreign table.
ALTER TABLE outbox.events DETACH PARTITION :today;
CREATE TABLE outbox.regress_sub (LIKE outbox.events INCLUDING CONSTRAINTS) PARTITION BY LIST (public.regress_bucket(topic));
CREATE TABLE outbox.regress_sub_all PARTITION OF outbox.regress_sub DEFAULT;
ALTER TABLE outbox.events ATTACH PARTITION outbox.regress_sub
    :today_bound;
-- A new backend, whose first load of that key is the caller's: a refused
-- SELECT is planned (partitions pruned by key) before it is refused.
\c -
SET regress.armed = on;
SET ROLE regress_rule_app;
SET search_path = regress_rule_schema, pg_catalog, public;
SELECT error_of($$SELECT count(*) FROM outbox.events WHERE topic = 'rule.try'$$) AS planned;
RESET ROLE;
RESET search_path;
RESET regress.armed;
:both
ALTER TABLE outbox.events DETACH PARTITION outbox.regress_sub;
DROP TABLE outbox.regress_sub;
CREATE ACCESS METHOD regress_heap TYPE TABLE HANDLER heap_tableam_handler;
CREATE TABLE outbox.regress_other_am (LIKE outbox.events INCLUDING CONSTRAINTS) USING regress_heap;
ALTER TABLE outbox.events ATTACH PARTITION outbox.regress_other_am
    :today_bound;
:both
ALTER TABLE outbox.events DETACH PARTITION outbox.regress_other_am;
DROP TABLE outbox.regress_other_am;
DROP ACCESS METHOD regress_heap;
CREATE FOREIGN DATA WRAPPER regress_fdw;
CREATE SERVER regress_server FOREIGN DATA WRAPPER regress_fdw;
CREATE FOREIGN TABLE outbox.regress_foreign PARTITION OF outbox.events
    :today_bound SERVER regress_server;
:both
DROP FOREIGN TABLE outbox.regress_foreign;
DROP SERVER regress_server;
DROP FOREIGN DATA WRAPPER regress_fdw;
ALTER TABLE outbox.events ATTACH PARTITION :today :today_bound;

-- Everything gone, emit() writes straight into the partition again, and
-- nothing planted ever ran (no NOTICE above).
:both
SELECT count(*) > 0 AS emitted FROM outbox.events WHERE topic = 'rule.try';

DROP FUNCTION public.try_emit();
DROP FUNCTION public.regress_bucket(text);
DROP FUNCTION public.regress_planted(text);
DROP FUNCTION public.regress_planted_check(text);
DROP FUNCTION public.regress_planted_trigger();
DROP OPERATOR CLASS public.regress_text_ops USING btree;
DROP OPERATOR FAMILY public.regress_text_ops USING btree;
DROP FUNCTION public.regress_cmp(text, text);
DROP FUNCTION public.regress_announce();
DROP SCHEMA regress_rule_schema CASCADE;
DROP OWNED BY regress_rule_app;
DROP ROLE regress_rule_app;
