# A DBA who puts on outbox.events something emit() will not run (the rule of
# src/emit/writer_code_rule.hpp) hears it from the CREATE or ALTER statement
# itself: a WARNING that emit() will refuse to write while it is there,
# naming the object, with the DETAIL and HINT emit() then gives. Things emit() may
# run, or never runs (an UPDATE trigger), get no WARNING. Proves, with the
# library preloaded (the hook that says so is installed then):
# - CREATE TRIGGER ... AFTER INSERT, ADD CONSTRAINT ... CHECK calling a
#   function of the user's, CREATE INDEX on one, and ATTACH PARTITION of a
#   table partitioned by such a function each warn, naming the object;
# - emit() then refuses with that message; with the object gone it writes;
# - CREATE TRIGGER ... AFTER UPDATE and a CHECK of built-in code do not warn.
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

my @cases = (
	[ 'an INSERT trigger',
	  q{CREATE TRIGGER audit AFTER INSERT ON outbox.events FOR EACH ROW EXECUTE FUNCTION public.audit()},
	  qr/outbox\.events has trigger "audit"/, q{DROP TRIGGER audit ON outbox.events} ],
	[ 'a CHECK calling a function of the user\'s',
	  q{ALTER TABLE outbox.events ADD CONSTRAINT topic_ok CHECK (public.topic_ok(topic)) NOT VALID},
	  qr/outbox\.events has CHECK constraint "topic_ok"/, q{ALTER TABLE outbox.events DROP CONSTRAINT topic_ok} ],
	[ 'an index on such a function',
	  q{CREATE INDEX bucket_idx ON outbox.events (public.bucket(topic))},
	  qr/outbox\.events has index "bucket_idx"/, q{DROP INDEX outbox.bucket_idx} ],
	[ 'a day partitioned by such a function',
	  qq{ALTER TABLE outbox.events DETACH PARTITION $today;
	     CREATE TABLE outbox.sub (LIKE outbox.events INCLUDING CONSTRAINTS) PARTITION BY LIST (public.bucket(topic));
	     CREATE TABLE outbox.sub_all PARTITION OF outbox.sub DEFAULT;
	     ALTER TABLE outbox.events ATTACH PARTITION outbox.sub $bound},
	  qr/outbox\.sub has the partition key/,
	  qq{ALTER TABLE outbox.events DETACH PARTITION outbox.sub; DROP TABLE outbox.sub;
	     ALTER TABLE outbox.events ATTACH PARTITION $today $bound} ],
);
for my $case (@cases) {
	my ($what, $ddl, $names, $undo) = @$case;
	my ($rc, $out, $err) = $node->psql('postgres', $ddl);
	is($rc, 0, "$what: the statement runs");
	like($err, qr/WARNING:  outbox: emit\(\) will refuse to write while $names/,
		"$what: it warns that emit() will refuse, naming it");
	($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.emit('told.a', '{}')});
	like($err, qr/ERROR:  outbox: emit\(\) does not write while $names/, "$what: emit() refuses with that message");
	$node->safe_psql('postgres', $undo);
	($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.emit('told.a', '{}')});
	is($rc, 0, "$what: gone, emit() writes");
}

my ($rc, $out, $err) = $node->psql('postgres', q{
CREATE TRIGGER audit_update AFTER UPDATE ON outbox.events FOR EACH ROW EXECUTE FUNCTION public.audit();
ALTER TABLE outbox.events ADD CONSTRAINT short_topic CHECK (length(topic) < 300) NOT VALID;});
is($rc, 0, 'an UPDATE trigger and a built-in CHECK are made');
unlike($err, qr/WARNING/, 'without a WARNING');
($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.emit('told.b', '{}')});
is($rc, 0, 'and emit() writes');

$node->stop;
done_testing();
