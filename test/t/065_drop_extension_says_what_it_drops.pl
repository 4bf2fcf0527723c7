# DROP EXTENSION outbox drops outbox.events with every event in it; it now
# says how many undelivered (pending and dead) events went, as a WARNING.
#
# Proves: a DROP EXTENSION of a database holding pending and dead events
# warns with both counts; one holding only published events, or none, says
# nothing; a role that may not drop the extension gets PostgreSQL's refusal
# and no count; an extension owner that is not a superuser (and may not read
# outbox.events) gets the count too. The count runs as the owner of
# outbox.events in a security-restricted operation: code someone put on a
# partition (a day partitioned further by a key that calls a function,
# which PostgreSQL runs when it loads the key) ran as the superuser who
# dropped; now it runs as outbox_writer, and an error in it costs the count,
# never the DROP.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node);

my $node = outbox_node('drop_warning', '');
$node->safe_psql('postgres', 'CREATE ROLE intruder LOGIN');

$node->safe_psql('postgres', q{
CREATE EXTENSION outbox;
SELECT outbox.emit('orders.new', pg_catalog.jsonb_build_object('i', i)) FROM generate_series(1, 5) i;
UPDATE outbox.events SET status = 'dead', attempts = 10
 WHERE id = (SELECT id FROM outbox.events ORDER BY id LIMIT 1);});

my ($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION outbox', extra_params => [ '-U', 'intruder' ]);
isnt($ret, 0, 'a role that does not own the extension may not drop it');
like($err, qr/must be owner/, "PostgreSQL's own refusal");
unlike($err, qr/dropped .* event/, 'and no count of the events');

($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION outbox');
is($ret, 0, 'the owner drops the extension');
like($err, qr/WARNING:  DROP EXTENSION outbox dropped 4 pending and 1 dead event\(s\), never delivered/,
	'the WARNING names how many pending and dead events went');

$node->safe_psql('postgres', q{
CREATE EXTENSION outbox;
SELECT outbox.emit('orders.new', '{}');
UPDATE outbox.events SET status = 'published', published_at = now();});
($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION outbox');
is($ret, 0, 'dropped again');
unlike($err, qr/WARNING/, 'nothing undelivered: no WARNING');

# An extension owner that is not a superuser.
$node->safe_psql('postgres', q{
CREATE ROLE admin LOGIN SUPERUSER;
CREATE ROLE extowner LOGIN NOSUPERUSER;});
$node->safe_psql('postgres', q{CREATE EXTENSION outbox; SELECT outbox.emit('orders.new', '{}');},
	extra_params => [ '-U', 'admin' ]);
$node->safe_psql('postgres', 'REASSIGN OWNED BY admin TO extowner');
($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION outbox', extra_params => [ '-U', 'extowner' ]);
is($ret, 0, 'an extension owner that is not a superuser drops it');
like($err, qr/WARNING:  DROP EXTENSION outbox dropped 1 pending and 0 dead event\(s\)/,
	'... and is told what it dropped, though it may not read outbox.events');

# Code on a partition runs as the owner of outbox.events, never as the
# superuser who drops. With the library preloaded such a partition is
# refused (TAP 069): it is made while the server runs without it.
$node->safe_psql('postgres', q{
CREATE EXTENSION outbox;
SELECT outbox.emit('orders.new', '{}');});
$node->append_conf('postgresql.conf', "shared_preload_libraries = ''");
$node->restart;
$node->safe_psql('postgres', q{
CREATE FUNCTION public.who() RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$BEGIN
    RAISE WARNING 'who: current_user % superuser %', current_user,
        (SELECT rolsuper FROM pg_roles WHERE rolname = current_user);
    RETURN 0; END$$;
CREATE TABLE outbox.events_p20310110 PARTITION OF outbox.events
    FOR VALUES FROM ('2031-01-10 00:00+00') TO ('2031-01-11 00:00+00')
    PARTITION BY RANGE ((extract(hour FROM created_at AT TIME ZONE 'UTC') + public.who()));
CREATE TABLE outbox.events_p20310110_all PARTITION OF outbox.events_p20310110
    FOR VALUES FROM (0) TO (24);});
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'outbox'");
$node->restart;
# A new session loads (and folds) the partition key anew.
($ret, $out, $err) = $node->psql('postgres', 'BEGIN; DROP EXTENSION outbox; ROLLBACK;');
is($ret, 0, 'the DROP runs');
like($err, qr/who: current_user outbox_writer superuser f/, 'the key ran as outbox_writer');
unlike($err, qr/superuser t/, '... and never as a superuser');
like($err, qr/dropped 1 pending/, '... and the count was said');

$node->safe_psql('postgres', q{CREATE OR REPLACE FUNCTION public.who() RETURNS int LANGUAGE plpgsql
	IMMUTABLE AS $$BEGIN RAISE EXCEPTION 'who refuses'; END$$;});
($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION outbox');
is($ret, 0, 'an error in that code does not stop the DROP');
like($err, qr/WARNING:  outbox: could not count the events DROP EXTENSION drops: who refuses/,
	'... it costs only the count, said as a WARNING');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'outbox'}), '0',
	'the extension is gone');

$node->stop;
done_testing();
