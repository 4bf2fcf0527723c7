# A key's chain in a batch (each message waits for the previous one's
# PubAck) that takes longer than connect_timeout_ms + ack_timeout_ms to
# send is cut short: the rest of the chain comes back not sent, due at once,
# without an attempt. Its earlier events were delivered, so no failure
# holds the key; the not-sent events hold it themselves, so later events of
# the key, emitted meanwhile and claimed as new events, never reach the
# stream before them (they did: the verdict parked the not-sent events due
# now without blocking their key). Per route and key, the stream receives
# events in emit order (docs/delivery.md).
#
# No fault at all here: the server runs throughout. Each round emits a
# chain of CHAIN events of key "k" in one transaction, then, while the
# publisher works on it, a few more of the same key.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxNode qw(outbox_node wait_until);
use OutboxNats;

use constant { CHAIN => 3000, ROUNDS => 6 };

my $nats = OutboxNats->start();
$nats->add_stream('CUT', 'cut.>');
my $node = outbox_node('nats_cut_off', "outbox.batch_size = 5000\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', $nats->sink_sql('nats', connect_timeout_ms => 100, ack_timeout_ms => 100));
$node->safe_psql('postgres', q{SELECT outbox.add_route('cut.*', 'nats')});
$node->safe_psql('postgres', q{CREATE SEQUENCE n});

my $cut_seen = 0;
for my $round (1 .. ROUNDS) {
	$node->safe_psql('postgres', qq{SELECT outbox.emit('cut.e', jsonb_build_object('n', nextval('n')), 'k')
		FROM generate_series(1, ${\ CHAIN})});
	for (1 .. 10) {
		usleep(50_000);
		$node->safe_psql('postgres', q{SELECT outbox.emit('cut.e', jsonb_build_object('n', nextval('n')), 'k')});
		$cut_seen += $node->safe_psql('postgres',
			q{SELECT count(*) FROM outbox.events WHERE last_error LIKE 'not sent: the broker took longer%'});
	}
}
note("events seen parked as cut off (summed over polls): $cut_seen");
my $total = ROUNDS * (CHAIN + 10);
ok(defined wait_until(sub { $node->safe_psql('postgres',
	q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) == $total }, 300),
	"all $total events are published")
  or diag($node->safe_psql('postgres', q{SELECT status, attempts, last_error, count(*) FROM outbox.events GROUP BY 1, 2, 3}));

my (%seen, @breaks, $last);
for my $m ($nats->messages('CUT')) {
	my ($n) = $m->{data} =~ /"n": ?(\d+)/;
	next if $seen{$n}++;    # first deliveries only
	push @breaks, "$n after $last" if defined $last && $n < $last;
	$last = $n if !defined $last || $n > $last;
}
is(scalar(keys %seen), $total, 'each event arrived');
note(scalar(@breaks) . ' events stored after a later event of their key');
is(scalar(@breaks), 0, 'key "k" arrives in emit order')
  or diag('first breaks (event n stored after a later one): ' . join(', ', @breaks[0 .. ($#breaks < 9 ? $#breaks : 9)]));
$node->stop;
$nats->stop;
done_testing();
