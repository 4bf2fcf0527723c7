# The publisher's statements reach their rows through the partial indexes
# or by ctid; none reads a whole partition, however small the partition was
# when the statement was planned. The publisher keeps its plans, and the
# UPDATE that marks a batch published (WHERE ctid = ANY($1)) planned while
# today's partition held a handful of rows was a sequential scan, kept as
# the partition grew: every batch read the whole partition, and at 5,000
# events/s the publisher fell behind by seconds (bench/publisher_cpu, 2 of 3
# rounds).
#
# pg_stat_user_tables.seq_scan of today's partition must not move while the
# publisher publishes batches in it (nothing else here reads the partition:
# emit() inserts without a scan, and the test waits on the Redis stream).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use OutboxNode qw(outbox_node wait_until);
use OutboxRedis;

my $redis = OutboxRedis->start();
my $node = outbox_node('no_seqscan', "outbox.poll_interval = '1s'");
sub sql { return $node->safe_psql('postgres', $_[0]) }
sql('CREATE EXTENSION outbox');
my $port = $redis->port;
sql(qq{SELECT outbox.create_sink('r', 'redis', '{"port": $port, "mode": "stream"}');
	SELECT outbox.add_route('s.*', 'r', 's');});

sub stream_holds {
	my ($n) = @_;
	return wait_until(sub { $redis->cli('XLEN', 's') >= $n });
}

# The first batches are planned while today's partition is nearly empty.
sql(q{SELECT outbox.emit('s.first', '{}', 'k')});
ok(defined stream_holds(1), 'the first event is published');
sql(q{SELECT outbox.emit('s.second', '{}', 'k')});
ok(defined stream_holds(2), 'the second event is published');

my $partition = sql(q{SELECT 'events_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')});
# The partition's seq_scan once the publisher has handed over the statistics
# of its cycles that published $published events (it does at most once a
# second, later on a busy machine): one UPDATE per event marks it published,
# so its n_tup_upd counts them, and a cycle's statistics go over together.
sub seq_scans {
	my ($published) = @_;
	my $stats = "SELECT n_tup_upd || ' ' || seq_scan FROM pg_stat_user_tables"
	  . " WHERE schemaname = 'outbox' AND relname = '$partition'";
	my ($upd, $seq) = (0, '');
	ok(defined wait_until(sub { ($upd, $seq) = split ' ', sql($stats); ($upd // 0) >= $published }),
		"the statistics of $published published events are in ($upd updates)");
	return $seq;
}
my $before = seq_scans(2);

# The partition grows; 30 transactions of 100 events, each published in
# batches of its own.
my $published = 1;
for my $i (1 .. 30) {
	sql("SELECT outbox.emit('s.bulk', pg_catalog.jsonb_build_object('i', $i, 'j', j), 'k' || j)"
		  . ' FROM generate_series(1, 100) j');
	$published &&= defined stream_holds(2 + 100 * $i);
	usleep(20_000);
}
ok($published, 'each transaction was published before the next');
my $after = seq_scans(3002);
note("seq_scan of outbox.$partition: $before before, $after after");
is($after, $before, 'publishing 3,000 events scanned no partition sequentially');
is(sql(q{SELECT count(*) FROM outbox.events WHERE status = 'published'}), '3002',
	'every event is marked published');

$node->stop;
done_testing();
