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
use JSON::PP ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use OutboxMosquitto;
use OutboxNode qw(outbox_node wait_until wait_while_progressing start_timed);

my $secs = 8;
my $mq = OutboxMosquitto->start(max_packet_size => 4096, unlimited_queue => 1);
$mq->subscribe('#');
my $node = outbox_node('sent_alone', <<'EOF2');
outbox.max_attempts = 2
outbox.backoff_max = '1s'
EOF2
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
my $t0 = time();
my $innocents = start_timed($node, "CALL innocents($secs)");
my $culprits = start_timed($node, "CALL culprits($secs)");
my (undef, undef, $err_i) = $innocents->();
my (undef, undef, $err_c) = $culprits->();
unlike("$err_i$err_c", qr/ERROR/, 'both sessions emitted throughout') or diag("$err_i$err_c");
ok(defined wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	WHERE status = 'pending'}) eq '0' }, 240), 'nothing is left pending')
  or diag($node->safe_psql('postgres', q{SELECT key || ' ' || status || ' a=' || attempts || ' '
	  || left(coalesce(last_error, '-'), 120) FROM outbox.events WHERE status = 'pending' ORDER BY id LIMIT 20}));
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
my (@wrong, %by_key, $innocent, $culprit);
for (split /\n/, $node->safe_psql('postgres', q{SELECT id, key, status, attempts, (payload ? 'culprit')::int
	FROM outbox.events WHERE key <> 'w' ORDER BY id})) {
	my ($id, $key, $status, $attempts, $is_culprit) = split /\|/;
	if ($is_culprit) {
		$culprit++;
		push @wrong, "culprit $id is $status" if $status ne 'dead';
		push @wrong, "culprit $id reached the subscriber" if defined $first{$id};
		next;
	}
	$innocent++;
	push @wrong, "$id ($key) is $status after $attempts attempt(s)" if $status ne 'published' || $attempts > 0;
	push @wrong, "$id ($key) is published but never reached the subscriber" unless defined $first{$id};
	push @{ $by_key{$key} }, $id if defined $first{$id};
}
for my $key (sort keys %by_key) {
	my @ids = @{ $by_key{$key} };  # emit order (UUIDv7)
	for my $i (1 .. $#ids) {
		push @wrong, "key $key: $ids[$i] first arrived before $ids[$i - 1]"
		  if $first{ $ids[$i] } < $first{ $ids[ $i - 1 ] };
	}
}
cmp_ok($culprit, '>', 100, "the culprits' session sent $culprit culprits");
cmp_ok($innocent, '>', 1000, "the other session sent $innocent events");
is(scalar(@wrong), 0, 'no innocent event charged, dead or missing; per key in emit order; '
	. 'every culprit dead and undelivered') or diag(join("\n", @wrong[0 .. ($#wrong < 30 ? $#wrong : 30)]));
note('duplicates (re-sent after a connection lost before the acknowledgement): '
	. scalar(grep { $times{$_} > 1 } keys %times));

$node->stop;
$mq->stop;
done_testing();
