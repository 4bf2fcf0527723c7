# Per-key order at a NATS JetStream sink while four sessions emit at once
# (small transactions of keyed and keyless events, some rolled back on
# purpose: OutboxFaults.pm's load) and two publishers share the key slots:
# every committed event is stored once, nothing rolled back arrives, and per
# key the stream holds the events in emit order. The sink keeps at most one
# message of a subject and key unacknowledged, with many keys in flight.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxNats;
use OutboxFaults qw(fault_node new_load);

my $nats = OutboxNats->start();
$nats->add_stream('ORDERED', 'no.>');
my $node = fault_node('nats_order');
$node->safe_psql('postgres', $nats->sink_sql('nats'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('no.*', 'nats')});

my $load = new_load(node => $node, sessions => 4, keys => 20, per_tx => 3, sleep_ms => 10,
	topic => 'no.steady');
my $suite = OutboxFaults::new_suite(node => $node, load => $load, sink => 'nats', prefix => 'no',
	publishers => 2, scenarios => ['steady'], fetch => \&fetch);
$suite->start;

# The stream's messages of one subject (the topic): the event id is the
# outbox-id header, the order the stream's.
sub fetch {
	my ($topic) = @_;
	return [ map { { id => $_->{headers}{'outbox-id'}, value => $_->{data}, lane => $_->{subject},
				pos => $_->{seq} } } grep { $_->{subject} eq $topic } $nats->messages('ORDERED') ];
}

my $r = $suite->run('steady',
	fault => 'none: four sessions emitting at once',
	lose_nothing => 'every committed event arrives while four sessions emit at once',
	inject => sub {
		usleep(6_000_000);
		return { injections => 0, end => time(), detail => '6 s of load, two publishers' };
	});
is($r->{duplicates}, 0, 'each event is stored once');
cmp_ok($r->{committed}, '>', 200, "a real load ($r->{committed} events)");
$suite->finish;

$node->stop;
$nats->stop;
done_testing();
