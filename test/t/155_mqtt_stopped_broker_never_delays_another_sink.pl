# An MQTT broker that keeps its connections but stops answering (its
# process SIGSTOPped) never delays another sink. Before the MQTT sink
# pipelined, it delivered within its Publish call: each call to the stopped
# broker held the publisher's whole cycle until ack_timeout_ms (8 s here),
# and the other MQTT sink's events waited with it every time. Now its
# acknowledgements are awaited for outbox.ack_wait at most and recorded as
# late answers, and connecting waits for nothing: the scenario and what it
# proves are in lib/OutboxStoppedBroker.pm (worst commit-to-published lag of
# the other sink under 2.5 s, no attempts spent, nothing lost, per-key order
# once the broker runs again).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxMosquitto;
use OutboxStoppedBroker;

my $up = OutboxMosquitto->start();
my $stopped = OutboxMosquitto->start();
$up->subscribe('#');
$stopped->subscribe('#');
OutboxStoppedBroker::run(
	name => 'mqtt_stopped_broker',
	up => $up,
	stopped => $stopped,
	arrived => sub {
		map { { i => ($_->{body} =~ /"i": ?(\d+)/)[0] } }
		  grep { $_->{topic} eq 'fb.order' } $stopped->messages;
	});
done_testing();
