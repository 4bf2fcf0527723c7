# The scenario of the TAP files proving that events an MQTT 3.1.1 broker
# closes its connection over cost only their own attempts while other
# events stream beside them (158, and 160 with broker restarts), written
# once: one session emits on ten keys every 10 ms, another a message past
# mosquitto's max_packet_size (4096) on a new key every 10 ms, both to sink
# "r" (one connection, outbox.max_attempts = 2, outbox.backoff_max = 1 s).
#
#   my ($node, $mq) = OutboxCulpritStream::start('name');
#   OutboxCulpritStream::run($node, $mq, $secs, sub { ... });  # meanwhile, until it returns
#
# run proves, at the subscriber: nothing left pending; no innocent event
# charged, dead or missing; per key, first deliveries in emit order; every
# culprit dead and never delivered. Returns how many event ids arrived more
# than once (re-sent after a connection lost before the acknowledgement).
package OutboxCulpritStream;

use strict;
use warnings;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time);
use OutboxMosquitto;
use OutboxNode qw(outbox_node wait_until wait_while_progressing start_timed);

sub start {
	my ($name) = @_;
	my $mq = OutboxMosquitto->start(max_packet_size => 4096, unlimited_queue => 1);
	$mq->subscribe('#');
	my $node = outbox_node($name, <<'EOF');
outbox.max_attempts = 2
outbox.backoff_max = '1s'
EOF
	ok($mq->ready_sink($node, 'r', protocol => '3.1.1', connections => 1), 'the sink delivers');
	$node->safe_psql('postgres', q{
CREATE PROCEDURE innocents(secs float8) LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp(); r int := 0;
BEGIN
  WHILE clock_timestamp() < t0 + make_interval(secs => secs) LOOP
    r := r + 1;
    PERFORM outbox.emit('r.t', jsonb_build_object('s', r, 'i', i), 'k' || i)
      FROM generate_series(1, 10) i;
    COMMIT;
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$;
CREATE PROCEDURE culprits(secs float8) LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp(); r int := 0;
BEGIN
  WHILE clock_timestamp() < t0 + make_interval(secs => secs) LOOP
    r := r + 1;
    PERFORM outbox.emit('r.t', jsonb_build_object('culprit', repeat('x', 5000)), 'c' || r);
    COMMIT;
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$;});
	return ($node, $mq);
}

# What a stall looks like from outside: each pending event's next attempt
# (from now) and error, the publisher's state and wait, and its last words.
sub diag_stall {
	my ($node) = @_;
	diag($node->safe_psql('postgres', q{SELECT key || ' ' || status || ' a=' || attempts || ' next='
	    || coalesce(round(extract(epoch FROM next_attempt_at - now()), 1)::text, '-') || 's '
	    || left(coalesce(last_error, '-'), 120) FROM outbox.events WHERE status = 'pending'
	    ORDER BY id LIMIT 20}));
	diag($node->safe_psql('postgres', q{SELECT row_to_json(w)::text FROM outbox.workers w}));
	diag($node->safe_psql('postgres', q{SELECT backend_type || ' ' || coalesce(wait_event_type, '-')
	    || '/' || coalesce(wait_event, '-') || ' ' || coalesce(state, '-') FROM pg_stat_activity
	    WHERE backend_type LIKE 'outbox%'}));
	my @log = grep { /outbox/ } split /\n/, PostgreSQL::Test::Utils::slurp_file($node->logfile);
	diag(join("\n", @log[ ($#log > 40 ? $#log - 40 : 0) .. $#log ]));
	return;
}

sub run {
	my ($node, $mq, $secs, $meanwhile) = @_;
	my $t0 = time();
	my $innocents = start_timed($node, "CALL innocents($secs)");
	my $culprits = start_timed($node, "CALL culprits($secs)");
	$meanwhile->() if $meanwhile;
	my (undef, undef, $err_i) = $innocents->();
	my (undef, undef, $err_c) = $culprits->();
	unlike("$err_i$err_c", qr/ERROR/, 'both sessions emitted throughout') or diag("$err_i$err_c");
	ok(defined wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	  WHERE status = 'pending'}) eq '0' }, 240), 'nothing is left pending')
	  or diag_stall($node);
	note(sprintf('everything settled %.1f s after the sessions began', time() - $t0));
	# What the subscriber got: the first position of each event id (the raw
	# envelope carries it), and how often it came.
	wait_while_progressing(sub { -s $mq->{out} // 0 }, sub { 0 }, 3);
	my $json = JSON::PP->new->utf8(1);
	my (%first, %times);
	my $pos = 0;
	for my $m ($mq->messages) {
		my $envelope = eval { $json->decode($m->{body}) };
		next unless ref $envelope eq 'HASH' && defined $envelope->{id};
		$times{ $envelope->{id} }++;
		$first{ $envelope->{id} } //= $pos++;
	}
	my (@wrong, %by_key);
	my ($innocent, $culprit) = (0, 0);
	for (split /\n/, $node->safe_psql('postgres', q{SELECT id, key, status, attempts,
	  (payload ? 'culprit')::int, coalesce(last_error, '-') FROM outbox.events WHERE key <> 'w'
	  ORDER BY id})) {
		my ($id, $key, $status, $attempts, $is_culprit, $error) = split /\|/;
		if ($is_culprit) {
			$culprit++;
			push @wrong, "culprit $id is $status" if $status ne 'dead';
			push @wrong, "culprit $id reached the subscriber" if defined $first{$id};
			next;
		}
		$innocent++;
		push @wrong, "$id ($key) is $status after $attempts attempt(s): $error"
		  if $status ne 'published' || $attempts > 0;
		push @wrong, "$id ($key) is published but never reached the subscriber"
		  unless defined $first{$id};
		push @{ $by_key{$key} }, $id if defined $first{$id};
	}
	for my $key (sort keys %by_key) {
		my @ids = @{ $by_key{$key} };    # emit order (UUIDv7)
		for my $i (1 .. $#ids) {
			push @wrong, "key $key: $ids[$i] first arrived before $ids[$i - 1]"
			  if $first{ $ids[$i] } < $first{ $ids[ $i - 1 ] };
		}
	}
	cmp_ok($culprit, '>', 100, "the culprits' session sent $culprit culprits");
	cmp_ok($innocent, '>', 1000, "the other session sent $innocent events");
	is(scalar(@wrong), 0, 'no innocent event charged, dead or missing; per key in emit order; '
		. 'every culprit dead and undelivered')
	  or diag(join("\n", @wrong[0 .. ($#wrong < 30 ? $#wrong : 30)]));
	return scalar(grep { $times{$_} > 1 } keys %times);
}

1;
