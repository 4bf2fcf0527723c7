# nats-server killed with SIGKILL in the middle of a steady stream of events
# and started again at once, three times at random moments, while four
# sessions emit (OutboxFaults.pm's load) and two publishers deliver: nothing
# is lost, nothing rolled back arrives, per key the events stay in emit
# order, and each event is stored once. A message JetStream stored but whose
# acknowledgement the kill swallowed is sent again with the same Nats-Msg-Id,
# and JetStream (which rebuilds its duplicate window from its store when it
# starts) drops the copy: exactly once into the stream.
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
$nats->add_stream('KILLED', 'nk.>');
my $node = fault_node('nats_killed');
$node->safe_psql('postgres', $nats->sink_sql('nats', ack_timeout_ms => 2000));
$node->safe_psql('postgres', q{SELECT outbox.add_route('nk.*', 'nats')});

my $load = new_load(node => $node, sessions => 4, keys => 20, per_tx => 3, sleep_ms => 10,
	topic => 'nk.restart');
my $suite = OutboxFaults::new_suite(node => $node, load => $load, sink => 'nats', prefix => 'nk',
	publishers => 2, scenarios => ['restart'], fetch => \&fetch);
$suite->start;

sub fetch {
	my ($topic) = @_;
	return [ map { { id => $_->{headers}{'outbox-id'}, value => $_->{data}, lane => $_->{subject},
				pos => $_->{seq} } } grep { $_->{subject} eq $topic } $nats->messages('KILLED') ];
}

my $r = $suite->run('restart',
	fault => 'nats-server killed (SIGKILL) mid-stream and started again at once',
	lose_nothing => 'nothing is lost when nats-server is killed and restarted 3 times mid-stream',
	inject => sub {
		my @kept;
		for (1 .. 3) {
			usleep(int((0.5 + rand(1.0)) * 1e6));
			my $before = $nats->count('KILLED');
			$nats->start_again;
			my $after = $nats->count('KILLED');
			push @kept, "$before->$after";
			cmp_ok($after, '>=', $before,
				"a restart keeps the $before messages JetStream had stored ($after after)");
		}
		return { injections => 3, end => time(),
			detail => 'stream length before->after each restart: ' . join(', ', @kept) };
	});
is($r->{duplicates}, 0, 'the re-sends the kills forced are stored once (duplicate window)');
$suite->finish;

$node->stop;
$nats->stop;
done_testing();
