# A NATS server that keeps its connections but stops answering (its
# process SIGSTOPped) never delays another sink. Before the NATS sink
# pipelined, it delivered within its Publish call: each call to the stopped
# server held the publisher's whole cycle until ack_timeout_ms (8 s here),
# and the other NATS sink's events waited with it every time. Now JetStream's
# answers are awaited for outbox.ack_wait at most and recorded as late
# answers: the scenario and what it proves are in lib/OutboxStoppedBroker.pm
# (worst commit-to-published lag of the other sink under 2.5 s, no attempts
# spent, nothing lost, per-key order once the server runs again; the stream
# stores each event once, whatever was sent again).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNats;
use OutboxStoppedBroker;

my $up = OutboxNats->start();
my $stopped = OutboxNats->start();
$up->add_stream('UP', 'fa.>');
$stopped->add_stream('STOPPED', 'fb.>');
OutboxStoppedBroker::run(
	name => 'nats_stopped_server',
	up => $up,
	stopped => $stopped,
	arrived => sub {
		map { { i => ($_->{data} =~ /"i": ?(\d+)/)[0] } }
		  grep { $_->{subject} eq 'fb.order' } $stopped->messages('STOPPED');
	});
done_testing();
