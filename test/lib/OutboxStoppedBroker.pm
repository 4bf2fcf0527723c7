# The scenario of the TAP files proving that a broker which keeps its
# connections but stops answering (SIGSTOP of its process) never delays
# another sink (137 NATS, 155 MQTT), written once: two sinks of one kind, each
# on a server of its own, "a" staying up and "b" stopped for longer than its
# ack_timeout_ms (8 s, far above the lags measured for "a"), with events for
# both emitted all along.
#
#   OutboxStoppedBroker::run(
#     name => 'mqtt_stopped', up => $a, stopped => $b,     # each: sink_sql, pause, resume
#     arrived => sub { ... },   # b's events as received, in order: list of {i => N}
#   );
#
# Proves, with commit-to-published lags measured by PostgreSQL:
# - while "b" is stopped, every event of "a" is published promptly (worst
#   lag under 2.5 s, median under 1 s) and "b"'s wait, shown down;
# - "b"'s events spend no attempts;
# - once "b" runs again every one of its events arrives, per key in emit
#   order, none lost; a repeat only of an event that was in flight when it
#   stopped (at least once), so at most one a key.
package OutboxStoppedBroker;

use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxNode qw(outbox_node wait_until);

use constant { ROUNDS => 70, KEYS => 3, ACK_TIMEOUT_MS => 8000 };

sub _count {
	my ($node, $where) = @_;
	return $node->safe_psql('postgres', "SELECT count(*) FROM outbox.events WHERE $where");
}

sub run {
	my (%o) = @_;
	my ($up, $stopped) = @o{qw(up stopped)};
	my $node = outbox_node($o{name});
	$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
	$node->safe_psql('postgres', $up->sink_sql('a'));
	$node->safe_psql('postgres', $stopped->sink_sql('b', ack_timeout_ms => ACK_TIMEOUT_MS));
	$node->safe_psql('postgres', q{
		SELECT outbox.add_route('fa.*', 'a');
		SELECT outbox.add_route('fb.*', 'b');});
	$node->safe_psql('postgres', q{SELECT outbox.emit('fa.warm', '{}'), outbox.emit('fb.warm', '{}')});
	ok(defined wait_until(sub { _count($node, q{topic LIKE '%.warm' AND status = 'published'}) eq '2' }),
		'both sinks deliver before the stop');
	my $log_start = -s $node->logfile;

	$stopped->pause;
	my $paused_at = time();
	# Each round one event per sink, in its own transaction, as independent
	# applications would emit them; longer than b's ack_timeout_ms, so that
	# b is timed out and tried again while it is stopped.
	for my $i (1 .. ROUNDS) {
		$node->safe_psql('postgres', qq{
			SELECT outbox.emit('fa.order', '{"i": $i}', 'k' || ($i % ${\ KEYS}));
			SELECT outbox.emit('fb.order', '{"i": $i}', 'k' || ($i % ${\ KEYS}));});
		usleep(150_000);
	}
	ok(defined wait_until(sub { _count($node, q{topic = 'fa.order' AND status = 'published'}) eq ROUNDS }),
		'the sink whose broker runs delivers everything while the other one is stopped');
	my ($p50, $worst) = split /\|/, $node->safe_psql('postgres', q{
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)),
		       max(extract(epoch FROM published_at - created_at))
		  FROM outbox.events WHERE topic = 'fa.order'});
	note(sprintf('sink a beside a stopped broker, commit to published: p50 %.3f s, worst %.3f s'
		  . ' (b stopped for %.1f s so far, its ack_timeout_ms %d)',
		$p50, $worst, time() - $paused_at, ACK_TIMEOUT_MS));
	cmp_ok($worst, '<', 2.5, 'no event of the running broker waits for the stopped one (worst lag)');
	cmp_ok($p50, '<', 1.0, 'and they are published promptly (median lag)');
	is(_count($node, q{topic = 'fb.order' AND status = 'published'}), '0',
		'the stopped broker\'s events wait');
	ok(defined wait_until(sub {
		$node->safe_psql('postgres', q{SELECT string_agg(sinks, '; ') FROM outbox.workers}) =~ /\bb=down\b/ }, 30),
		'outbox.workers shows the stopped broker\'s sink down');
	like($node->safe_psql('postgres', q{SELECT string_agg(sinks, '; ') FROM outbox.workers}),
		qr/\ba=connected\b/, 'and the other one connected');
	like(slurp_file($node->logfile, $log_start), qr/sink "b" has not answered within outbox\.ack_wait/,
		'the log says the stopped sink is slow and the others go ahead');

	$stopped->resume;
	ok(defined wait_until(sub { _count($node, q{topic = 'fb.order' AND status = 'published'}) eq ROUNDS }),
		'once it runs again, every event of the stopped broker is published')
	  or diag($node->safe_psql('postgres', q{SELECT status, attempts, last_error, count(*)
		FROM outbox.events WHERE topic = 'fb.order' GROUP BY 1, 2, 3}));
	is(_count($node, q{topic = 'fb.order' AND attempts <> 0}), '0',
		'the stopped broker\'s events spent no attempts');

	my @got;
	wait_until(sub { @got = $o{arrived}->(); my %seen = map { $_->{i} => 1 } @got; keys %seen >= ROUNDS }, 30);
	my (%count, %last, @disorder);
	for my $m (@got) {
		my $k = $m->{i} % KEYS;
		push @disorder, "key k$k: $m->{i} after $last{$k}" if defined $last{$k} && $m->{i} < $last{$k};
		$last{$k} = $m->{i};
		$count{ $m->{i} }++;
	}
	is(scalar(keys %count), ROUNDS, 'each of them arrived: none lost');
	is_deeply(\@disorder, [], 'per key in emit order');
	my $repeats = @got - keys %count;
	note("$repeats repeated deliveries (events in flight when the broker stopped)");
	cmp_ok($repeats, '<=', KEYS, 'repeated only what was in flight when it stopped, one a key at most');
	$node->stop;
	return;
}

1;
