# Every restore form publishes what waited in the dump, with no ERROR of
# ours in the server log while it runs.
#
# The dump holds events waiting for a retry (next_attempt_at set: their sink
# was down when it was taken) and never-tried ones, under a route that is
# not paused. A restore is not one transaction unless -1 says so, and the
# restored database's publisher starts as soon as CREATE EXTENSION commits:
# it used to claim the retrying events before outbox.routes was loaded,
# park them as unrouted (next_attempt_at = infinity), and never look at them
# again, since a COPY into outbox.routes did not make it reload. Its
# maintenance, looking for today's partition between the restore's CREATE
# TABLE of it and the ATTACH PARTITION, logged "relation ... already
# exists" as an ERROR.
#
# Each restore without -1 runs in three parts, so that those two moments are
# certain instead of likely: up to the first ATTACH PARTITION, then
# outbox.maintain() (what the publisher runs); up to the data of
# outbox.routes, then a wait until the publisher has parked every restored
# event as unrouted; then the rest. Forms: pg_restore (custom format) and
# psql (plain format), each split so and each with -1, and pg_restore -j 2.
# Proves for each: the restore succeeds, every event is published, none
# twice, within a bound and with nothing done by hand (no outbox.recount(),
# no route touched), and the server log of the restore holds no ERROR. In
# the split forms, an event emitted between the restore's CREATE TABLE of
# today's partition and its ATTACH PARTITION (it lands in
# outbox.events_default) neither makes the ATTACH fail nor is lost.
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

# The source: a server without the publisher, so the events stay as they
# are written here (as a publisher whose sink was down would have left them).
my $source = PostgreSQL::Test::Cluster->new('restore_source');
$source->init;
$source->start;
$source->safe_psql('postgres', qq{
	CREATE EXTENSION outbox;
	SELECT outbox.create_sink('redis', 'redis', '{"port": $port}');
	SELECT outbox.add_route('orders.*', 'redis');
	-- More routes than sinks: pg_restore -j starts the larger table's rows
	-- first, and with routes referencing sinks (0.2.0), the routes' COPY
	-- failed on its foreign key.
	SELECT outbox.add_route('other' || i || '.*', 'redis') FROM pg_catalog.generate_series(1, 40) i;
	SELECT outbox.emit('orders.retried', pg_catalog.jsonb_build_object('i', i), 'k' || (i % 4))
	  FROM pg_catalog.generate_series(1, 20) i;
	SELECT outbox.emit('orders.fresh', pg_catalog.jsonb_build_object('i', i), 'k' || (i % 4))
	  FROM pg_catalog.generate_series(21, 30) i;
	-- What a publisher leaves when the sink is down: a retry time, no attempt
	-- counted (an outage is not the events' fault), the reason.
	UPDATE outbox.events SET next_attempt_at = now() - interval '1 second',
	       last_error = 'sink redis is down'
	 WHERE topic = 'orders.retried';});
my $total = 30;

my $dir = PostgreSQL::Test::Utils::tempdir;
my @src = ('-h', $source->host, '-p', $source->port);
command_ok([ 'pg_dump', @src, '-Fc', '-f', "$dir/src.dump", 'postgres' ], 'pg_dump, custom format');
command_ok([ 'pg_dump', @src, '-f', "$dir/src.sql", 'postgres' ], 'pg_dump, plain format');
$source->stop;

my $node = outbox_node('restore_target');
my @conn = ('-h', $node->host, '-p', $node->port);

# The custom dump's table of contents, split in three lists (pg_restore -L
# restores the entries listed, in the order listed).
my ($toc) = run_command([ 'pg_restore', '-l', "$dir/src.dump" ]);
my @entries = grep { /^\d+;/ } split /\n/, $toc;
my $first_attach = (grep { $entries[$_] =~ / TABLE ATTACH / } 0 .. $#entries)[0];
my $routes_data = (grep { $entries[$_] =~ / TABLE DATA outbox routes / } 0 .. $#entries)[0];
ok(defined $first_attach && defined $routes_data && $first_attach < $routes_data,
	'the custom dump attaches partitions before it loads outbox.routes')
  or diag $toc;
my @toc_parts = (
	[ @entries[ 0 .. $first_attach - 1 ] ],
	[ @entries[ $first_attach .. $routes_data - 1 ] ],
	[ @entries[ $routes_data .. $#entries ] ]);
for my $i (0 .. 2) {
	open my $fh, '>', "$dir/part$i.list" or die $!;
	print $fh join("\n", @{ $toc_parts[$i] }), "\n";
	close $fh;
}

# The plain dump, split at the same two places.
my $plain = slurp_file("$dir/src.sql");
my $attach_at = index($plain, 'ALTER TABLE ONLY outbox.events ATTACH PARTITION');
my $routes_at = index($plain, 'COPY outbox.routes ');
ok($attach_at > 0 && $routes_at > $attach_at,
	'the plain dump attaches partitions before it loads outbox.routes');
# The dump's settings (search_path and the like) open every part.
my $settings = substr($plain, 0, index($plain, 'CREATE EXTENSION'));
my @plain_parts = (
	substr($plain, 0, $attach_at),
	$settings . substr($plain, $attach_at, $routes_at - $attach_at),
	$settings . substr($plain, $routes_at));
for my $i (0 .. 2) {
	open my $fh, '>', "$dir/part$i.sql" or die $!;
	print $fh $plain_parts[$i];
	close $fh;
}

# Event id -> how many entries of the topics' streams carry it. Every
# restore publishes the same ids to the same streams (the route's target is
# the event's topic): a restore's deliveries are the difference between the
# counts before and after it.
sub stream_ids {
	my %ids;
	for my $stream ('orders.retried', 'orders.fresh') {
		my $out = $redis->cli('XRANGE', $stream, '-', '+');
		my @lines = split /\n/, $out;
		for my $i (0 .. $#lines - 1) {
			$ids{ $lines[ $i + 1 ] }++ if $lines[$i] eq 'id';
		}
	}
	return \%ids;
}

sub restore_step {
	my ($what, $cmd) = @_;
	my ($ok, $out, $err) = (0, '', '');
	$ok = IPC::Run::run($cmd, '>', \$out, '2>', \$err);
	ok($ok, "$what") or diag $err;
	unlike($err, qr/ERROR|error:/, "$what: no error reported");
	return;
}

my $pending_sql = q{SELECT count(*) FROM outbox.events WHERE status = 'pending'};
my $parked_sql = q{SELECT count(*) FROM outbox.events WHERE next_attempt_at = 'infinity'};

sub check_published {
	my ($form, $db, $before, $emitted) = @_;
	my $expected = $total + ($emitted // 0);
	ok(defined wait_until(sub { $node->safe_psql($db, $pending_sql) eq '0' }),
		"$form: every restored event is published without anything done by hand")
	  or diag $node->safe_psql($db, q{SELECT topic, key, next_attempt_at, last_error
		FROM outbox.events WHERE status = 'pending' ORDER BY id});
	my $after = stream_ids();
	my @ids = split /\n/, $node->safe_psql($db, 'SELECT id FROM outbox.events ORDER BY id');
	is(scalar(@ids), $expected, "$form: all $total events were restored"
		. ($emitted ? ", beside the $emitted emitted meanwhile" : ''));
	my @twice = grep { ($after->{$_} // 0) - ($before->{$_} // 0) != 1 } @ids;
	is(scalar(@twice), 0, "$form: each event reached Redis once")
	  or diag "not once: @twice[0 .. ($#twice < 4 ? $#twice : 4)]";
	return;
}

sub check_log {
	my ($form, $log_start) = @_;
	my @errors = grep { /ERROR:/ } split /\n/, slurp_file($node->logfile, $log_start);
	is(scalar(@errors), 0, "$form: the server log of the restore holds no ERROR")
	  or diag join("\n", @errors[0 .. ($#errors < 9 ? $#errors : 9)]);
	return;
}

# In three parts, as described at the top.
for my $format ('custom', 'plain') {
	my $db = 'split_' . $format;
	my $form = "$format, in three parts";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	my $before = stream_ids();
	my $log_start = -s $node->logfile;
	my @part = $format eq 'custom'
	  ? map { [ 'pg_restore', @conn, '--exit-on-error', '-d', $db, '-L', "$dir/part$_.list", "$dir/src.dump" ] } 0 .. 2
	  : map { [ 'psql', @conn, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $db, '-f', "$dir/part$_.sql" ] } 0 .. 2;

	restore_step("$form: part 1 (to the first ATTACH PARTITION)", $part[0]);
	# Today's partition is restored and not yet attached: maintenance finds
	# no partition for today and a table of that name.
	my ($ret, $out, $err) = $node->psql($db, 'SELECT outbox.maintain()');
	is($ret, 0, "$form: maintenance between the restore's CREATE TABLE and ATTACH PARTITION succeeds")
	  or diag $err;
	# An application emits now: today's partition has given way to the
	# restored table, not attached yet, so the event lands in
	# outbox.events_default, where it used to make the restore's ATTACH
	# PARTITION fail and leave the restored events outside outbox.events.
	$node->safe_psql($db, q{SELECT outbox.emit('orders.fresh', '{"i": 0}', 'k0')});
	is($node->safe_psql($db, 'SELECT count(*) FROM outbox.events_default'), '1',
		"$form: an event emitted while the restore runs lands in the default partition");

	restore_step("$form: part 2 (to the data of outbox.routes)", $part[1]);
	# The publisher runs here (CREATE EXTENSION committed in part 1): it
	# claims the retrying events and, with no route loaded, parks them.
	ok(defined wait_until(sub { $node->safe_psql($db, $parked_sql) eq '20' }),
		"$form: before outbox.routes is restored, the publisher parks the retrying events as unrouted")
	  or diag $node->safe_psql($db, q{SELECT topic, next_attempt_at, last_error FROM outbox.events ORDER BY id});

	restore_step("$form: part 3 (routes, sinks and the rest)", $part[2]);
	is($node->safe_psql($db, q{SELECT count(*) FROM pg_catalog.pg_class c
		WHERE c.relnamespace = 'outbox'::regnamespace AND c.relname LIKE 'events\\_p%'
		  AND c.relkind = 'r' AND NOT c.relispartition}), '0',
		"$form: every restored partition is attached");
	check_published($form, $db, $before, 1);
	check_log($form, $log_start);
}

# In one transaction, and pg_restore -j 2.
my %whole = (
	'custom, -1' => sub { [ 'pg_restore', @conn, '--exit-on-error', '-1', '-d', $_[0], "$dir/src.dump" ] },
	'plain, -1' => sub { [ 'psql', @conn, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-1', '-d', $_[0], '-f', "$dir/src.sql" ] },
	'custom, -j 2' => sub { [ 'pg_restore', @conn, '--exit-on-error', '-j', '2', '-d', $_[0], "$dir/src.dump" ] },
);
my $n = 0;
for my $form (sort keys %whole) {
	my $db = 'whole_' . $n++;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	my $before = stream_ids();
	my $log_start = -s $node->logfile;
	restore_step("$form: the restore", $whole{$form}->($db));
	check_published($form, $db, $before);
	check_log($form, $log_start);
}

$node->stop;
done_testing();
