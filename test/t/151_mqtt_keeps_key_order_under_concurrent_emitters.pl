# Per-key order at an MQTT sink while four sessions emit at once (small
# transactions of keyed and keyless events, some rolled back on purpose:
# OutboxFaults.pm's load) and two publishers share the key slots: every
# committed event reaches a subscriber at QoS 1, nothing rolled back
# arrives, and per key the subscriber sees the events in emit order. The
# sink keeps at most one message of a topic and key unacknowledged, with
# many keys in flight.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxMosquitto;
use OutboxFaults qw(fault_node new_load);

my $mq = OutboxMosquitto->start(unlimited_queue => 1);
$mq->subscribe('#');
my $node = fault_node('mqtt_order');
$node->safe_psql('postgres', $mq->sink_sql('mqtt'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('mo.*', 'mqtt')});

my $load = new_load(node => $node, sessions => 4, keys => 20, per_tx => 3, sleep_ms => 10,
	topic => 'mo.steady');
my $suite = OutboxFaults::new_suite(node => $node, load => $load, sink => 'mqtt', prefix => 'mo',
	publishers => 2, scenarios => ['steady'], fetch => sub { $mq->deliveries(@_) });
$suite->start;


my $r = $suite->run('steady',
	fault => 'none: four sessions emitting at once',
	lose_nothing => 'every committed event arrives while four sessions emit at once',
	inject => sub {
		usleep(6_000_000);
		return { injections => 0, end => time(), detail => '6 s of load, two publishers' };
	});
is($r->{duplicates}, 0, 'without a fault, each event arrives once');
cmp_ok($r->{committed}, '>', 200, "a real load ($r->{committed} events)");
$suite->finish;

$node->stop;
done_testing();
