# A NATS sink that cuts a key's chain short for want of time (each message
# waits for the PubAck of the one before) keeps the key's order in the
# JetStream stream: the scenario and what it proves are
# lib/OutboxCutOff.pm's.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use Test::More;
use OutboxNats;
use OutboxCutOff;

my $nats = OutboxNats->start();
$nats->add_stream('CUT', 'cut.>');
OutboxCutOff::run(
	name => 'nats_cut_off',
	sink_sql => $nats->sink_sql('cut', connect_timeout_ms => 100, ack_timeout_ms => 100),
	arrivals => sub { map { $_->{data} =~ /"n": ?(\d+)/ ? $1 : () } $nats->messages('CUT') });
$nats->stop;
done_testing();
