# No announcement of the extension is lost: after DROP
# EXTENSION + CREATE EXTENSION, and after CREATE DATABASE + CREATE EXTENSION,
# the database publishes within seconds, every time.
#
# What the old build did: a publisher that found the extension missing
# wrote "absent" into its database's shared slot as it exited. When CREATE
# EXTENSION committed in between (it writes "unknown" and wakes the
# launcher), the exiting publisher's "absent" overwrote it and the launcher
# never started a publisher for that database again; a probe publisher
# started by the launcher's scan of a database just created raced CREATE
# EXTENSION the same way. Now the slot's word carries a generation that
# CREATE EXTENSION bumps, and a publisher sets "absent" only by a
# compare-and-swap from the word it read before its snapshot.
#
# A. 15 times in one database: DROP EXTENSION outbox, a delay, CREATE
#    EXTENSION outbox, a sink and a route, an emit: the event arrives within
#    a few seconds each time. The delays go from none (the statements back to
#    back in one session) through a few ms to about the time the publisher
#    takes to notice the DROP and exit (outbox.poll_interval is 200 ms), and
#    twice "as soon as the publishers have exited". Two publishers
#    (outbox.workers = 2); afterwards there are 2 again, no more.
# B. 6 times: CREATE DATABASE, then in it at once CREATE EXTENSION, a sink, a
#    route and an emit: delivered within a few seconds. Each time the
#    previous database is dropped with a plain DROP DATABASE (no FORCE),
#    which must succeed although a publisher is connected to it; half of the
#    times before CREATE EXTENSION, so that the launcher (woken by the
#    publisher leaving for the DROP) scans while the new database is still
#    without the extension and probes it as CREATE EXTENSION commits.
# A and B exercise the race by timing; its window in the old build (from the
# exiting publisher's catalog check to its write of "absent") is a few
# microseconds wide, so they seldom hit it: TAP 049 holds it open with the
# fault injection build and makes it certain.
# A also checks that each event went to the target of the route it was
# emitted under (the routes of the extension as it was before DROP EXTENSION
# are gone): a publisher that read the configuration version before a route
# change committed claimed an event emitted after it with its old routing
# table; now it checks the version after its claim (claim.cpp).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until);
use OutboxLifecycle qw(session watch fmt_sample redis_stream_fetch);

my $WORKERS = 2;
my $DELIVERY_S = 8;    # "within a few seconds", by the server's clock
my $T0 = time();

my $redis = OutboxRedis->start();
my $node = outbox_node('lifecycle', <<"EOF");
outbox.workers = $WORKERS
max_worker_processes = 16
EOF
my $port = $redis->port;

# The statements that make a database publish to the stream $stream, and
# emit one event there.
sub setup_sql {
	my ($stream) = @_;
	return qq{CREATE EXTENSION outbox;
		SELECT outbox.create_sink('redis', 'redis', '{"port": $port, "mode": "stream"}');
		SELECT outbox.add_route('life.*', 'redis', '$stream');
		SELECT outbox.emit('life.event', '{"stream": "$stream"}', 'k');};
}

# Once every event of $db is published (the broker acknowledged it): the
# seconds from the emit() of the last one to its publication (published_at),
# by the server's clock, so that how long the test takes to look is no part
# of it; undef if they are not published within wait_until's (generous)
# deadline. A lost announcement would leave the event waiting for good.
sub wait_published {
	my ($db) = @_;
	return undef unless defined wait_until(sub {
		$node->safe_psql($db, q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}) eq '0';
	});
	return $node->safe_psql($db, q{SELECT extract(epoch FROM published_at - created_at)
		FROM outbox.events ORDER BY created_at DESC LIMIT 1});
}

# Where the event emitted into $db arrived in Redis: 'new' in $stream (its
# route's target), 'old' in one of @others (the target of a route of the
# extension as it was before), '' nowhere.
sub arrived_where {
	my ($db, $stream, @others) = @_;
	my $id = $node->safe_psql($db, q{SELECT id FROM outbox.events WHERE topic = 'life.event'});
	return '' unless $id;
	return 'new' if grep { $_->{id} eq $id } @{ redis_stream_fetch($redis, $stream) };
	return 'old' if grep { my $s = $_; grep { $_->{id} eq $id } @{ redis_stream_fetch($redis, $s) } } @others;
	return '';
}

sub publishers_of {
	my ($db) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox publisher' AND datname = '$db'");
}

$node->safe_psql('postgres', setup_sql('life-0'));
ok(defined wait_published('postgres') && arrived_where('postgres', 'life-0') eq 'new', 'the first event is delivered');
ok(defined wait_until(sub { publishers_of('postgres') == $WORKERS }), "$WORKERS publishers run");

# --- A. DROP EXTENSION + CREATE EXTENSION ------------------------------------

my @DELAYS = (0, 0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 'exit', 0.2, 0.25, 0.3, 'exit', 0.5);
my ($max_took, @misrouted) = (0);
for my $i (1 .. @DELAYS) {
	my $delay = $DELAYS[ $i - 1 ];
	my $stream = "life-a$i";
	my $what;
	if ($delay eq 'exit') {
		# CREATE as soon as the publishers, gone for the DROP, are no more.
		$node->safe_psql('postgres', 'DROP EXTENSION outbox');
		my $gone = wait_until(sub { publishers_of('postgres') == 0 });
		$what = sprintf('CREATE right after the publishers exited (%.2f s after the DROP)', $gone // -1);
		$node->safe_psql('postgres', setup_sql($stream));
	}
	else {
		# One session: the statements go back to back, each its own transaction.
		my $sleep = $delay > 0 ? "SELECT pg_sleep($delay);" : '';
		$what = $delay > 0 ? sprintf('%d ms between DROP and CREATE', $delay * 1000) : 'DROP and CREATE back to back';
		$node->safe_psql('postgres', "DROP EXTENSION outbox; $sleep " . setup_sql($stream));
	}
	my $took = wait_published('postgres');
	my $where = defined $took ? arrived_where('postgres', $stream, 'life-0', map { "life-a$_" } 1 .. $i - 1) : '';
	ok(defined $took && $took < $DELIVERY_S && $where ne '',
		sprintf('A%d, %s: the event emitted after CREATE EXTENSION is delivered (%.1f s)', $i, $what, $took // -1))
	  or diag('arrived: ' . ($where || 'nowhere') . '; ' . $node->safe_psql('postgres',
		  "SELECT string_agg(format('%s %s %s', pid, backend_type, state), '; ') FROM pg_stat_activity WHERE backend_type LIKE 'outbox%'"));
	push @misrouted, "A$i ($what)" if $where eq 'old';
	$max_took = $took if defined $took && $took > $max_took;
}
note(sprintf('A: the slowest delivery took %.1f s', $max_took));

is(join(', ', @misrouted), '', 'A: every event went to the target of the route it was emitted under');

my $s = session($node, 'postgres');
my $r = watch(session => $s, secs => 2);
is($r->{max_publishers}, $WORKERS, "A: afterwards $WORKERS publishers run, no more")
  or diag(fmt_sample($r->{worst}));
ok(!defined $r->{dup_index}, 'A: no two publishers hold the same index') or diag($r->{dup_index});
$s->close;

# --- B. CREATE DATABASE + CREATE EXTENSION, DROP DATABASE ---------------------

my $prev;
for my $i (1 .. 6) {
	my $db = "life_b$i";
	my $stream = "life-b$i";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	my $drop_first = $i % 2 == 0;
	my @dropped;
	if ($prev && $drop_first) {
		my ($ret, $out, $err) = $node->psql('postgres', "DROP DATABASE $prev");
		push @dropped, [ $ret, $err ];
	}
	$node->safe_psql($db, setup_sql($stream));
	if ($prev && !$drop_first) {
		my ($ret, $out, $err) = $node->psql('postgres', "DROP DATABASE $prev");
		push @dropped, [ $ret, $err ];
	}
	my $took = wait_published($db);
	ok(defined $took && $took < $DELIVERY_S && arrived_where($db, $stream) eq 'new',
		sprintf('B%d: a database created and given the extension at once publishes (%.1f s)%s', $i, $took // -1,
			$prev ? ($drop_first ? ", the previous one dropped in between" : ', the previous one dropped after') : ''));
	if ($prev) {
		is($dropped[0][0], 0, "B$i: plain DROP DATABASE $prev succeeds while its publishers ran")
		  or diag($dropped[0][1]);
	}
	$prev = $db;
}
ok(defined wait_until(sub { publishers_of($prev) == $WORKERS }), "B: the last database has $WORKERS publishers");
ok(defined wait_until(sub {
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox publisher' AND datname LIKE 'life\_b%'}) == $WORKERS
}), 'B: no publisher is left for a dropped database');

unlike(slurp_file($node->logfile), qr/terminated by signal|exited with exit code [^01]/, 'no server process crashed');
$node->stop;

note(sprintf('total %.1f s', time() - $T0));
$redis->stop;
done_testing();
