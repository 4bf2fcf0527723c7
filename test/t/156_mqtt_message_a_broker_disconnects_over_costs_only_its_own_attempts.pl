# MQTT 3.1.1 cannot learn the broker's packet limit, so one event past it
# makes mosquitto close the connection, and every message in flight on the
# sink's connections is lost with it. Under a steady stream on other keys,
# that event (retried with its backoff) keeps taking its neighbours down
# with it; they must not pay for it: an event lost with a connection counts
# no attempt, and only one lost alone (sent in a batch of its own once it
# was lost with others twice) does. So no other event is charged an
# attempt, none ends dead, all are published, each key in order; the
# culprit alone ends dead after outbox.max_attempts, and its key's next
# event goes on then.
# Then a sink with one connection, where a culprit is the first message of
# every batch it is in (nothing goes through: were that the sink down, it
# would charge nobody and meet the culprits again on every try, for good),
# and a burst of culprits from a role that may only emit: the culprits end
# dead, the other keys' events are all published, promptly, none charged.
# A quiet sink with one connection: the culprit and its key's next event,
# nothing else, so nothing but the culprit alone tells the broker's fault
# from the message's (were that the sink down, it would be for good).
# Last, the broker 20 ms away (a relay on loopback) and a culprit a second:
# finding the culprits holds another sink's events no longer than a slow
# sink may (a cycle waits for the far sink's answers, a reconnection's
# included, at most outbox.ack_wait, and an event can meet two such
# cycles), never by seconds (retries alone that the cycle waited for did).
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

my $mq = OutboxMosquitto->start(max_packet_size => 4096, unlimited_queue => 1);
$mq->subscribe('#');
my $node = outbox_node('mqtt_disconnect_culprit',
	"outbox.max_attempts = 4\noutbox.backoff_max = '1s'\n");
ok($mq->ready_sink($node, 'dc', protocol => '3.1.1', connections => 4), 'the sink delivers');

$node->safe_psql('postgres', q{
	SELECT outbox.emit('dc.t', jsonb_build_object('culprit', repeat('x', 8000)), 'kc');
	SELECT outbox.emit('dc.t', '{"after": "culprit"}', 'kc');});
# A steady stream of `keys` events per round (payload {field: round, i:
# key number}) to `topic`, every 150 ms, for at least `min` rounds and until
# no event with the `culprit` field is left undead, at most `max` rounds.
# Returns the number of rounds.
sub stream_until_culprits_dead {
	my (%o) = @_;
	my $rounds = 0;
	for my $round (1 .. $o{max}) {
		$node->safe_psql('postgres', qq{SELECT outbox.emit('$o{topic}',
		  jsonb_build_object('$o{field}', $round, 'i', i), 'k' || i)
		  FROM generate_series(1, $o{keys}) i});
		$rounds++;
		usleep(150_000);
		last if $round >= $o{min} && $node->safe_psql('postgres', qq{SELECT count(*)
		  FROM outbox.events WHERE payload ? '$o{culprit}' AND status <> 'dead'}) eq '0';
	}
	return $rounds;
}

# A steady stream on 30 other keys while the culprit is retried.
my $rounds = stream_until_culprits_dead(topic => 'dc.t', field => 'r', keys => 30,
	min => 12, max => 40, culprit => 'culprit');
my $others = 30 * $rounds;

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT status || ':' || attempts FROM outbox.events
	  WHERE payload ? 'culprit'}) eq 'dead:4' }, 60),
	'the event the broker closes the connection over ends dead after max_attempts')
  or diag($node->safe_psql('postgres',
	q{SELECT status, attempts, last_error FROM outbox.events WHERE payload ? 'culprit'}));
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	  WHERE payload ? 'r' AND status = 'published'}) eq "$others" }, 60),
	"all $others events of the other keys are published")
  or diag($node->safe_psql('postgres', q{SELECT status, count(*), max(attempts),
	  min(last_error) FROM outbox.events WHERE payload ? 'r' GROUP BY 1}));
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	WHERE NOT payload ? 'culprit' AND (attempts > 0 OR status = 'dead')}), '0',
	'no other event was charged an attempt, and none is dead');
my $reconnects = () = slurp_file($node->logfile) =~ /reconnected to /g;
cmp_ok($reconnects, '>=', 3, 'the culprit took the connections down on each of its attempts');
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT status FROM outbox.events WHERE payload ? 'after'})
	  eq 'published' }), 'the culprit\'s key goes on once it is dead');

# Each key's events reached the subscriber in order.
my %last;
my $out_of_order = 0;
for my $m ($mq->messages) {
	next unless $m->{body} =~ /"payload":\{"i":\s*(\d+),\s*"r":\s*(\d+)\}/;
	# At least once: a message lost with its acknowledgement comes again,
	# before anything later of its key.
	$out_of_order++ if defined $last{$1} && $2 < $last{$1};
	$last{$1} = $2;
}
is($out_of_order, 0, 'each key\'s events arrived in order');
is(scalar(keys %last), 30, 'every key\'s events arrived');

$node->safe_psql('postgres', $mq->sink_sql('one', protocol => '3.1.1', connections => 1));
$node->safe_psql('postgres', q{SELECT outbox.add_route('d1.*', 'one')});
$node->safe_psql('postgres', q{CREATE ROLE app LOGIN;
	GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO app});
my ($rc, $stdout, $stderr) = $node->psql('postgres', q{SELECT count(outbox.emit('d1.t',
	jsonb_build_object('burst', repeat('x', 8000)), 'c' || j)) FROM generate_series(1, 12) j},
	extra_params => [ '-U', 'app' ]);
is($rc, 0, 'a role that may only emit sends 12 culprits at once') or diag($stderr);
my $burst_rounds = stream_until_culprits_dead(topic => 'd1.t', field => 'b', keys => 20,
	min => 10, max => 30, culprit => 'burst');
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	  WHERE payload ? 'burst' AND status = 'dead' AND attempts = 4}) eq '12' }, 60),
	'with one connection, every culprit ends dead after max_attempts')
  or diag($node->safe_psql('postgres', q{SELECT status, attempts, count(*) FROM outbox.events
	  WHERE payload ? 'burst' GROUP BY 1, 2}));
my $burst_others = 20 * $burst_rounds;
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	  WHERE payload ? 'b' AND status = 'published'}) eq "$burst_others" }, 60),
	"and all $burst_others events of the other keys are published")
  or diag($node->safe_psql('postgres', q{SELECT status, count(*), max(attempts)
	  FROM outbox.events WHERE payload ? 'b' GROUP BY 1}));
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	WHERE payload ? 'b' AND attempts > 0}), '0', 'none of them charged an attempt');
# Promptly: a batch with culprits costs its keys a few batches alone, not
# a sink down for its backoff (seconds, growing).
cmp_ok($node->safe_psql('postgres', q{SELECT round(1000 * extract(epoch FROM
	percentile_cont(0.5) WITHIN GROUP (ORDER BY published_at - created_at)))
	FROM outbox.events WHERE payload ? 'b'}), '<', 1000,
	'their median time to publish stays under a second');

# The quiet sink.
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', $mq->sink_sql('quiet', protocol => '3.1.1', connections => 1));
$node->safe_psql('postgres', q{SELECT outbox.add_route('dq.*', 'quiet')});
$node->safe_psql('postgres', q{
	SELECT outbox.emit('dq.t', jsonb_build_object('quiet_culprit', repeat('x', 8000)), 'kq');
	SELECT outbox.emit('dq.t', '{"quiet": "after"}', 'kq');});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT string_agg(status || ':' || attempts, ',' ORDER BY id)
	  FROM outbox.events WHERE topic = 'dq.t'}) eq 'dead:4,published:0' }, 60),
	'on a quiet sink the culprit ends dead after max_attempts, and its key goes on')
  or diag($node->safe_psql('postgres', q{SELECT status, attempts, last_error FROM outbox.events
	  WHERE topic = 'dq.t' ORDER BY id}));
unlike(slurp_file($node->logfile, $log_offset), qr/sink "quiet" is unavailable/,
	'and the sink is never judged down for it');

# The broker 20 ms away: sink "far" reaches it through a relay that delays
# every chunk, sink "near" directly. Ten events a round on each, a round
# every 100 ms; in phase B, a culprit on "far" every tenth round.
my $relay_port = PostgreSQL::Test::Cluster::get_free_port();
my $ready = PostgreSQL::Test::Utils::tempdir() . '/relay.ready';
my $relay = fork() // die "fork: $!";
if ($relay == 0) {
	exec('/usr/bin/python3', "$FindBin::RealBin/../lib/delay_proxy.py", $relay_port, $mq->port, 20, $ready)
	  or die "exec: $!";
}
END {
	if ($relay) { local $?; kill 'KILL', $relay; waitpid($relay, 0); }
}
ok(defined wait_until(sub { -e $ready }), 'the relay listens');
$node->safe_psql('postgres', $mq->sink_sql('far', protocol => '3.1.1', port => $relay_port));
$node->safe_psql('postgres', $mq->sink_sql('near', protocol => '3.1.1'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('fa.*', 'far')});
$node->safe_psql('postgres', q{SELECT outbox.add_route('nr.*', 'near')});

# One phase of `secs` seconds; returns the slowest time to publish (ms) of
# "near"'s events once every innocent event of the phase is published.
sub far_and_near {
	my ($phase, $culprits, $secs) = @_;
	my $start = time();
	my $round = 0;
	while (time() - $start < $secs) {
		$round++;
		my $culprit = $culprits && $round % 10 == 0
		  ? qq{, outbox.emit('fa.t', jsonb_build_object('far_culprit', repeat('x', 8000)), 'c$phase$round')}
		  : '';
		$node->safe_psql('postgres', qq{SELECT count(outbox.emit('fa.t',
		    jsonb_build_object('ph', '$phase', 'r', $round, 'i', i), 'k' || i)),
		  count(outbox.emit('nr.t', jsonb_build_object('ph', '$phase', 'r', $round, 'i', i), 'k' || i))
		  $culprit FROM generate_series(1, 10) i});
		usleep(100_000);
	}
	my $n = 20 * $round;
	ok(defined wait_until(sub { $node->safe_psql('postgres', qq{SELECT count(*) FROM outbox.events
	  WHERE payload->>'ph' = '$phase' AND status = 'published'}) eq "$n" }, 90),
		"phase $phase: all $n events of both sinks are published")
	  or diag($node->safe_psql('postgres', qq{SELECT topic, status, count(*), max(attempts)
	    FROM outbox.events WHERE payload->>'ph' = '$phase' GROUP BY 1, 2}));
	# The near events' median, 90th and 99th percentile and slowest time to
	# publish (ms), for the log.
	my @pct = split / /, $node->safe_psql('postgres', qq{SELECT array_to_string(ARRAY(
	  SELECT round(1000 * extract(epoch FROM x)) FROM unnest((SELECT percentile_cont(
	    ARRAY[0.5, 0.9, 0.99, 1]) WITHIN GROUP (ORDER BY published_at - created_at)
	    FROM outbox.events WHERE topic = 'nr.t' AND payload->>'ph' = '$phase')) x), ' ')});
	note("phase $phase: near events' time to publish: median $pct[0] ms, 90th percentile "
		  . "$pct[1] ms, 99th $pct[2] ms, slowest $pct[3] ms");
	return $pct[3];
}
my $quiet = far_and_near('A', 0, 6);
my $with_culprits = far_and_near('B', 1, 8);
# What a slow sink may cost another (two cycles held for outbox.ack_wait),
# with room for a loaded machine; retries alone that the cycle waited for
# cost seconds.
my $ack_wait = $node->safe_psql('postgres',
	q{SELECT setting FROM pg_catalog.pg_settings WHERE name = 'outbox.ack_wait'});
my $bound = 2 * $ack_wait + 3 * $quiet + 600;
cmp_ok($with_culprits, '<=', $bound,
	"culprits on the far sink hold the near sink's events no longer than a slow sink may "
	  . "(slowest $with_culprits ms, $quiet without culprits)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	WHERE payload ? 'ph' AND (attempts > 0 OR status <> 'published')}), '0',
	'no innocent event of either sink was charged an attempt');
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	  WHERE payload ? 'far_culprit' AND NOT (status = 'dead' AND attempts = 4)}) eq '0' }, 90),
	'the far culprits end dead after max_attempts')
  or diag($node->safe_psql('postgres', q{SELECT status, attempts, count(*) FROM outbox.events
	  WHERE payload ? 'far_culprit' GROUP BY 1, 2}));
$node->stop;
done_testing();
