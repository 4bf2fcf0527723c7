# mosquitto stopped (SIGTERM: it saves its state) and down for 15 s while
# four sessions emit: emit() keeps working,
# the events wait (pending, without dying of it), outbox.workers shows the
# sink down, and once the broker is back every event is delivered, per key
# in emit order.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxMosquitto;
use OutboxNode qw(wait_until);
use OutboxFaults qw(fault_node new_load backlog);

my $OUTAGE = 15;
my $mq = OutboxMosquitto->start(unlimited_queue => 1);
$mq->subscribe('#');
my $node = fault_node('mqtt_outage', conf => "outbox.max_attempts = 3\n");
$node->safe_psql('postgres', $mq->sink_sql('mqtt', ack_timeout_ms => 2000, connect_timeout_ms => 1000));
$node->safe_psql('postgres', q{SELECT outbox.add_route('mu.*', 'mqtt')});

my $load = new_load(node => $node, sessions => 4, keys => 20, per_tx => 3, sleep_ms => 20,
	topic => 'mu.outage');
my $suite = OutboxFaults::new_suite(node => $node, load => $load, sink => 'mqtt', prefix => 'mu',
	publishers => 2, scenarios => ['outage'], fetch => sub { $mq->deliveries(@_) });
$suite->start;


my $sinks = sub { $node->safe_psql('postgres', q{SELECT string_agg(sinks, '; ') FROM outbox.workers}) };
$suite->run('outage',
	fault => "mosquitto down for $OUTAGE s",
	lose_nothing => "nothing is lost when mosquitto is down for $OUTAGE s while emit() goes on",
	inject => sub {
		my ($topic) = @_;
		my $p0 = $load->progress;
		$mq->stop(graceful => 1);    # it saves what waits for the subscriber
		my $t = time();
		ok(defined wait_until(sub { $sinks->() =~ /\bmqtt=down\b/ }, 10),
			'outbox.workers shows the sink down') or diag($sinks->());
		usleep(200_000) while time() - $t < $OUTAGE;
		my $waiting = backlog($node, topic => $topic);
		cmp_ok($waiting, '>', 0, "events wait while the broker is down ($waiting pending)");
		cmp_ok($load->progress, '>', $p0, 'emit() keeps working meanwhile');
		is($node->safe_psql('postgres',
			qq{SELECT count(*) FROM outbox.events WHERE topic = '$topic' AND status = 'dead'}), '0',
			'no event dies of the outage (the sink is down, not the events at fault)');
		like($sinks->(), qr/\bmqtt=down\b/, "the sink is still shown down after $OUTAGE s");
		$mq->start_again;
		return { injections => 1, end => time(),
			detail => "$OUTAGE s down, $waiting events pending at the end" };
	});
ok(defined wait_until(sub { $sinks->() =~ /\bmqtt=connected\b/ }), 'the sink is shown connected again');
$suite->finish;

$node->stop;
done_testing();
