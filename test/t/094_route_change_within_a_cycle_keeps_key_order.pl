# Routes that change between a cycle's first claim and its next keep per-key
# order. The publisher checks sinks and routes after its first claim and
# loads them if they changed; the claims take only topics an unpaused route
# takes. The first claim, made with the old routes, passes over never-tried
# events of a topic no route took yet; a next claim made with the new
# routes, starting above the first one's last row, took a later event of
# such a topic's key and sent it before the earlier one. Now the cycle ends
# after that first batch and the next one starts from the beginning.
#
# Made certain with the fault injection build: every claim stalls 2 s first
# (publisher.before_claim=stall), and the route for the new topic is added
# while the cycle that loaded the old routes stalls before its first claim.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use OutboxNode qw(outbox_node wait_until pending_count set_faults fault_injection_available);
use OutboxRedis;

plan skip_all => 'needs the fault injection build of outbox (OUTBOX_FI_LIBDIR)'
  unless fault_injection_available();

my $redis = OutboxRedis->start();
my $node = outbox_node('route_mid_cycle', "outbox.batch_size = 10\noutbox.poll_interval = '1h'",
	fault_injection => 1);
my $port = $redis->port;
sub sql { return $node->safe_psql('postgres', $_[0]) }
sql('CREATE EXTENSION outbox');
sql(qq{SELECT outbox.create_sink('r', 'redis', '{"port": $port}');
	SELECT outbox.add_route('y.*', 'r', 'y');
	SELECT outbox.pause('y.*');});

sub log_position { return -s $node->logfile }

sub wait_for_stall {
	my ($offset) = @_;
	return wait_until(sub {
		slurp_file($node->logfile, $offset) =~ /fault injection: stall at publisher\.before_claim/ });
}

# Key k's first event, 10 events of y.a (one full claim), k's second event, 5
# more of y.a; no route takes x.t yet, and y.* is paused.
sql(q{SELECT outbox.emit('x.t', '{"n": 1}', 'k');
	SELECT outbox.emit('y.a', jsonb_build_object('i', i), 'other') FROM generate_series(1, 10) i;
	SELECT outbox.emit('x.t', '{"n": 2}', 'k');
	SELECT outbox.emit('y.a', jsonb_build_object('i', i), 'other') FROM generate_series(11, 15) i;});
# Older than the claims' safe bound (a second), so that a second claim in the
# cycle may take them.
sleep 2;

# Every claim stalls from now on. The reload starts a cycle that stalls and
# claims nothing (no route delivers); let it end.
my $offset = log_position();
set_faults($node, 'publisher.before_claim=stall');
ok(defined wait_for_stall($offset), 'the publisher stalls before its claims');
# The cycle ends (a stall lasts 2 s, longer on a loaded machine): the
# publisher goes idle.
ok(defined wait_until(sub { sql(q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'outbox publisher' AND state = 'idle'}) eq '1' }), 'that cycle ends');

# Resume y.*: the cycle this starts loads the routes, then stalls before its
# first claim; x.* is added meanwhile.
$offset = log_position();
sql(q{SELECT outbox.resume('y.*')});
ok(defined wait_for_stall($offset), 'the cycle that loaded the resumed route stalls');
sql(q{SELECT outbox.add_route('x.*', 'r', 'x')});

ok(defined wait_until(sub { pending_count($node) eq '0' }), 'every event is published');
set_faults($node, '');

my @n = map { /"n":\s*(\d+)/ ? $1 : () } split /\n/, $redis->cli('XRANGE', 'x', '-', '+');
is(join(',', @n), '1,2', "key k's events arrive in emit order");
is($redis->cli('XLEN', 'y'), '15', 'every y.a event arrived');
$node->stop;
done_testing();
