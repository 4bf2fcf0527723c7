# A role that may only emit() sends a burst of messages an MQTT 3.1.1 broker
# closes its connection over (past mosquitto's max_packet_size), each on a
# key of its own, while other keys stream to the same sink ("bad", one
# connection) and to another ("good"). Every connection that carries a
# culprit is lost, so the other keys' events in those batches are lost with
# them twice and are sent alone too, in turns with the culprits. Each culprit
# lost alone is its own loss, not a broker that closes every connection, and
# the turns go round: every innocent event is published, none is charged an
# attempt, none of the culprits is published, and the other sink does not
# slow down; while only culprits are left, the publisher sleeps between
# their turns.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxMosquitto;
use OutboxNode qw(outbox_node wait_until);

my $culprits = 400;
my $secs = 8;
my $mq = OutboxMosquitto->start(max_packet_size => 4096, unlimited_queue => 1);
# pg_stat_statements counts the publisher's cycles (phase E).
my $node = outbox_node('culprit_burst', <<'EOF');
outbox.backoff_max = '1s'
shared_preload_libraries = 'outbox, pg_stat_statements'
pg_stat_statements.track = all
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox; CREATE EXTENSION pg_stat_statements');
$node->safe_psql('postgres', $mq->sink_sql('bad', protocol => '3.1.1', connections => 1));
$node->safe_psql('postgres', $mq->sink_sql('good', protocol => '3.1.1'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('b.*', 'bad'), outbox.add_route('g.*', 'good')});
$node->safe_psql('postgres', q{CREATE ROLE app LOGIN;
	GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO app});
$node->safe_psql('postgres', q{SELECT outbox.emit('g.t', '{"warm": 1}', 'w'), outbox.emit('b.t', '{"warm": 1}', 'w')});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '2' }),
	'both sinks deliver');

# Ten events to each sink every 100 ms for `secs` seconds, keys k1 .. k10;
# returns how many, once all are published (undef: not within `wait` s).
sub stream {
	my ($phase, $wait) = @_;
	my $start = time();
	my $round = 0;
	while (time() - $start < $secs) {
		$round++;
		$node->safe_psql('postgres', qq{SELECT count(outbox.emit('g.t',
		  jsonb_build_object('ph', '$phase', 'r', $round, 'i', i), 'k' || i)),
		  count(outbox.emit('b.t', jsonb_build_object('ph', '$phase', 'r', $round, 'i', i), 'k' || i))
		  FROM generate_series(1, 10) i});
		usleep(100_000);
	}
	my $n = 20 * $round;
	return wait_until(sub { $node->safe_psql('postgres', qq{SELECT count(*) FROM outbox.events
	  WHERE payload->>'ph' = '$phase' AND status = 'published'}) eq "$n" }, $wait) ? $n : undef;
}

sub slowest_ms {
	my ($phase, $topic) = @_;
	return $node->safe_psql('postgres', qq{SELECT round(1000 * extract(epoch FROM max(published_at - created_at)))
	  FROM outbox.events WHERE topic = '$topic' AND payload->>'ph' = '$phase'});
}

ok(defined stream('A', 60), 'phase A (no culprits): every event is published');
my $quiet = slowest_ms('A', 'g.t');

my $log_offset = -s $node->logfile;
my ($rc, $out, $err) = $node->psql('postgres', qq{SELECT count(outbox.emit('b.t',
  jsonb_build_object('culprit', repeat('x', 5000)), 'c' || j)) FROM generate_series(1, $culprits) j},
  extra_params => [ '-U', 'app' ]);
is($rc, 0, "the emit-only role sent $culprits culprits at once") or diag($err);
my $n = stream('B', 120);
ok(defined $n, 'phase B (a burst of culprits on sink bad): every innocent event of both sinks is published')
  or diag($node->safe_psql('postgres', q{SELECT string_agg(e || ' x' || n, E'\n') FROM (SELECT
	  left(coalesce(last_error, '-'), 120) e, count(*) n FROM outbox.events
	  WHERE payload->>'ph' = 'B' AND status <> 'published' GROUP BY 1) x}));
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
  WHERE payload->>'ph' = 'B' AND attempts > 0}), '0', 'no innocent event is charged an attempt');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
  WHERE payload ? 'culprit' AND status = 'published'}), '0', 'no culprit is published');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
  WHERE payload ? 'culprit' AND last_error LIKE '%alone%'}), '>', 0, 'the culprits were sent alone');
my $slow = slowest_ms('B', 'g.t');
my $bound = $quiet * 3 + 300 > 1500 ? $quiet * 3 + 300 : 1500;
cmp_ok($slow, '<=', $bound, "the culprits on sink bad do not delay sink good (slowest: $slow ms, "
  . "$quiet without culprits)");
note('sink bad, innocent events behind the burst: waited ' . $node->safe_psql('postgres', q{SELECT
  round(1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY published_at - created_at)))
  || ' ms at the median, ' || round(1000 * extract(epoch FROM max(published_at - created_at))) || ' ms at most'
  FROM outbox.events WHERE topic = 'b.t' AND payload->>'ph' = 'B'}));
my ($log_b) = slurp_file($node->logfile, $log_offset);
note('sink bad judged unavailable ' . scalar(() = $log_b =~ /sink "bad" is unavailable/g) . ' times');

# Phase C: a burst with innocent events among the culprits (in the same
# batches, so lost with them twice: suspects sent alone as they are), and
# nothing else for that sink: only the turns alone can get them through.
# One culprit lost alone after another, with nothing else answered, is not
# taken for a broker that closes every connection while events not tried
# alone are left: the turns reach the innocents within a round.
($rc, $out, $err) = $node->psql('postgres', qq{SELECT count(CASE WHEN j % 10 = 0
    THEN outbox.emit('b.t', jsonb_build_object('ph', 'C', 'j', j), 'q' || j)
    ELSE outbox.emit('b.t', jsonb_build_object('culprit', repeat('x', 5000)), 'cc' || j) END)
  FROM generate_series(1, 300) j},
  extra_params => [ '-U', 'app' ]);
is($rc, 0, 'the emit-only role sent 270 culprits with 30 innocent events among them') or diag($err);
$node->safe_psql('postgres', q{SELECT count(outbox.emit('b.t', jsonb_build_object('ph', 'C', 'after', j), 'q' || j))
  FROM generate_series(10, 300, 10) j});
my $t0 = time();
ok(defined wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
  WHERE payload->>'ph' = 'C' AND status = 'published'}) eq '60' }, 90),
  'phase C: the innocent events among the culprits, and their keys\' next ones, are published')
  or diag($node->safe_psql('postgres', q{SELECT string_agg(e || ' x' || n, E'\n') FROM (SELECT
	  left(coalesce(last_error, '-'), 120) e, count(*) n FROM outbox.events
	  WHERE payload->>'ph' = 'C' AND status <> 'published' GROUP BY 1) x}));
note(sprintf('phase C: innocents through in %.1f s', time() - $t0));
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
  WHERE payload->>'ph' = 'C' AND attempts > 0}), '0', 'phase C: no innocent event is charged an attempt');

# Phase D: two culprits heading the only two keys of a sink that has
# nothing else to send (a quiet sink of its own). Each is lost alone once,
# then the one lost again after the other was is taken for a broker that
# closes every connection (the sink down, nobody charged); who was tried is
# forgotten after outbox.backoff_max (1 s here), so each is tried once per
# second and both end dead, and the events behind them go.
$node->safe_psql('postgres', $mq->sink_sql('lone', protocol => '3.1.1', connections => 1));
$node->safe_psql('postgres', q{SELECT outbox.add_route('l.*', 'lone')});
$node->safe_psql('postgres', q{SELECT outbox.emit('l.t', jsonb_build_object('culprit', repeat('x', 5000)), 'a'),
  outbox.emit('l.t', jsonb_build_object('culprit', repeat('x', 5000)), 'b'),
  outbox.emit('l.t', '{"ph": "D", "n": 1}', 'a'), outbox.emit('l.t', '{"ph": "D", "n": 2}', 'b')});
$t0 = time();
ok(defined wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
  WHERE payload->>'ph' = 'D' AND status = 'published'}) eq '2' }, 90),
  'phase D: the events behind two culprits heading a quiet sink\'s only keys are published')
  or diag($node->safe_psql('postgres', q{SELECT string_agg(coalesce(payload->>'n', 'culprit') || ' ' || status
	  || ' a=' || attempts || ' ' || left(coalesce(last_error, '-'), 100), E'\n' ORDER BY id)
	  FROM outbox.events WHERE topic = 'l.t'}));
is($node->safe_psql('postgres', q{SELECT string_agg(status || ':' || attempts, ',' ORDER BY id)
  FROM outbox.events WHERE topic = 'l.t' AND payload ? 'culprit'}), 'dead:10,dead:10',
  'phase D: both culprits end dead after outbox.max_attempts');
note(sprintf('phase D: through in %.1f s', time() - $t0));

# Phase E: what the turns cost. Two hundred culprits on sink "bad", now
# quiet: they are sent alone in turns a few milliseconds apart, each turn
# due at a time of its own. The publisher sleeps until the next one is due,
# and each of its cycles (one ready claim each) writes what a turn decided:
# about as many cycles as outcome writes. A wait for a retry due within the
# millisecond, cut to 0, would run empty cycles until it was due (four
# cycles per outcome write).
$node->safe_psql('postgres', q{SELECT count(outbox.emit('b.t', jsonb_build_object('culprit', repeat('x', 5000)), 'e' || j))
  FROM generate_series(1, 200) j});
sleep 3;  # past the sends with others, into the turns alone
$node->safe_psql('postgres', 'SELECT pg_stat_statements_reset()');
sleep 10;
my ($cycles, $writes) = split /\|/, $node->safe_psql('postgres', q{
  SELECT coalesce(sum(calls) FILTER (WHERE query LIKE '%next_attempt_at IS NULL%FOR UPDATE SKIP LOCKED%'), 0)
    || '|' || coalesce(sum(calls) FILTER (WHERE query LIKE 'UPDATE outbox.events%'), 0)
  FROM pg_stat_statements});
note("phase E: $cycles cycles, $writes outcome writes in 10 s");
cmp_ok($writes, '>', 100, 'phase E: the culprits are sent alone in turns');
cmp_ok($cycles, '<=', 2 * $writes + 20, 'phase E: the publisher sleeps between the turns (no empty cycles)');

$node->stop;
$mq->stop;
done_testing();
