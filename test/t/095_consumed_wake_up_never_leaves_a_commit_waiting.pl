# A commit that asks for a cycle while one runs is published by the next
# cycle at once, even when something inside the running cycle consumed the
# latch it set. A commit sets the request word and the latch only when the
# word is clear; PostgreSQL's own waits inside a transaction (a lock, a
# condition variable) wait on the same latch and reset it. The publisher
# then went to sleep with the request standing, and later commits, seeing
# it standing, set no latch: their events waited for the next statistics
# flush or poll (p99 of 950 ms at 5,000 events/s in bench/publisher_cpu;
# up to outbox.poll_interval).
#
# The fault injection action `latch` plays such a wait: after the claim of
# event A, the cycle waits on its latch; event B's commit sets it and the
# wait consumes it. B must then be published within a fraction of a second
# (the poll is 1 h here). The same when what sets the latch is a route
# resumed (sinks and routes changes wake every publisher).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node wait_until pending_count set_faults fault_injection_available);
use OutboxRedis;

plan skip_all => 'needs the fault injection build of outbox (OUTBOX_FI_LIBDIR)'
  unless fault_injection_available();

my $redis = OutboxRedis->start();
my $node = outbox_node('consumed_wake', "outbox.poll_interval = '1h'", fault_injection => 1);
my $port = $redis->port;
sub sql { return $node->safe_psql('postgres', $_[0]) }
sql('CREATE EXTENSION outbox');
sql(qq{SELECT outbox.create_sink('r', 'redis', '{"port": $port}');
	SELECT outbox.add_route('w.*', 'r', 'w');});
sql(q{SELECT outbox.emit('w.warm', '{}')});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'warm-up published');

for my $round (1 .. 3) {
	# Only a cycle that claimed something reaches the point: the reload's own
	# cycle does not use the rule up.
	set_faults($node, 'publisher.after_claim=latch#1');
	sleep 1;
	my $offset = -s $node->logfile;
	sql("SELECT outbox.emit('w.a', '{\"round\": $round}')");
	ok( defined wait_until(
			sub { slurp_file($node->logfile, $offset) =~ /fault injection: latch at publisher\.after_claim/ }),
		"round $round: the cycle that claimed A waits on its latch");
	sql("SELECT outbox.emit('w.b', '{\"round\": $round}')");
	ok(defined wait_until(sub { pending_count($node) eq '0' }), "round $round: A and B published");
	my $ms = sql(qq{SELECT round(extract(epoch FROM published_at - created_at) * 1000)
		FROM outbox.events WHERE topic = 'w.b' AND payload OPERATOR(pg_catalog.->>) 'round' = '$round'});
	cmp_ok($ms, '<', 500, "round $round: B, whose wake-up the wait consumed, waited $ms ms");
}

# The same for a route resumed while the wait consumes its wake-up (routes
# and sinks set every publisher's latch; the cycle checked them after its
# claim, before the wait): the paused route's event must not wait for the
# poll either.
sql(q{SELECT outbox.add_route('p.*', 'r', 'p'); SELECT outbox.pause('p.*');
	SELECT outbox.emit('p.held', '{}')});
sleep 1;
set_faults($node, 'publisher.after_claim=latch#1');
sleep 1;
my $offset = -s $node->logfile;
sql(q{SELECT outbox.emit('w.a', '{"round": "resume"}')});
ok( defined wait_until(
		sub { slurp_file($node->logfile, $offset) =~ /fault injection: latch at publisher\.after_claim/ }),
	'the cycle that claimed A waits on its latch');
my $resumed = sql(q{SELECT pg_catalog.clock_timestamp() FROM (SELECT outbox.resume('p.*')) r});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'A and the held event published');
my $ms = sql(qq{SELECT round(extract(epoch FROM published_at - '$resumed'::timestamptz) * 1000)
	FROM outbox.events WHERE topic = 'p.held'});
cmp_ok($ms, "<", 2000, "the held event went out $ms ms after its route was resumed (the poll is 1 h)");

set_faults($node, '');
is($redis->cli('XLEN', 'w'), '8', 'the stream holds every event');
is($redis->cli('XLEN', 'p'), '1', 'the resumed route delivered');

$node->stop;
done_testing();
