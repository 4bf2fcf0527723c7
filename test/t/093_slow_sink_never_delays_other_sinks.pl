# One sink's slowness never delays another sink's outcomes, and a topic the
# Kafka cluster lacks is the events' fault, not the sink's. librdkafka holds a
# message for an unknown topic until message.timeout.ms: before
# outbox.ack_wait, every cycle that carried one waited that long before
# recording anything, so a Redis route's events waited with it; and when such
# events were a cycle's only Kafka events the sink was judged down and they
# never used their attempts.
#
# Here a Kafka route goes to a topic the cluster refuses (UNKNOWN_TOPIC_OR_PART
# in its metadata), a second Kafka route to a topic that exists, and a Redis
# route beside them, with events for all three emitted all along. Proves:
# - the Redis events are recorded published promptly (median and 90th
#   percentile of commit-to-published far below message.timeout.ms);
# - the unknown topic's events count attempts and end dead with the broker's
#   reason, and the sink is never reported unavailable;
# - the Kafka topic that exists keeps flowing through the same sink.
# Then the Kafka brokers answer slowly (1 s round trip, above the ack wait),
# so every Kafka batch is recorded from its late answers. Proves:
# - every event is delivered once per key in emit order and recorded
#   published (the late answers are written), with outbox.stats agreeing;
# - the Redis route stays prompt meanwhile.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql);
use OutboxRedis;

my $kafka = OutboxKafka->start();
$kafka->command_ok('create_topic present-out 1');
$kafka->command_ok('topic_error missing-out UNKNOWN_TOPIC_OR_PART');
my $redis = OutboxRedis->start();
my $port = $redis->port;

my $node = outbox_node('slow_sink', "outbox.max_attempts = 3\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres',
	kafka_sink_sql('kafka', $kafka->bootstrap, 'message.timeout.ms' => '4000'));
$node->safe_psql('postgres', qq{
	SELECT outbox.create_sink('redis', 'redis', '{"port": $port}');
	SELECT outbox.add_route('lost.*', 'kafka', 'missing-out');
	SELECT outbox.add_route('present.*', 'kafka', 'present-out');
	SELECT outbox.add_route('fast.*', 'redis', 'fast-stream');});
my $log_start = -s $node->logfile;

# Six seconds of traffic: each round one event per route, in its own
# transaction, as independent applications would emit them.
for my $i (1 .. 40) {
	$node->safe_psql('postgres', qq{
		SELECT outbox.emit('lost.order', '{"i": $i}', 'k' || ($i % 3));
		SELECT outbox.emit('fast.order', '{"i": $i}', 'k' || ($i % 3));
		SELECT outbox.emit('present.order', '{"i": $i}', 'k' || ($i % 3));});
	sleep 0.15;
}

ok(defined wait_until(sub {
	$node->safe_psql('postgres',
		"SELECT count(*) FROM outbox.events WHERE topic IN ('fast.order', 'present.order')"
		  . " AND status = 'published'") eq '80' }),
	'the Redis route and the Kafka topic that exists deliver everything');

my ($p50, $p90) = split /\|/, $node->safe_psql('postgres', q{
	SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)),
	       percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at))
	  FROM outbox.events WHERE topic = 'fast.order'});
note sprintf('Redis events, commit to published: p50 %.3f s, p90 %.3f s', $p50, $p90);
cmp_ok($p50, '<', 1.5, 'the Redis route is not held up by the Kafka topic (median)');
cmp_ok($p90, '<', 2.5, 'the Redis route is not held up by the Kafka topic (90th percentile)');

ok(defined wait_until(sub {
	$node->safe_psql('postgres',
		"SELECT count(*) FROM outbox.events WHERE topic = 'lost.order' AND status = 'dead'") eq '40' }),
	'the unknown topic\'s events use their attempts and end dead');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM outbox.events WHERE topic = 'lost.order'"
	  . q{ AND (attempts <> 3 OR last_error NOT LIKE '%UNKNOWN_TOPIC%(topic "missing-out")%')}),
	'0', 'each after outbox.max_attempts attempts, with the broker\'s reason and the topic');

my $log = slurp_file($node->logfile, $log_start);
unlike($log, qr/sink "kafka" is unavailable/, 'the sink is never reported unavailable for one topic');
# Which line depends on what else a batch held: a batch of nothing but the
# unknown topic's events, with nothing else of the sink answered in the wait
# before, says the sink has not answered; one with the topic that exists
# says that topic's events wait.
like($log, qr/sink "kafka" (has not answered within outbox\.ack_wait|answers, but not for topic\(s\) "lost\.order")/,
	'the log says the sink (or the topic) is slow and the others go ahead');

# --- Slow brokers: every Kafka answer comes after the ack wait.
$kafka->command_ok('rtt all 1000');
for my $i (1 .. 30) {
	$node->safe_psql('postgres', qq{
		SELECT outbox.emit('present.slow', '{"p": 2, "i": $i}', 'k' || ($i % 3));
		SELECT outbox.emit('fast.slow', '{"i": $i}', 'k' || ($i % 3));});
	sleep 0.1;
}
ok(defined wait_until(sub {
	$node->safe_psql('postgres',
		"SELECT count(*) FROM outbox.events WHERE topic IN ('present.slow', 'fast.slow')"
		  . " AND status = 'published'") eq '60' }),
	'with slow brokers every event is recorded published from its late answer')
  or diag $node->safe_psql('postgres',
	"SELECT id, key, status, attempts, next_attempt_at - now(), last_error FROM outbox.events"
	  . " WHERE topic IN ('present.slow', 'fast.slow') AND status <> 'published' ORDER BY id");
my ($slow_p50) = $node->safe_psql('postgres', q{
	SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at))
	  FROM outbox.events WHERE topic = 'fast.slow'});
note sprintf('Redis events beside slow Kafka brokers: p50 %.3f s', $slow_p50);
cmp_ok($slow_p50, '<', 1.0, 'the Redis route stays prompt beside slow brokers');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM outbox.events WHERE topic = 'present.slow' AND attempts <> 0"),
	'0', 'a late answer is not an attempt');
$kafka->command_ok('rtt all 0');

# Per key and phase, the values must arrive in emit order, each once.
# Read again (a read ends once nothing came for a while) until all 70 are there.
my $msgs = $kafka->consume(topics => ['present-out'], timeout_ms => 3000, until => sub { @{ $_[0] } >= 70 });
my (%last, %count, @disorder);
for my $m (@$msgs) {
	my ($phase) = $m->{value} =~ /"p": ?(\d+)/;
	my ($i) = $m->{value} =~ /"i": ?(\d+)/;
	my $run = ($phase // 1) . '/' . $m->{key};
	push @disorder, "$run: $i after $last{$run}" if defined $last{$run} && $i <= $last{$run};
	$last{$run} = $i;
	$count{$phase // 1}++;
}
is($count{1}, 40, 'the Kafka topic got the first phase\'s events once each');
is($count{2}, 30, 'and the slow phase\'s events once each');
is_deeply(\@disorder, [], 'per key, each phase arrived in emit order');
is($node->safe_psql('postgres',
	"SELECT published FROM outbox.stats WHERE topic = 'present.slow'"),
	'30', 'outbox.stats counts the late outcomes');

$node->stop;
done_testing();
