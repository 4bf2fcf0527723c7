# outbox.wake_interval: commits that come faster than it share publish
# cycles (each event waits at most about that long), and a commit after a
# quiet spell is published at once. 0 gives every commit a cycle of its own.
# The publisher used to run a full cycle for every commit, four times a
# polling relay's CPU per event.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep usleep);
use OutboxLifecycle qw(session);
use OutboxNode qw(outbox_node wait_until pending_count);
use OutboxRedis;

my $redis = OutboxRedis->start();
# A long poll, so that only commits start cycles here. The longest wake
# interval there is (1 s): what it does stands out most against what a busy
# machine adds to every cycle.
my $W = 1;    # outbox.wake_interval, s
my $node = outbox_node('wake', "outbox.poll_interval = '10s'\noutbox.wake_interval = '${W}s'");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
my $port = $redis->port;
$node->safe_psql('postgres', qq{
	SELECT outbox.create_sink('redis', 'redis', '{"port": $port}');
	SELECT outbox.add_route('w.*', 'redis', 'w');});

sub sql { return $node->safe_psql('postgres', $_[0]) }

# Set outbox.wake_interval (and outbox.poll_interval) server-wide; returns
# once a new session shows it (the postmaster has passed the reload on to
# the publisher), then gives the publisher a moment to take it.
sub set_intervals {
	my (%set) = @_;
	sql(join('; ', map { "ALTER SYSTEM SET outbox.$_ = '$set{$_}'" } sort keys %set)
		  . '; SELECT pg_reload_conf()');
	for my $name (sort keys %set) {
		ok(defined wait_until(sub { sql("SHOW outbox.$name") eq $set{$name} }), "outbox.$name is $set{$name}");
	}
	sleep 1;
	return;
}

# 20 one-event transactions 100 ms apart, from one session: each commit
# comes well within the interval of the one before (so with the interval
# they share cycles), and well after the cycle the one before started
# (so without it each gets a cycle of its own, however busy the machine).
# Returns the cycles that published them, the longest wait (ms) and the
# seconds from the first commit to the last, by the server's clock.
sub burst {
	my ($topic) = @_;
	my $session = session($node);
	for my $i (1 .. 20) {
		defined $session->query("SELECT outbox.emit('$topic', '{\"n\": $i}', 'k')")
		  or die "emit $i failed";
		usleep(100_000);
	}
	$session->close;
	ok(defined wait_until(sub { pending_count($node, 'postgres', "topic = '$topic'") eq '0' }),
		"$topic: every event published");
	# Each publisher transaction that recorded some of them is one cycle.
	return split ' ', sql("SELECT count(DISTINCT xmin::text) || ' '"
		  . " || round(max(extract(epoch FROM published_at - created_at)) * 1000) || ' '"
		  . " || extract(epoch FROM max(created_at) - min(created_at))"
		  . " FROM outbox.events WHERE topic = '$topic'");
}

# After a quiet spell (longer than the interval), a commit is published at
# once: not after the interval, which would be 1000 ms.
sql(q{SELECT outbox.emit('w.warm', '{}')});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'warm-up published');
sleep $W + 0.5;
sql(q{SELECT outbox.emit('w.quiet', '{}')});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'quiet event published');
my $quiet_ms = sql(q{SELECT round(extract(epoch FROM published_at - created_at) * 1000)
	FROM outbox.events WHERE topic = 'w.quiet'});
cmp_ok($quiet_ms, '<', 500, "a commit after a quiet spell waits for no interval ($quiet_ms ms of 1000)");

# Cycles that commits start come at least the interval apart: over the
# burst's span that is at most span / interval + 1 of them, and one more for
# the last commits, which wait for the next (and the 10 s poll may add one).
my ($cycles, $max_ms, $span) = burst('w.burst');
my $most = int($span / $W) + 3;
note("20 commits in $span s with a 1 s wake interval: $cycles cycles, longest wait $max_ms ms");
cmp_ok($cycles, '<=', $most, "commits within the interval share cycles (at most $most in $span s)");
# Beyond the interval an event would wait for the 10 s poll.
cmp_ok($max_ms, '<', 5000, 'no event waits much longer than the interval');

# Without the interval each commit gets its own cycle (the comparison that
# shows the first count is the interval's doing).
set_intervals(wake_interval => '0');
my ($cycles0) = burst('w.each');
note("the same with outbox.wake_interval = 0: $cycles0 cycles");
cmp_ok($cycles0, '>=', 10, 'with 0, commits get cycles of their own');
cmp_ok($cycles0, '>', $cycles, 'more than with the interval');

# Only cycles that commits started count: the safety poll's cycles (every
# 50 ms here) do not make a lone commit wait out the interval (they did,
# up to the whole interval).
set_intervals(wake_interval => '1s', poll_interval => '50ms');
my @lone;
for my $i (1 .. 4) {
	sleep 1.2;  # longer than the interval since the last commit
	sql("SELECT outbox.emit('w.lone', '{\"n\": $i}')");
	ok(defined wait_until(sub { pending_count($node, 'postgres', "topic = 'w.lone'") eq '0' }),
		"lone commit $i published");
}
my $lone_ms = sql(q{SELECT round(max(extract(epoch FROM published_at - created_at)) * 1000)
	FROM outbox.events WHERE topic = 'w.lone'});
cmp_ok($lone_ms, '<', 500,
	"lone commits between polls wait for no interval (longest $lone_ms ms of 1 s)");
set_intervals(poll_interval => '10s');

# A long interval does not hold up a shutdown: a commit right after another
# one's cycle waits for the interval (unless the test was slower than that)
# when the server is told to stop.
sql(q{SELECT outbox.emit('w.stop', '{}')});
ok(defined wait_until(sub { pending_count($node, 'postgres', "topic = 'w.stop'") eq '0' }), 'w.stop published');
sql(q{SELECT outbox.emit('w.stop', '{"held": true}')});
my $t0 = time;
$node->stop('fast');
cmp_ok(time - $t0, '<=', 30, 'the server stops without waiting out the interval');

done_testing();
