# While a sink's late answers are awaited (a Kafka partition without a
# leader), the idle publisher waits on its latch in short slices and looks
# for the answers between them. A commit that set the latch just after a
# slice timed out, before the latch was reset, was lost: the reset cleared
# it, the publisher went on waiting slice after slice, and later commits,
# seeing a cycle requested already, set no latch. Their events waited for
# the late answers or outbox.poll_interval (an outside review measured
# stalls of 980 ms at the default 1 s, 3 s at 3 s, with the sink answering
# all along).
#
# The fault injection action `stall` holds the publisher for 2 s right after
# a slice timed out; event B is committed then. B must be published within
# a few seconds of its commit: not when the late answer comes (the
# leaderless partition's message times out after 60 s here) nor at the poll
# (1 h).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql set_faults fault_injection_available);

plan skip_all => 'needs the fault injection build of outbox (OUTBOX_FI_LIBDIR)'
  unless fault_injection_available();

my $kafka = OutboxKafka->start(topics => ['good:1', 'stuck:1']);
my $node = outbox_node('late_wake', "outbox.poll_interval = '1h'", fault_injection => 1);
sub sql { return $node->safe_psql('postgres', $_[0]) }
sql('CREATE EXTENSION outbox');
sql(kafka_sink_sql('kafka', $kafka->bootstrap, 'message.timeout.ms' => '60000'));
sql(q{SELECT outbox.add_route('good.*', 'kafka', 'good'); SELECT outbox.add_route('stuck.*', 'kafka', 'stuck')});
sql(q{SELECT outbox.emit('good.warm', '{}')});
ok(defined wait_until(sub { sql(q{SELECT count(*) FROM outbox.events WHERE status = 'pending'}) eq '0' }),
	'warm-up published');

# The partition loses its leader: its event is left to a late answer that
# does not come for a minute, with the healthy topic answering beside it.
$kafka->command_ok('leader stuck 0 -1');
sql(q{SELECT outbox.emit('stuck.e', '{}', 's')});
sql(q{SELECT outbox.emit('good.a', '{}', 'a')});
ok(defined wait_until(sub { sql(q{SELECT status FROM outbox.events WHERE topic = 'good.a'}) eq 'published' }),
	'a healthy event goes out while the stuck one awaits its answer');

for my $round (1 .. 2) {
	my $offset = -s $node->logfile;
	set_faults($node, 'publisher.sleep_timed_out=stall#1');
	ok(defined wait_until(sub {
		slurp_file($node->logfile, $offset) =~ /fault injection: stall at publisher\.sleep_timed_out/ }),
		"round $round: the publisher stalls right after a wait slice timed out");
	sql("SELECT outbox.emit('good.b', '{\"round\": $round}', 'b')");
	ok(defined wait_until(sub { sql(qq{SELECT status FROM outbox.events WHERE topic = 'good.b'
		AND payload OPERATOR(pg_catalog.->>) 'round' = '$round'}) eq 'published' }, 30),
		"round $round: B is published");
	my $ms = sql(qq{SELECT round(extract(epoch FROM published_at - created_at) * 1000)
		FROM outbox.events WHERE topic = 'good.b' AND payload OPERATOR(pg_catalog.->>) 'round' = '$round'});
	cmp_ok($ms, '<', 4000, "round $round: B, committed during the stall, waited $ms ms (not for the late answer)");
}
is(sql(q{SELECT status FROM outbox.events WHERE topic = 'stuck.e'}), 'pending',
	'the stuck event still awaits its answer: the late answer did not wake the publisher');

set_faults($node, '');
$node->stop;
$kafka->stop;
done_testing();
