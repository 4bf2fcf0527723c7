# The webhook receiver killed (SIGKILL, mid-stream) and down for 15 s while
# four sessions emit: emit() keeps working, the events wait (pending, no
# event dies: connections refused make the endpoint down, which spends no
# attempts), outbox.workers shows the sink down, and once the receiver is
# back every event arrives, per key in emit order. Requests the receiver
# took but never answered are sent again (at least once): only they may
# arrive twice.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxHttp;
use OutboxNode qw(wait_until);
use OutboxFaults qw(fault_node new_load backlog);

my $OUTAGE = 15;
my $http = OutboxHttp->start();
my $node = fault_node('http_outage', conf => "outbox.max_attempts = 3\n");
$node->safe_psql('postgres', $http->sink_sql('hooks', timeout_ms => 2000, connect_timeout_ms => 500));
$node->safe_psql('postgres', q{SELECT outbox.add_route('hk.*', 'hooks')});

my $load = new_load(node => $node, sessions => 4, keys => 20, per_tx => 3, sleep_ms => 20,
	topic => 'hk.outage');
my $suite = OutboxFaults::new_suite(node => $node, load => $load, sink => 'hooks', prefix => 'hk',
	publishers => 2, scenarios => ['outage'], fetch => sub { $http->deliveries("/hooks/$_[0]") });
$suite->start;


my $sinks = sub { $node->safe_psql('postgres', q{SELECT string_agg(sinks, '; ') FROM outbox.workers}) };
my $r = $suite->run('outage',
	fault => "the receiver killed, then down for $OUTAGE s",
	lose_nothing => "nothing is lost when the receiver is killed and down for $OUTAGE s while emit() goes on",
	inject => sub {
		my ($topic) = @_;
		my $p0 = $load->progress;
		$http->stop;
		my $t = time();
		ok(defined wait_until(sub { $sinks->() =~ /\bhooks=down\b/ }, $OUTAGE - 1),
			'outbox.workers shows the sink down') or diag($sinks->());
		usleep(200_000) while time() - $t < $OUTAGE;
		my $waiting = backlog($node, topic => $topic);
		cmp_ok($waiting, '>', 0, "events wait while the receiver is down ($waiting pending)");
		cmp_ok($load->progress, '>', $p0, 'emit() keeps working meanwhile');
		is($node->safe_psql('postgres',
			qq{SELECT count(*) FROM outbox.events WHERE topic = '$topic' AND status = 'dead'}), '0',
			'no event dies of the outage');
		$http->start_again;
		return { injections => 1, end => time(),
			detail => "killed, $OUTAGE s down, $waiting events pending at the end" };
	});
cmp_ok($r->{duplicates}, '<=', 32, "only requests in flight at the kill may arrive twice ($r->{duplicates})");
ok(defined wait_until(sub { $sinks->() =~ /\bhooks=connected\b/ }), 'the sink is shown connected again');
$suite->finish;

$node->stop;
$http->stop;
done_testing();
