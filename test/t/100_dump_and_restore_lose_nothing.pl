# pg_dump / pg_restore of a database with outbox lose nothing. The
# restore used to fail on the partitions CREATE EXTENSION makes for the days
# around today, and on the partition indexes that attaching a partition makes,
# since the dump creates both again; and the events the default partition
# held (an extension member) were left out of the dump.
#
# The source holds sinks and a paused route, pending, waiting-for-retry and
# dead events over several days, and an event for a day far ahead (still in
# the default partition). It is dumped in custom and in plain format and
# restored into new databases (pg_restore --exit-on-error; psql -v
# ON_ERROR_STOP=1). Proves, for each:
# - the restore reports no error at all;
# - every event comes back as it was (id, day, status, attempts), the sinks
#   and routes too, and outbox.recount() gives the source's outbox.stats;
# - once the route is resumed, every pending event is delivered;
# - maintenance runs there (outbox.maintain()).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node wait_until);
use OutboxRedis;

my $redis = OutboxRedis->start();
my $port = $redis->port;
my $node = outbox_node('dump_restore');
$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', qq{
	CREATE EXTENSION outbox;
	SELECT outbox.create_sink('redis', 'redis', '{"port": $port}');
	-- Sinks of every kind come back (no route uses these two).
	SELECT outbox.create_sink('rabbit', 'amqp', '{"host": "127.0.0.1", "exchange": "orders"}');
	SELECT outbox.create_sink('jet', 'nats', '{}');
	SELECT outbox.add_route('orders.*', 'redis', 'restored');
	SELECT outbox.pause('orders.*');
	SELECT outbox.emit('orders.today', pg_catalog.jsonb_build_object('i', i), 'k' || (i % 5))
	  FROM pg_catalog.generate_series(1, 20) i;
	-- Earlier days (as an import would write them): never tried, waiting for
	-- a retry, dead; and one for a day beyond the partitions made ahead.
	INSERT INTO outbox.events (id, topic, key, payload, created_at, status, attempts,
	                           next_attempt_at, last_error)
	SELECT gen_random_uuid(), 'orders.past', 'p' || (i % 3), pg_catalog.jsonb_build_object('i', i),
	       now() - (i % 4 + 1) * interval '1 day',
	       CASE WHEN i % 5 = 0 THEN 'dead' ELSE 'pending' END,
	       CASE WHEN i % 5 = 0 THEN 10 WHEN i % 5 = 1 THEN 2 ELSE 0 END,
	       CASE WHEN i % 5 = 1 THEN now() + interval '1 hour' END,
	       CASE WHEN i % 5 IN (0, 1) THEN 'refused' END
	  FROM pg_catalog.generate_series(1, 40) i;});
# Maintenance makes the earlier days' partitions and moves their events out
# of the default partition. outbox.maintain() skips its run while the
# publisher's own maintenance runs (which, begun before the INSERT, may not
# see those events): called until the default partition is empty.
ok(defined wait_until(sub {
	$node->safe_psql('src', 'SELECT outbox.maintain()');
	$node->safe_psql('src', 'SELECT count(*) FROM outbox.events_default') eq '0' }),
	'maintenance moves the earlier days\' events out of the default partition');
ok(defined wait_until(sub {
	$node->safe_psql('src', "SELECT count(*) FILTER (WHERE state IN ('idle', 'publishing')) > 0"
		  . " AND count(*) FILTER (WHERE state IS NULL OR state NOT IN ('idle', 'publishing')) = 0"
		  . " FROM outbox.workers") eq 't' }),
	'the source\'s publisher runs');
# The publisher maintains the partitions when it starts (after its first
# cycle, whenever a loaded machine lets it: a publishing state does not mean
# it has), then once a minute; its maintenance would move the event dated 30
# days ahead into a partition it makes for that day. Maintenance skips its
# run while another session holds SHARE UPDATE EXCLUSIVE on outbox.events
# (what it takes first, conditionally): held from before the insert until
# the dumps are made, the event is in the default partition when they are.
my $maintenance_held = $node->background_psql('src');
$maintenance_held->query_safe('BEGIN');
$maintenance_held->query_safe('LOCK TABLE ONLY outbox.events IN SHARE UPDATE EXCLUSIVE MODE');
$node->safe_psql('src', q{
	INSERT INTO outbox.events (id, topic, key, payload, created_at)
	VALUES (gen_random_uuid(), 'orders.future', 'f', '{"far": true}', now() + interval '30 days');
	SELECT outbox.recount();});
is($node->safe_psql('src',
	"SELECT count(*) FROM outbox.events_default"), '1', 'the source keeps an event in the default partition');

# Each row's partition: its day's, or the default one (the restored
# database's publisher moves a row of a day it makes a partition for out of
# the default partition whenever its maintenance comes, which may be during
# the restore).
my $rows_sql = q{SELECT id, (created_at AT TIME ZONE 'UTC')::date, status, attempts,
	next_attempt_at IS NULL,
	tableoid::regclass::text IN ('outbox.events_default',
	                             'outbox.events_p' || to_char(created_at AT TIME ZONE 'UTC', 'YYYYMMDD'))
	FROM outbox.events ORDER BY id};
my $stats_sql = q{SELECT topic, pending, published, dead FROM outbox.stats ORDER BY topic};
my $config_sql = q{SELECT name, kind, options::text FROM outbox.sinks
	UNION ALL SELECT pattern, sink, paused::text FROM outbox.routes ORDER BY 1};
my %source = map { $_ => $node->safe_psql('src', $_) } ($rows_sql, $stats_sql, $config_sql);

my $dir = PostgreSQL::Test::Utils::tempdir;
my @conn = ('-h', $node->host, '-p', $node->port);
my ($out, $err) = ('', '');
ok(IPC::Run::run([ 'pg_dump', @conn, '-Fc', '-f', "$dir/src.dump", 'src' ], '>', \$out, '2>', \$err),
	'pg_dump, custom format') or diag $err;
ok(IPC::Run::run([ 'pg_dump', @conn, '-f', "$dir/src.sql", 'src' ], '>', \$out, '2>', \$err),
	'pg_dump, plain format') or diag $err;
$maintenance_held->query_safe('COMMIT');
$maintenance_held->quit;

my %restore = (
	custom => [ 'pg_restore', @conn, '--exit-on-error', '-d', 'dst_custom', "$dir/src.dump" ],
	plain => [ 'psql', @conn, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', 'dst_plain', '-f', "$dir/src.sql" ],
);
my $expect_delivered = 0;
for my $format ('custom', 'plain') {
	my $db = "dst_$format";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	my $log_start = -s $node->logfile;
	($out, $err) = ('', '');
	my $ok = IPC::Run::run($restore{$format}, '>', \$out, '2>', \$err);
	ok($ok, "$format: the restore succeeds") or diag $err;
	unlike($err, qr/ERROR|error:/, "$format: the restore reports no error");

	is($node->safe_psql($db, $rows_sql), $source{$rows_sql},
		"$format: every event is back as it was, in the partition of its day or the default one");
	is($node->safe_psql($db, $config_sql), $source{$config_sql}, "$format: sinks and routes are back");
	$node->safe_psql($db, 'SELECT outbox.recount()');
	is($node->safe_psql($db, $stats_sql), $source{$stats_sql},
		"$format: after outbox.recount(), outbox.stats agrees with the source");
	like(slurp_file($node->logfile, $log_start), qr/gives way to the one being restored/,
		"$format: the partitions CREATE EXTENSION made gave way to the restored ones");

	# Publishing: resume the route; every pending event is delivered.
	my $pending = $node->safe_psql($db,
		"SELECT count(*) FROM outbox.events WHERE status = 'pending'");
	# The retries the source scheduled an hour ahead are made due first.
	$node->safe_psql($db, q{UPDATE outbox.events SET next_attempt_at = now()
		WHERE next_attempt_at > now() AND next_attempt_at < 'infinity'});
	$node->safe_psql($db, q{SELECT outbox.resume('orders.*')});
	ok(defined wait_until(sub {
		$node->safe_psql($db, "SELECT count(*) FROM outbox.events WHERE status = 'pending'") eq '0' }),
		"$format: every pending event ($pending) is delivered after the restore")
	  or diag $node->safe_psql($db, q{SELECT id, topic, key, created_at, attempts, next_attempt_at,
		last_error, tableoid::regclass FROM outbox.events WHERE status = 'pending' ORDER BY id});
	$expect_delivered += $pending;
	is($redis->cli('XLEN', 'restored'), $expect_delivered, "$format: the stream holds them");
	$node->safe_psql($db, 'SELECT outbox.maintain()');
	cmp_ok($node->safe_psql($db,
		"SELECT count(*) FROM outbox.partitions WHERE name ~ '^events_p'"),
		'>=', 4, "$format: maintenance runs in the restored database");
}

# A database whose outbox was updated from 0.1.0 dumps and restores the same
# way: the update records the extension where a fresh install does, with the
# schema as a member (the dump of an updated database used to say CREATE
# EXTENSION outbox WITH SCHEMA outbox, which the restore refused, and then
# every outbox object and event failed with it).
# Before that, the update itself: events emitted under
# 0.1.0, pending across ALTER EXTENSION UPDATE (their route paused), and
# events emitted after it are all delivered, in emit order per key.
$node->safe_psql('postgres', 'CREATE DATABASE upd');
$node->safe_psql('upd', qq{
	CREATE EXTENSION outbox VERSION '0.1.0';
	SELECT outbox.create_sink('redis', 'redis', '{"port": $port}');
	SELECT outbox.add_route('orders.*', 'redis', 'updated');
	SELECT outbox.pause('orders.*');
	SELECT outbox.emit('orders.old', pg_catalog.jsonb_build_object('i', i), 'k' || (i % 2))
	  FROM pg_catalog.generate_series(1, 5) i;});
$node->safe_psql('upd', 'ALTER EXTENSION outbox UPDATE');
$node->safe_psql('upd', q{
	SELECT outbox.emit('orders.new', pg_catalog.jsonb_build_object('i', i), 'k' || (i % 2))
	  FROM pg_catalog.generate_series(6, 10) i;});
is($node->safe_psql('upd', q{SELECT count(*) FROM outbox.events WHERE status = 'pending'}), '10',
	'updated from 0.1.0: the events of both versions wait behind the paused route');
$node->safe_psql('upd', q{SELECT outbox.resume('orders.*')});
ok(defined wait_until(sub {
	$node->safe_psql('upd', q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}) eq '0' }),
	'updated from 0.1.0: every event is delivered once the route is resumed');
my @upd = map { /"i":\s*(\d+)/ ? $1 : () } split /\n/, $redis->cli('XRANGE', 'updated', '-', '+');
is(join(',', sort { $a <=> $b } @upd), '1,2,3,4,5,6,7,8,9,10', 'updated from 0.1.0: each arrived once');
is(join(',', grep { $_ % 2 } @upd), '1,3,5,7,9', 'updated from 0.1.0: in emit order per key');
$node->safe_psql('upd', q{SELECT outbox.pause('orders.*')});
($out, $err) = ('', '');
ok(IPC::Run::run([ 'pg_dump', @conn, '-f', "$dir/upd.sql", 'upd' ], '>', \$out, '2>', \$err),
	'updated from 0.1.0: pg_dump') or diag $err;
unlike(slurp_file("$dir/upd.sql"), qr/CREATE SCHEMA outbox|WITH SCHEMA outbox/,
	'updated from 0.1.0: the dump creates the extension as for a fresh install');
$node->safe_psql('postgres', 'CREATE DATABASE upd_plain');
($out, $err) = ('', '');
ok(IPC::Run::run([ 'psql', @conn, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', 'upd_plain', '-f', "$dir/upd.sql" ],
	'>', \$out, '2>', \$err), 'updated from 0.1.0: the restore succeeds') or diag $err;
unlike($err, qr/ERROR|error:/, 'updated from 0.1.0: the restore reports no error');
is($node->safe_psql('upd_plain', $rows_sql), $node->safe_psql('upd', $rows_sql),
	'updated from 0.1.0: every event is back as it was');
is($node->safe_psql('upd_plain', q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}),
	$node->safe_psql('upd', q{SELECT default_version FROM pg_available_extensions WHERE name = 'outbox'}),
	'updated from 0.1.0: the restored extension is the current version');

$node->stop;
done_testing();
