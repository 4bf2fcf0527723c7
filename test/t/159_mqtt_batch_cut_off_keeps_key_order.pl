# An MQTT sink that cuts a key's chain short for want of time (each message
# waits for the PUBACK of the one before) keeps the key's order at the
# subscriber: the scenario and what it proves are lib/OutboxCutOff.pm's.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use Test::More;
use OutboxMosquitto;
use OutboxCutOff;

my $mq = OutboxMosquitto->start(unlimited_queue => 1);
$mq->subscribe('cut/#', 'cut.e');
OutboxCutOff::run(
	name => 'mqtt_cut_off',
	sink_sql => $mq->sink_sql('cut', connect_timeout_ms => 100, ack_timeout_ms => 100),
	arrivals => sub { map { $_->{body} =~ /"n": ?(\d+)/ ? $1 : () } $mq->messages });
$mq->stop;
done_testing();
