# A RabbitMQ node that keeps its connections but stops answering (its
# process SIGSTOPped) never delays another sink. Before the AMQP sink
# pipelined, it delivered within its Publish call: each call to the stopped
# node held the publisher's whole cycle until delivery_timeout_ms (8 s
# here), and the other sink's events waited with it; and reconnecting held
# the cycle for connect_timeout_ms. Now its confirms are awaited for
# outbox.ack_wait at most and recorded as late answers, and connecting waits
# for nothing: the scenario and what it proves are in
# lib/OutboxStoppedBroker.pm (worst commit-to-published lag of the other
# sink under 2.5 s, no attempts spent, nothing lost, per-key order once the
# node runs again).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxRabbit;
use OutboxStoppedBroker;

my $up = OutboxRabbit->start();
my $stopped = OutboxRabbit->start();
# The routes have no target: the routing key is the topic, and the default
# exchange delivers to the queue of that name.
$up->declare_queue($_) for qw(fa.warm fa.order);
$stopped->declare_queue($_) for qw(fb.warm fb.order);
my @arrived;    # the queue is read destructively: what came so far
OutboxStoppedBroker::run(
	name => 'amqp_stopped_node',
	up => $up,
	stopped => $stopped,
	arrived => sub {
		push @arrived, map { { i => decode_json($_->{body})->{i} } } @{ $stopped->dump_queue('fb.order') };
		return @arrived;
	});
$up->stop;
$stopped->stop;
done_testing();
