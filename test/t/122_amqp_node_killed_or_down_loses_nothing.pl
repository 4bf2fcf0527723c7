# The fault suite's load (OutboxFaults.pm: three sessions of small
# transactions with keyed and keyless events, some rolled back on purpose,
# two publishers) against a real RabbitMQ node, reconciled at the queues:
# every committed event arrives (duplicates allowed and counted), nothing of
# a rolled-back transaction arrives, and per key the first deliveries keep
# emit order.
#
#   restart   the node SIGKILLed in the middle of the stream and started
#             again at once (same data), 3 times at random moments: what it
#             had confirmed it still has (persistent messages in durable
#             queues are confirmed once on disk), what it had not is sent again
#   down_15s  the node down for 15 s: the events wait, outbox.workers shows
#             the sink down, and everything is delivered once it is back
#
# Each scenario's topic is the routing key of the default exchange, so each
# has a durable queue of its own name, declared first.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxNode qw(wait_until);
use OutboxFaults qw(fault_node new_load backlog);
use OutboxRabbit;

my @SCENARIOS = qw(restart down_15s);
my $rabbit = OutboxRabbit->start();
$rabbit->declare_queue("fa.$_") for @SCENARIOS, 'tail';
my $node = fault_node('faults_amqp');
my ($port, $user, $password) = ($rabbit->port, $rabbit->user, $rabbit->password);
$node->safe_psql('postgres', qq{
	SELECT outbox.create_sink('rabbit', 'amqp', '{"port": $port, "user": "$user", "password": "$password"}');
	SELECT outbox.add_route('fa.*', 'rabbit');});

# A pause of 100 ms between a session's transactions, not the 20 ms of the
# Kafka and Redis suites: a RabbitMQ boot takes over a minute on a loaded
# machine, and three of them at the faster pace left 200,000 events behind,
# more than the node takes in within the suite's patience there. Every kill
# still catches messages in flight.
my $load = new_load(node => $node, sessions => 3, keys => 30, per_tx => 3, sleep_ms => 100,
	topic => "fa.$SCENARIOS[0]");
my $suite = OutboxFaults::new_suite(node => $node, load => $load, sink => 'amqp', prefix => 'fa',
	publishers => 2, scenarios => \@SCENARIOS, fetch => \&fetch);
$suite->start;

# What arrived on a topic's queue. Reading takes the messages off the queue,
# so they are kept here: a second reading (the reconciliation reads again
# when something seems lost) adds what came since.
my %arrived;
sub fetch {
	my ($topic) = @_;
	my $list = ($arrived{$topic} //= []);
	for my $m (@{ $rabbit->dump_queue($topic) }) {
		push @$list, { id => $m->{message_id}, value => $m->{body}, lane => $topic, pos => scalar @$list };
	}
	return $list;
}

$suite->run('restart',
	fault => 'RabbitMQ killed (SIGKILL) and restarted',
	lose_nothing => 'nothing is lost when the node is killed mid-stream and restarted 3 times',
	inject => sub {
		my ($topic) = @_;
		my @counts;
		for (1 .. 3) {
			usleep(int((0.5 + rand(1.0)) * 1e6));
			my $before = $rabbit->count($topic);
			my $t = time();
			$rabbit->restart;
			push @counts, sprintf('%d queued, back after %.1f s', $before, time() - $t);
		}
		return { injections => 3, end => time(),
			detail => 'before each kill: ' . join('; ', @counts) };
	});

$suite->run('down_15s',
	fault => 'RabbitMQ down 15 s',
	lose_nothing => 'nothing is lost while the node is down for 15 s',
	inject => sub {
		my ($topic) = @_;
		my $offset = -s $node->logfile;
		$rabbit->kill_node;
		my $t = time();
		ok(defined wait_until(sub {
			($node->safe_psql('postgres', q{SELECT string_agg(sinks, ' ') FROM outbox.workers})) =~ /rabbit=down/ }),
			'outbox.workers shows the sink down');
		# An outage of 15 s, as the scenario says (not a wait for something).
		usleep(100_000) while time() - $t < 15;
		my $waiting = backlog($node, topic => $topic);
		cmp_ok($waiting, '>', 0, "events wait while the node is down ($waiting pending)");
		my $down = time() - $t;
		$rabbit->restart;
		my $end = time();
		like(slurp_file($node->logfile, $offset), qr/sink "rabbit" is unavailable \((?:cannot connect to|connection to) 127\.0\.0\.1:\d+/,
			'the publishers say why the sink is unavailable');
		return { injections => 1, end => $end,
			detail => sprintf('killed for %.1f s, then %.1f s to boot; %d events waiting when it came back',
				$down, $end - $t - $down, $waiting) };
	});

$suite->finish;
like($node->safe_psql('postgres', q{SELECT string_agg(sinks, ' ') FROM outbox.workers}), qr/rabbit=connected/,
	'outbox.workers shows the sink connected again');
$node->stop;
$rabbit->stop;
done_testing();
