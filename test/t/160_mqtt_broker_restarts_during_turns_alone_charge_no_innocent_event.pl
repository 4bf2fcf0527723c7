# Test 158's load (one session streams events on ten keys, another sends a
# message an MQTT 3.1.1 broker closes its connection over every 10 ms, each
# on a new key, to the same sink), while the broker restarts every 0.7 s
# and stays down 0.3 s. Innocent events lost with culprits are sent alone
# in turns; a turn that finds the broker down never reached it, so it is
# the sink's trouble, not the event's, whatever the sink answered just
# before. It was charged when the sink had answered anything within
# outbox.ack_wait before the turn: an innocent event was charged in four
# runs of six, and ended dead in one (outbox.max_attempts = 2). Proves, at
# the subscriber: no innocent event charged, dead or missing; per key,
# first deliveries in emit order; every culprit dead, none delivered.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxCulpritStream;

my $secs = 10;
my ($node, $mq) = OutboxCulpritStream::start('restarts_alone');
my $restarts = 0;
OutboxCulpritStream::run(
	$node, $mq, $secs,
	sub {
		my $t0 = time();
		while (time() - $t0 < $secs) {
			usleep(700_000);
			$mq->stop(graceful => 1);    # it saves what waits for the subscriber
			usleep(300_000);
			$mq->start_again;
			$restarts++;
		}
	});
cmp_ok($restarts, '>=', 5, "the broker restarted $restarts times meanwhile");
$node->stop;
$mq->stop;
done_testing();
