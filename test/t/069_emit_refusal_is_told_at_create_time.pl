# A DBA who puts on outbox.events something emit() will not run (the rule of
# src/emit/writer_code_rule.hpp) hears it from the CREATE or ALTER statement
# itself, which is refused with the message emit() would give, naming the
# object (what emit() will not run, the publisher would run as the owner of
# outbox.events when it updates events). Things emit() may run, or never
# runs (an UPDATE trigger), are accepted. Proves, with the library preloaded
# (the hook that refuses is installed then):
# - CREATE TRIGGER ... AFTER INSERT, ADD CONSTRAINT ... CHECK calling a
#   function of the user's, and ATTACH PARTITION of a table partitioned by
#   such a function are each refused, naming the object, and leave nothing
#   behind: emit() writes; CREATE INDEX on such a function (in an
#   expression or a predicate) or with an operator class not built in is
#   refused before it is built, the function never run;
# - CREATE TRIGGER ... AFTER UPDATE and a CHECK of built-in code are
#   accepted without a WARNING;
# - an UPDATE trigger calling a function a role that is no superuser owns is
#   refused, naming the owner (the publisher would run it as outbox_writer),
#   and so is one made on a day detached from outbox.events, ATTACH
#   PARTITION of a table that has one, and
#   giving such a trigger's function away later (ALTER FUNCTION ... OWNER
#   TO, REASSIGN OWNED, ALTER ROLE ... NOSUPERUSER);
# - CREATE STATISTICS on an expression of a day is refused (ANALYZE would
#   compute it as outbox_writer), on its columns made;
# - an UPDATE trigger whose WHEN condition calls a function of the user's,
#   an index on such a function or a trigger calling a function another
#   role may replace on outbox.counts, outbox's counting function given to
#   another role, and an event trigger calling a function another role may
#   replace are refused; so are INHERIT and EXCLUDE constraints on outbox's
#   tables, and an index that is not built-in code on a detached day;
# - CREATE INDEX CONCURRENTLY on a day partition with an expression, a
#   predicate or an operator class is refused before it builds anything (it
#   commits the index before any check after it could refuse it), and one
#   on plain columns is made.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node);

my $node = outbox_node('ddl_told');
$node->safe_psql('postgres', q{
CREATE EXTENSION outbox;
CREATE FUNCTION public.audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION public.topic_ok(t text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE
    AS $$ BEGIN RETURN t <> ''; END $$;
CREATE FUNCTION public.bucket(t text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT lower(t) $$;});

my $today = $node->safe_psql('postgres',
	q{SELECT 'outbox.events_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')});
my $bound = $node->safe_psql('postgres', "SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE oid = '$today'::regclass");

$node->safe_psql('postgres', qq{
ALTER TABLE outbox.events DETACH PARTITION $today;
CREATE TABLE outbox.sub (LIKE outbox.events INCLUDING CONSTRAINTS) PARTITION BY LIST (public.bucket(topic));
CREATE TABLE outbox.sub_all PARTITION OF outbox.sub DEFAULT;});
my ($rc, $out, $err) = $node->psql('postgres', qq{ALTER TABLE outbox.events ATTACH PARTITION outbox.sub $bound});
isnt($rc, 0, 'a day partitioned by such a function: ATTACH is refused');
like($err, qr/ERROR:  outbox: emit\(\) would refuse to write while outbox\.sub has the partition key/,
	'naming the partition key');
$node->safe_psql('postgres', qq{DROP TABLE outbox.sub; ALTER TABLE outbox.events ATTACH PARTITION $today $bound});

my @cases = (
	[ 'an INSERT trigger',
	  q{CREATE TRIGGER audit AFTER INSERT ON outbox.events FOR EACH ROW EXECUTE FUNCTION public.audit()},
	  qr/outbox\.events has trigger "audit"/ ],
	[ 'a CHECK calling a function of the user\'s',
	  q{ALTER TABLE outbox.events ADD CONSTRAINT topic_ok CHECK (public.topic_ok(topic)) NOT VALID},
	  qr/outbox\.events has CHECK constraint "topic_ok"/ ],
);
for my $case (@cases) {
	my ($what, $ddl, $names) = @$case;
	($rc, $out, $err) = $node->psql('postgres', $ddl);
	isnt($rc, 0, "$what: the statement is refused");
	like($err, qr/ERROR:  outbox: emit\(\) would refuse to write while $names/,
		"$what: naming it, in emit()'s words");
	($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.emit('told.a', '{}')});
	is($rc, 0, "$what: nothing is left behind, emit() writes") or diag $err;
}

# An index is refused before it is built: its build would run the code as
# the owner of outbox's tables (a function that announces itself never
# runs).
$node->safe_psql('postgres', q{CREATE FUNCTION public.loud(t text) RETURNS text LANGUAGE plpgsql
  IMMUTABLE AS $$ BEGIN RAISE WARNING 'loud ran as %', current_user; RETURN t; END $$;});
for my $case (
	[ 'an index on such a function', q{CREATE INDEX loud_idx ON outbox.events (public.loud(topic))},
	  qr/an index on events that is not built-in code is refused: it calls (public\.)?loud\(text\)/ ],
	[ 'an index on such a function on a day partition',
	  qq{CREATE INDEX day_loud_idx ON $today (public.loud(topic))},
	  qr/an index on events_p\d+ that is not built-in code is refused: it calls (public\.)?loud\(text\)/ ],
	[ 'an index whose predicate calls one',
	  qq{CREATE INDEX day_where_idx ON $today (topic) WHERE public.loud(topic) <> ''},
	  qr/an index on events_p\d+ that is not built-in code is refused: it calls (public\.)?loud\(text\)/ ],
	[ 'an index with an operator class not built in',
	  q{CREATE OPERATOR CLASS public.my_text_ops FOR TYPE text USING btree AS
	      OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >, FUNCTION 1 bttextcmp(text, text);
	    CREATE INDEX day_opclass_idx ON } . $today . q{ (topic public.my_text_ops)},
	  qr/an index on events_p\d+ that is not built-in code is refused: its operator class public\.my_text_ops is not built in/ ])
{
	my ($what, $ddl, $names) = @$case;
	($rc, $out, $err) = $node->psql('postgres', $ddl);
	isnt($rc, 0, "$what: refused");
	like($err, $names, "$what: before it is built, saying why");
	unlike($err, qr/loud ran/, "$what: the code never ran");
}
($rc, $out, $err) = $node->psql('postgres', qq{CREATE INDEX day_lower_idx ON $today (lower(topic)) WHERE status = 'pending'});
is($rc, 0, 'an index of built-in code is made') or diag $err;
$node->safe_psql('postgres', q{DROP INDEX outbox.day_lower_idx});

($rc, $out, $err) = $node->psql('postgres', q{
CREATE TRIGGER audit_update AFTER UPDATE ON outbox.events FOR EACH ROW EXECUTE FUNCTION public.audit();
ALTER TABLE outbox.events ADD CONSTRAINT short_topic CHECK (length(topic) < 300) NOT VALID;});
is($rc, 0, 'an UPDATE trigger and a built-in CHECK are made');
unlike($err, qr/WARNING/, 'without a WARNING');
($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.emit('told.b', '{}')});
is($rc, 0, 'and emit() writes');

# The publisher runs an UPDATE trigger as the owner of outbox.events: one
# whose function another role owns (and may replace) is refused.
$node->safe_psql('postgres', q{
CREATE ROLE tenant;
CREATE FUNCTION public.tenant_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
ALTER FUNCTION public.tenant_audit() OWNER TO tenant;});
($rc, $out, $err) = $node->psql('postgres', q{
CREATE TRIGGER tenant_update AFTER UPDATE ON outbox.events FOR EACH ROW EXECUTE FUNCTION public.tenant_audit()});
isnt($rc, 0, 'an UPDATE trigger calling a function a role that is no superuser owns is refused');
like($err, qr/ERROR:  outbox: trigger "tenant_update" on outbox\.events calls public\.tenant_audit\(\), which role "tenant" may replace/,
	'naming the trigger, the function and its owner');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_trigger WHERE tgname = 'tenant_update'}), '0',
	'and it is not there');

# A trigger function given away after its trigger was made: ALTER FUNCTION
# ... OWNER TO, REASSIGN OWNED and ALTER ROLE ... NOSUPERUSER are refused.
$node->safe_psql('postgres', q{
CREATE ROLE admin SUPERUSER;
CREATE FUNCTION public.admin_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
ALTER FUNCTION public.admin_audit() OWNER TO admin;
CREATE TRIGGER admin_update AFTER UPDATE ON outbox.events FOR EACH ROW EXECUTE FUNCTION public.admin_audit();});
for my $case (
	[ 'ALTER FUNCTION ... OWNER TO', q{ALTER FUNCTION public.admin_audit() OWNER TO tenant} ],
	[ 'REASSIGN OWNED', q{REASSIGN OWNED BY admin TO tenant} ],
	[ 'ALTER ROLE ... NOSUPERUSER', q{ALTER ROLE admin NOSUPERUSER} ])
{
	my ($what, $ddl) = @$case;
	($rc, $out, $err) = $node->psql('postgres', $ddl);
	isnt($rc, 0, "$what, leaving a trigger's function to a role that is no superuser, is refused");
	like($err, qr/ERROR:  outbox: trigger "admin_update" on outbox\.events calls public\.admin_audit\(\), which role "(tenant|admin)" may replace/,
		"$what: naming the trigger");
}
is($node->safe_psql('postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'admin'}), 't',
	'and nothing changed');
($rc, $out, $err) = $node->psql('postgres', q{ALTER ROLE admin PASSWORD 'x'});
is($rc, 0, 'another ALTER ROLE is not refused') or diag $err;
$node->safe_psql('postgres', q{DROP TRIGGER admin_update ON outbox.events});

# Such a trigger on a day detached from outbox.events (still outbox_writer's)
# is refused; made on a table of another owner, that table is not attached.
$node->safe_psql('postgres', qq{ALTER TABLE outbox.events DETACH PARTITION $today});
($rc, $out, $err) = $node->psql('postgres', qq{CREATE TRIGGER tenant_on_day AFTER UPDATE ON $today
  FOR EACH ROW EXECUTE FUNCTION public.tenant_audit()});
like($err, qr/ERROR:  outbox: trigger "tenant_on_day" on outbox\.events_p\d+ calls public\.tenant_audit\(\), which role "tenant" may replace/,
	'such a trigger on a detached day is refused');
$node->safe_psql('postgres', qq{ALTER TABLE outbox.events ATTACH PARTITION $today $bound});
$node->safe_psql('postgres', q{CREATE TABLE public.later (LIKE outbox.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
CREATE TRIGGER tenant_on_later AFTER UPDATE ON public.later FOR EACH ROW EXECUTE FUNCTION public.tenant_audit();});
($rc, $out, $err) = $node->psql('postgres',
	q{ALTER TABLE outbox.events ATTACH PARTITION public.later FOR VALUES FROM ('2099-01-01') TO ('2099-01-02')});
isnt($rc, 0, 'a table that has such a trigger is not attached');
like($err, qr/ERROR:  outbox: trigger "tenant_on_later" on public\.later calls public\.tenant_audit\(\), which role "tenant" may replace/,
	'naming the trigger on it');

# CREATE INDEX CONCURRENTLY commits its index before it returns: refused
# up front when it carries code, whatever that code is.
for my $case (
	[ 'an expression', qq{CREATE INDEX CONCURRENTLY cic_expr ON $today (public.bucket(topic))} ],
	[ 'a predicate', qq{CREATE INDEX CONCURRENTLY cic_where ON $today (topic) WHERE public.topic_ok(topic)} ],
	[ 'an operator class', qq{CREATE INDEX CONCURRENTLY cic_opclass ON $today (topic text_pattern_ops)} ])
{
	my ($what, $ddl) = @$case;
	($rc, $out, $err) = $node->psql('postgres', $ddl);
	isnt($rc, 0, "CREATE INDEX CONCURRENTLY with $what is refused");
	like($err, qr/ERROR:  outbox: CREATE INDEX CONCURRENTLY with an expression, a predicate or an operator class on events_p\d+ is refused/,
		"with $what: saying why");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_class WHERE relname LIKE 'cic\_%'}), '0',
	'no index of theirs is left, valid or not');
($rc, $out, $err) = $node->psql('postgres', qq{CREATE INDEX CONCURRENTLY cic_plain ON $today (topic, created_at)});
is($rc, 0, 'CREATE INDEX CONCURRENTLY on plain columns is made') or diag $err;
($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.emit('told.c', '{}')});
is($rc, 0, 'and emit() writes') or diag $err;

# What else the publisher or outbox's own statements run as outbox_writer:
# an UPDATE trigger's WHEN condition; triggers and index expressions on
# outbox's other tables (outbox.counts, which the counting triggers write);
# outbox's own function given to another role; an event trigger (partition
# maintenance is DDL).
($rc, $out, $err) = $node->psql('postgres', q{CREATE TRIGGER when_update BEFORE UPDATE ON outbox.events
  FOR EACH ROW WHEN (public.topic_ok(NEW.topic)) EXECUTE FUNCTION suppress_redundant_updates_trigger()});
isnt($rc, 0, 'an UPDATE trigger whose WHEN condition calls a function of the user\'s is refused');
like($err, qr/ERROR:  outbox: emit\(\) would refuse to write while outbox\.events has trigger "when_update" with a WHEN condition/,
	'naming its WHEN condition');
($rc, $out, $err) = $node->psql('postgres', q{CREATE TRIGGER when_plain BEFORE UPDATE ON outbox.events
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION suppress_redundant_updates_trigger()});
is($rc, 0, 'one whose WHEN condition is built-in code is made') or diag $err;
$node->safe_psql('postgres', q{DROP TRIGGER when_plain ON outbox.events});
($rc, $out, $err) = $node->psql('postgres', q{CREATE INDEX counts_bucket ON outbox.counts (public.bucket(topic))});
isnt($rc, 0, 'an index on such a function on outbox.counts is refused');
like($err, qr/ERROR:  outbox: an index on counts that is not built-in code is refused: it calls (public\.)?bucket\(text\)/,
	'before it is built');
($rc, $out, $err) = $node->psql('postgres', q{ALTER TABLE outbox.sinks ADD CONSTRAINT sink_ok CHECK (public.topic_ok(name))});
isnt($rc, 0, 'a CHECK calling a function of the user\'s on outbox.sinks is refused');
like($err, qr/ERROR:  outbox: refused: outbox\.sinks has CHECK constraint "sink_ok"/, 'naming it');
($rc, $out, $err) = $node->psql('postgres', q{CREATE TRIGGER counts_audit AFTER UPDATE ON outbox.counts
  FOR EACH ROW EXECUTE FUNCTION public.tenant_audit()});
isnt($rc, 0, 'a trigger on outbox.counts calling a function another role may replace is refused');
like($err, qr/ERROR:  outbox: trigger "counts_audit" on outbox\.counts calls public\.tenant_audit\(\)/,
	'naming it');
($rc, $out, $err) = $node->psql('postgres', q{ALTER FUNCTION outbox.count_changes() OWNER TO tenant});
isnt($rc, 0, 'outbox\'s counting function given to another role is refused');
like($err, qr/ERROR:  outbox: trigger "events_count_\w+" on outbox\.events calls outbox\.count_changes\(\), which role "tenant" may replace/,
	'naming the trigger that calls it');
for my $case (
	[ 'a rule on outbox.counts', q{CREATE RULE counts_rule AS ON UPDATE TO outbox.counts DO ALSO NOTIFY counts},
	  qr/outbox\.counts has rule "counts_rule"/ ],
	[ 'a policy on outbox.counts', q{CREATE POLICY counts_policy ON outbox.counts USING (public.topic_ok(topic))},
	  qr/outbox\.counts has policy "counts_policy"/ ])
{
	my ($what, $ddl, $names) = @$case;
	($rc, $out, $err) = $node->psql('postgres', $ddl);
	isnt($rc, 0, "$what is refused");
	like($err, $names, "$what: naming it");
}
# A trigger on outbox.counts whose function a superuser owns, given away.
$node->safe_psql('postgres', q{
CREATE TRIGGER counts_admin AFTER UPDATE ON outbox.counts FOR EACH ROW EXECUTE FUNCTION public.admin_audit()});
($rc, $out, $err) = $node->psql('postgres', q{ALTER FUNCTION public.admin_audit() OWNER TO tenant});
like($err, qr/ERROR:  outbox: trigger "counts_admin" on outbox\.counts calls public\.admin_audit\(\)/,
	'the function of a trigger on outbox.counts given away is refused');
$node->safe_psql('postgres', q{DROP TRIGGER counts_admin ON outbox.counts});
# outbox's tables under a table of someone else's: what is put on that one
# is cloned onto them.
$node->safe_psql('postgres', q{CREATE TABLE public.over (LIKE outbox.counts) PARTITION BY LIST (topic)});
($rc, $out, $err) = $node->psql('postgres', q{ALTER TABLE public.over ATTACH PARTITION outbox.counts DEFAULT});
isnt($rc, 0, 'outbox.counts attached under another table is refused');
like($err, qr/ERROR:  outbox: public\.over has outbox's table outbox\.counts below it/, 'saying so');

# ALTER TABLE ... INHERIT (a parent's privileges would reach the rows) and
# an EXCLUDE constraint (its index is built inside ALTER TABLE) on outbox's
# tables; an index on a day detached from outbox.events (still
# outbox_writer's, so its build runs as that role).
$node->safe_psql('postgres', q{CREATE TABLE public.parent_of_sinks (LIKE outbox.sinks)});
for my $case (
	[ 'INHERIT', q{ALTER TABLE outbox.sinks INHERIT public.parent_of_sinks},
	  qr/ERROR:  outbox: INHERIT on sinks is refused/ ],
	[ 'an EXCLUDE constraint', qq{ALTER TABLE $today ADD CONSTRAINT loud_excl EXCLUDE USING btree ((public.loud(topic)) WITH =)},
	  qr/ERROR:  outbox: an EXCLUDE constraint on events_p\d+ is refused/ ])
{
	my ($what, $ddl, $names) = @$case;
	($rc, $out, $err) = $node->psql('postgres', $ddl);
	isnt($rc, 0, "$what on outbox's tables is refused");
	like($err, $names, "$what: saying so");
	unlike($err, qr/loud ran/, "$what: the code never ran");
}
# A table inheriting from one of outbox's: outbox's statements without ONLY
# (publish_here(), recount()) would reach its rows and fire its triggers.
($rc, $out, $err) = $node->psql('postgres', q{CREATE TABLE public.kid () INHERITS (outbox.home)});
like($err, qr/ERROR:  outbox: a table inheriting from home is refused/, 'CREATE TABLE ... INHERITS (outbox.home) is refused');
$node->safe_psql('postgres', q{CREATE TABLE public.kid2 (LIKE outbox.counts)});
($rc, $out, $err) = $node->psql('postgres', q{ALTER TABLE public.kid2 INHERIT outbox.counts});
like($err, qr/ERROR:  outbox: a table inheriting from counts is refused/, 'ALTER TABLE ... INHERIT outbox.counts is refused');
$node->safe_psql('postgres', qq{ALTER TABLE outbox.events DETACH PARTITION $today});
($rc, $out, $err) = $node->psql('postgres', qq{CREATE INDEX detached_loud ON $today (public.loud(topic))});
like($err, qr/an index on events_p\d+ that is not built-in code is refused/,
	'an index on a detached day, still outbox_writer\'s, is refused before it is built');
unlike($err, qr/loud ran/, 'its code never ran');
$node->safe_psql('postgres', qq{ALTER TABLE outbox.events ATTACH PARTITION $today $bound});
# An unqualified name that outbox's search_path entry may come to name is
# judged after the lock, as PostgreSQL looks it up then.
($rc, $out, $err) = $node->psql('postgres', q{SET search_path = outbox, public;
  CREATE INDEX counts_loud ON counts (public.loud(topic))});
like($err, qr/an index on counts that is not built-in code is refused/, 'an unqualified name is judged too');

$node->safe_psql('postgres', q{
CREATE FUNCTION public.ddl_audit() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN NULL; END $$;
ALTER FUNCTION public.ddl_audit() OWNER TO tenant;});
($rc, $out, $err) = $node->psql('postgres', q{CREATE EVENT TRIGGER ddl_audit ON ddl_command_end
  EXECUTE FUNCTION public.ddl_audit()});
isnt($rc, 0, 'an event trigger calling a function another role may replace is refused');
like($err, qr/ERROR:  outbox: event trigger "ddl_audit" calls public\.ddl_audit\(\), which role "tenant" may replace/,
	'naming it');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_event_trigger}), '0', 'and it is not there');

# Statistics on expressions are computed by ANALYZE as the owner of
# outbox.events: refused, whatever they call; on columns, made.
($rc, $out, $err) = $node->psql('postgres', qq{CREATE STATISTICS day_bucket_stats ON public.bucket(topic), topic FROM $today});
isnt($rc, 0, 'statistics on an expression of a day are refused');
like($err, qr/ERROR:  outbox: statistics on expressions of events_p\d+ are refused/, 'saying so');
($rc, $out, $err) = $node->psql('postgres', qq{CREATE STATISTICS day_plain_stats (ndistinct) ON topic, key FROM $today});
is($rc, 0, 'statistics on its columns are made') or diag $err;

$node->stop;
done_testing();
