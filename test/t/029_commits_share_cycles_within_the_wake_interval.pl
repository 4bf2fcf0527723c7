# outbox.wake_interval: commits that come faster than it share publish
# cycles (each event waits at most about that long), and a commit after a
# quiet spell is published at once. 0 gives every commit a cycle of its own.
# Guards issue 16, item 1: the publisher ran a full cycle for every commit,
# four times a polling relay's CPU per event.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use OutboxLifecycle qw(session);
use OutboxNode qw(outbox_node wait_until pending_count);
use OutboxRedis;

my $redis = OutboxRedis->start();
# A long poll, so that only commits start cycles here.
my $node = outbox_node('wake', "outbox.poll_interval = '10s'\noutbox.wake_interval = '400ms'");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
my $port = $redis->port;
$node->safe_psql('postgres', qq{
	SELECT outbox.create_sink('redis', 'redis', '{"port": $port}');
	SELECT outbox.add_route('w.*', 'redis', 'w');});

sub sql { return $node->safe_psql('postgres', $_[0]) }

# 20 one-event transactions over about 600 ms, from one session.
sub burst {
	my ($topic) = @_;
	my $session = session($node);
	for my $i (1 .. 20) {
		defined $session->query("SELECT outbox.emit('$topic', '{\"n\": $i}', 'k')")
		  or die "emit $i failed";
		usleep(30_000);
	}
	$session->close;
	ok(defined wait_until(sub { pending_count($node, 'postgres', "topic = '$topic'") eq '0' }, 30),
		"$topic: every event published");
	# Each publisher transaction that recorded some of them is one cycle.
	return sql("SELECT count(DISTINCT xmin::text) || ' '"
		  . " || round(max(extract(epoch FROM published_at - created_at)) * 1000)"
		  . " FROM outbox.events WHERE topic = '$topic'");
}

# After a quiet spell, a commit is published at once.
sql(q{SELECT outbox.emit('w.warm', '{}')});
ok(defined wait_until(sub { pending_count($node) eq '0' }, 30), 'warm-up published');
sleep 1;
sql(q{SELECT outbox.emit('w.quiet', '{}')});
ok(defined wait_until(sub { pending_count($node) eq '0' }, 30), 'quiet event published');
my $quiet_ms = sql(q{SELECT round(extract(epoch FROM published_at - created_at) * 1000)
	FROM outbox.events WHERE topic = 'w.quiet'});
cmp_ok($quiet_ms, '<', 300, "a commit after a quiet spell waits for no interval ($quiet_ms ms)");

my ($cycles, $max_ms) = split ' ', burst('w.burst');
note("20 commits in ~600 ms with a 400 ms wake interval: $cycles cycles, longest wait $max_ms ms");
cmp_ok($cycles, '<=', 5, 'commits within the interval share cycles');
cmp_ok($max_ms, '<', 2000, 'no event waits much longer than the interval');

# Without the interval each commit gets its own cycle (the comparison that
# shows the first count is the interval's doing).
sql(q{ALTER SYSTEM SET outbox.wake_interval = 0; SELECT pg_reload_conf()});
sleep 1;
my ($cycles0) = split ' ', burst('w.each');
note("the same with outbox.wake_interval = 0: $cycles0 cycles");
cmp_ok($cycles0, '>=', 10, 'with 0, commits get cycles of their own');

# Only cycles that commits started count: the safety poll's cycles (every
# 50 ms here) do not make a lone commit wait out the interval (they did,
# up to the whole interval).
sql(q{ALTER SYSTEM SET outbox.wake_interval = '1s';
	ALTER SYSTEM SET outbox.poll_interval = '50ms'; SELECT pg_reload_conf()});
my @lone;
for my $i (1 .. 4) {
	sleep 1.2;  # longer than the interval since the last commit
	sql("SELECT outbox.emit('w.lone', '{\"n\": $i}')");
	ok(defined wait_until(sub { pending_count($node, 'postgres', "topic = 'w.lone'") eq '0' }, 30),
		"lone commit $i published");
}
my $lone_ms = sql(q{SELECT round(max(extract(epoch FROM published_at - created_at)) * 1000)
	FROM outbox.events WHERE topic = 'w.lone'});
cmp_ok($lone_ms, '<', 500,
	"lone commits between polls wait for no interval (longest $lone_ms ms of 1 s)");
sql(q{ALTER SYSTEM SET outbox.poll_interval = '10s'; SELECT pg_reload_conf()});

# A long interval does not hold up a shutdown.
sql(q{ALTER SYSTEM SET outbox.wake_interval = '1s'; SELECT pg_reload_conf()});
sleep 1;
sql(q{SELECT outbox.emit('w.stop', '{}')});
my $t0 = time;
$node->stop('fast');
cmp_ok(time - $t0, '<=', 10, 'the server stops without waiting out the interval');

done_testing();
