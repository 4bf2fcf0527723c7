# One Kafka topic the cluster lacks delays only its own events, not the
# sink's other topics. librdkafka holds a message for an unknown topic until
# message.timeout.ms; the publisher used to leave the whole group to late
# answers and then send nothing more to the sink until they came, so one
# such event every 2 s held every other topic of the sink (healthy-topic
# latency p50 6 s, p90 18 s). Now only the unanswered events wait, the
# sink's healthy topics go on, and a group holding a topic known to go
# unanswered waits for its other answers only, not for outbox.ack_wait.
#
# Healthy topics get about 100 events a second on 40 keys for 15 s, from
# one session (per key, emit order is id order only within a session): first
# alone (phase A), then with one event every 1.5 s for a topic whose Metadata
# the broker answers with UNKNOWN_TOPIC_OR_PART (phase B), then with one
# every 1.5 s for a partition without a leader (phase C), then, on a second
# sink with message.timeout.ms=0, with one every 1.5 s for the missing topic
# (phase D); and, in phase C', healthy traffic in 5 s bursts with 6 s of
# quiet between them while one event every 1.5 s goes to a one-partition
# topic without a leader: its messages time out with no other
# answer of the sink's in the ack wait before them, which made the sink
# down (healthy p99 5-9 s after each quiet spell, found by an outside
# review); now the brokers, asked why, say the partition has no leader, and
# only that topic waits. Proves: the healthy events' p99 latency (published_at -
# created_at) stays under half a second in phases B, C, C' and D, far below the
# stall this test is about (seconds: message.timeout.ms per attempt), or
# within five times phase A's plus 100 ms if this machine is so loaded that
# phase A alone is slower than that (for D, phase A's or that of the second
# sink's healthy topic alone just before it, whichever is slower); every
# healthy event is published, and per key they arrive in emit order.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);
use OutboxNode qw(outbox_node wait_until kafka_sink_sql app_session_args);
use OutboxKafka;

my $kafka = OutboxKafka->start(topics => ['good:4', 'leaderless:2', 'lone:1']);
my $node = outbox_node('bad_topic', "max_connections = 50\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('postgres', q{SELECT outbox.add_route('good.*', 'kafka', 'good')});
$node->safe_psql('postgres', q{SELECT outbox.add_route('missing.*', 'kafka', 'missing')});
$node->safe_psql('postgres', q{SELECT outbox.add_route('leaderless.*', 'kafka', 'leaderless')});
$node->safe_psql('postgres', q{SELECT outbox.add_route('lone.*', 'kafka', 'lone')});
# A second sink on the same cluster with message.timeout.ms=0 (librdkafka's
# "no limit"): a message for a topic the cluster lacks then waits for
# topic.metadata.propagation.max.ms (30 s) before it fails.
$node->safe_psql('postgres', kafka_sink_sql('unlimited', $kafka->bootstrap, 'message.timeout.ms' => '0'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('good0.*', 'unlimited', 'good')});
$node->safe_psql('postgres', q{SELECT outbox.add_route('missing0.*', 'unlimited', 'missing')});
$kafka->command_ok('topic_error missing UNKNOWN_TOPIC_OR_PART');

my $dir = PostgreSQL::Test::Utils::tempdir;
open my $fh, '>', "$dir/good.sql" or die $!;
print $fh "\\set k random(1, 40)\nSELECT outbox.emit('good.e', '{}', 'k' || :k);\n";
close $fh;
open $fh, '>', "$dir/good0.sql" or die $!;
print $fh "\\set k random(1, 40)\nSELECT outbox.emit('good0.e', '{}', 'k' || :k);\n";
close $fh;

# pgbench for $seconds at $rate transactions/s running $script.
sub load {
	my ($script, $rate, $seconds) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[ 'pgbench', '-n', '-h', $node->host, '-p', $node->port, '-c', '1',
		  '-R', $rate, '-T', $seconds, '-f', $script, 'postgres' ],
		'>', \$out, '2>', \$err);
}

# Healthy latency percentiles of the events emitted since $since_id.
sub p99_since {
	my ($from, $healthy) = @_;
	ok(defined wait_until(sub {
		$node->safe_psql('postgres', qq{SELECT count(*) FROM outbox.events
			WHERE topic = '$healthy' AND status <> 'published' AND created_at >= '$from'}) eq '0' }),
		"every healthy event since $from is published")
	  or diag("still pending:\n" . $node->safe_psql('postgres', qq{SELECT id, key, status, attempts,
			to_char(created_at, 'HH24:MI:SS.MS'), last_error FROM outbox.events
			WHERE topic = '$healthy' AND status <> 'published' AND created_at >= '$from'
			ORDER BY id LIMIT 10}));
	return $node->safe_psql('postgres', qq{SELECT round(1000 * percentile_cont(0.99) WITHIN GROUP
		(ORDER BY extract(epoch FROM published_at - created_at))::numeric, 1)
		FROM outbox.events WHERE topic = '$healthy' AND created_at >= '$from'});
}

sub phase {
	my ($name, $bad_topic, $healthy) = @_;
	$healthy //= 'good.e';
	my $from = $node->safe_psql('postgres', 'SELECT now()');
	my $good = load($healthy eq 'good.e' ? "$dir/good.sql" : "$dir/good0.sql", 100, 15);
	if ($bad_topic) {
		for my $i (1 .. 10) {
			usleep(1_500_000);
			$node->safe_psql('postgres', "SELECT outbox.emit('$bad_topic', '{}', 'b$i')");
		}
	}
	$good->finish;
	my $p99 = p99_since($from, $healthy);
	note "$name: healthy p99 $p99 ms";
	# The slowest events (created at, latency in ms), for a failure to explain itself.
	note 'slowest: ' . join(', ', split /\n/, $node->safe_psql('postgres', qq{SELECT
		to_char(created_at, 'HH24:MI:SS.MS') || ' ' || round(1000 * extract(epoch FROM published_at - created_at))
		FROM outbox.events WHERE topic = '$healthy' AND created_at >= '$from'
		ORDER BY published_at - created_at DESC LIMIT 12}));
	return $p99;
}

my $p99_alone = phase('A, healthy topics alone');
# A loaded machine slows every answer, and a batch waits for a slow one up
# to four times its topic's usual answer time before it leaves it late; in
# B the publisher also asks the brokers about the topic whose messages
# timed out, within its cycle (up to 500 ms by design, docs/delivery.md): a
# busy run saw 121.6 ms against phase A's 9.3. The bound is half a second,
# or grows with phase A's p99.
my $bound = $p99_alone * 5 + 100 > 500 ? $p99_alone * 5 + 100 : 500;
my $p99_missing = phase('B, with a topic the cluster lacks', 'missing.e');
cmp_ok($p99_missing, '<', $bound,
	"B: a topic the cluster lacks leaves the healthy topics' p99 under $bound ms");
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'missing.e'
	AND status = 'published'}), '0', 'B: none of the unknown topic\'s events was published');

# Phase B's events for the missing topic would go on being retried into the
# later phases, which are about other bad topics; librdkafka may answer such
# a retry only at its next metadata refresh, and a batch of nothing but
# those may hold a cycle for outbox.ack_wait (docs/delivery.md): their route
# goes, and they wait unrouted.
$node->safe_psql('postgres', q{SELECT outbox.remove_route('missing.*')});

# The cluster's metadata change itself (not the events after it) may hold the
# producer for a moment: let that pass before phase C.
$kafka->command_ok('leader leaderless 0 -1');
sleep 1;
my $p99_leaderless = phase('C, with a partition without a leader', 'leaderless.e');
cmp_ok($p99_leaderless, '<', $bound,
	"C: a partition without a leader leaves the healthy topics' p99 under $bound ms");

# C': the healthy topics in bursts, quiet between them, events for a
# one-partition topic without a leader all along. With the default backoff
# (the test's 1 s cap would hide how long a sink judged down waits).
$kafka->command_ok('leader lone 0 -1');
{
	$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.backoff_min = '100ms';
		ALTER SYSTEM SET outbox.backoff_max = '60s'; SELECT pg_reload_conf()});
	my $from = $node->safe_psql('postgres', 'SELECT now()');
	for my $burst (1 .. 3) {
		my $good = load("$dir/good.sql", 100, 5);
		for my $i (1 .. 7) {
			usleep(1_500_000);
			$node->safe_psql('postgres', "SELECT outbox.emit('lone.e', '{}', 'b$burst$i')");
		}
		$good->finish;
		sleep 1;
	}
	my $p99 = p99_since($from, 'good.e');
	note "C', bursts after quiet spells beside events for a topic without a leader: healthy p99 $p99 ms";
	note 'slowest: ' . join(', ', split /\n/, $node->safe_psql('postgres', qq{SELECT
		to_char(created_at, 'HH24:MI:SS.MS') || ' ' || round(1000 * extract(epoch FROM published_at - created_at))
		FROM outbox.events WHERE topic = 'good.e' AND created_at >= '$from'
		ORDER BY published_at - created_at DESC LIMIT 12}));
	cmp_ok($p99, '<', $bound,
		"C': after quiet spells, events for a topic without a leader leave the healthy topics' p99 under $bound ms");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'lone.e'
		AND attempts > 0}), '0', "C': the leaderless topic's events spend no attempts");
	$node->safe_psql('postgres', q{ALTER SYSTEM RESET outbox.backoff_min;
		ALTER SYSTEM RESET outbox.backoff_max; SELECT pg_reload_conf()});
}

# The machine's load moves in the minute since phase A: the second sink's
# healthy topic alone, right before phase D, bounds it too (the larger of
# the two baselines).
my $p99_alone0 = phase("A', the second sink's healthy topic alone", undef, 'good0.e');
my $baseline = $p99_alone0 > $p99_alone ? $p99_alone0 : $p99_alone;
# What D asks is whether the lacking topic's events, which librdkafka never
# times out with message.timeout.ms=0, stall the sink's other topics: such
# a stall lasts the publisher's own limit for an unanswered batch (seconds,
# up to 30 s). Its healthy events also share their cycles with those late
# batches, so on a loaded machine their p99 runs to a few times phase A's
# (a CI run at load 10: 363 ms against 87; a run beside another full run:
# 922 against 134): the bound is five times the baseline and at least a
# second and a half, far below any stall.
my $bound0 = $baseline * 5 + 100 > 1500 ? $baseline * 5 + 100 : 1500;
my $p99_unlimited = phase('D, with a topic the cluster lacks, on a sink with message.timeout.ms=0',
	'missing0.e', 'good0.e');
cmp_ok($p99_unlimited, '<', $bound0,
	"D: with message.timeout.ms=0, a topic the cluster lacks leaves the sink's other topics' p99 under $bound0 ms");

# Per key, the healthy events arrived in emit order (first arrivals).
my ($count, $arrived, $disorder) =
  $kafka->arrivals_in_emit_order($node, q{topic IN ('good.e', 'good0.e')}, topics => ['good']);
is($arrived, $count, "all $count healthy events arrived");
is($disorder, 0, 'per key, in emit order');

$node->stop;
$kafka->stop;
done_testing();
