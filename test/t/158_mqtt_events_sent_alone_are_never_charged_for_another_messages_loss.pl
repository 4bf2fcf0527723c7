# Two sessions commit at once, as fast as they can: one streams events on
# ten keys, the other sends a message an MQTT 3.1.1 broker closes its
# connection over (past mosquitto's max_packet_size) every 10 ms, each on a
# new key, to the same sink. Innocent events lost with a culprit twice are
# sent alone, and a fresh culprit is on the wire beside them unless the
# sink keeps a message sent alone alone on its connection (nothing else in
# flight with it, nothing sent after it until it is answered): lost over
# the culprit, the innocent one read as the cause, was charged attempts
# and ended dead (with outbox.max_attempts = 2, in every run), once without
# ever reaching the subscriber. Proves, at the subscriber: no innocent
# event charged, dead, stuck or missing; per key, first deliveries in emit
# order; every culprit dead, none delivered.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxCulpritStream;

my ($node, $mq) = OutboxCulpritStream::start('sent_alone');
my $duplicates = OutboxCulpritStream::run($node, $mq, 8);
note("duplicates (re-sent after a connection lost before the acknowledgement): $duplicates");
$node->stop;
$mq->stop;
done_testing();
