# The scenario of the TAP files proving that a sink which cuts its call short
# for want of time keeps per-key order (139 NATS, 159 MQTT), written once.
#
# A pipelining sink sends a key's messages one after another, each waiting
# for the broker's acknowledgement of the one before. A chain longer than
# the sink may spend on one call (connect_timeout_ms + ack_timeout_ms, set to
# 100 ms each here) is cut short: the rest comes back not sent, due at once,
# without an attempt, although the key's earlier events were delivered. No
# fault at all: the broker runs throughout. Each round emits a chain of CHAIN
# events of key "k" in one transaction and then, while the publisher works on
# it, a few more of the same key, claimed as new events.
#
#   OutboxCutOff::run(
#     name => 'nats_cut_off', sink_sql => $sql,   # a sink named "cut"
#     arrivals => sub { ... },   # the payloads' "n" as the broker got them
#   );
#
# Proves: every event is published and arrives, and key "k" arrives in emit
# order (repeats, at least once, aside). The events not sent hold their key
# back themselves: nothing of the key failed, yet its later events must not
# reach the broker first (they did, when the not-sent events were parked
# without blocking their key).
package OutboxCutOff;

use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxNode qw(outbox_node wait_until wait_while_progressing);

use constant { CHAIN => 3000, ROUNDS => 4, LATER => 10 };

sub run {
	my (%o) = @_;
	my $node = outbox_node($o{name}, "outbox.batch_size = 5000\n");
	$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
	$node->safe_psql('postgres', $o{sink_sql});
	$node->safe_psql('postgres', q{SELECT outbox.add_route('cut.*', 'cut')});
	$node->safe_psql('postgres', q{CREATE SEQUENCE n});

	my $cut_seen = 0;
	for my $round (1 .. ROUNDS) {
		$node->safe_psql('postgres', qq{SELECT outbox.emit('cut.e', jsonb_build_object('n', nextval('n')), 'k')
			FROM generate_series(1, ${\ CHAIN})});
		for (1 .. LATER) {
			usleep(50_000);
			$node->safe_psql('postgres',
				q{SELECT outbox.emit('cut.e', jsonb_build_object('n', nextval('n')), 'k')});
			$cut_seen += $node->safe_psql('postgres',
				q{SELECT count(*) FROM outbox.events WHERE last_error LIKE 'not sent: the broker took longer%'});
		}
	}
	note("events seen parked as cut off (summed over polls): $cut_seen");
	my $total = ROUNDS * (CHAIN + LATER);
	my $emitted_at = time;
	# A loaded machine stretches the drain; it must keep moving (the events
	# once stopped for minutes behind a not-sent event the order state still
	# held after it had been published).
	my $all = wait_while_progressing(
		sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) },
		sub { $_[0] == $total }, 60);
	ok(defined $all, "all $total events are published, the count never still for a minute");
	if (defined $all) {
		note(sprintf('the last ones %.1f s after the last emit', time - $emitted_at));
	} else {
		diag($node->safe_psql('postgres',
			q{SELECT status, attempts, last_error, count(*) FROM outbox.events GROUP BY 1, 2, 3}) . "\n"
			. $node->safe_psql('postgres', q{SELECT now(), id, payload->>'n', next_attempt_at, last_error
				FROM outbox.events WHERE status = 'pending' ORDER BY id LIMIT 5}));
	}

	my @arrived;
	wait_until(sub { @arrived = $o{arrivals}->(); scalar(@arrived) >= $total }, 120);
	my (%seen, @breaks, $last);
	for my $n (@arrived) {
		next if $seen{$n}++;    # first deliveries only
		push @breaks, "$n after $last" if defined $last && $n < $last;
		$last = $n if !defined $last || $n > $last;
	}
	is(scalar(keys %seen), $total, 'each event arrived');
	note(scalar(@breaks) . ' events arrived after a later event of their key');
	is(scalar(@breaks), 0, 'key "k" arrives in emit order')
	  or diag('first breaks (event n arrived after a later one): '
		  . join(', ', @breaks[0 .. ($#breaks < 9 ? $#breaks : 9)]));
	$node->stop;
	return;
}

1;
