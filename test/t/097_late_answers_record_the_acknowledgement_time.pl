# A late answer's event is recorded published as of the broker's
# acknowledgement, not as of the cycle that wrote it: published_at -
# created_at is what latency dashboards read. The broker answers after
# 1.5 s (outbox.ack_wait 200 ms: the answer is late), and the publisher
# stalls 2 s (fault injection) right before it writes late outcomes, so
# writing comes at least 2 s after the acknowledgement. published_at used to
# be the time of writing.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use OutboxNode qw(outbox_node wait_until kafka_sink_sql set_faults);
use OutboxKafka;

my $kafka = OutboxKafka->start(topics => ['late:1']);
my $node = outbox_node('late_ack', "outbox.ack_wait = '200ms'\n", fault_injection => 1);
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres',
	kafka_sink_sql('kafka', $kafka->bootstrap, 'message.timeout.ms' => '30000'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('late.*', 'kafka', 'late')});
# A first event, answered at once: the producer is connected before the test.
$node->safe_psql('postgres', q{SELECT outbox.emit('late.warm', '{}')});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '1' }),
	'a first event is published');

$kafka->command_ok('rtt all 1500');
set_faults($node, 'publisher.before_late_outcomes=stall');
my $sent = time();
$node->safe_psql('postgres', q{SELECT outbox.emit('late.e', '{"n": 1}', 'k')});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT status FROM outbox.events WHERE topic = 'late.e'}) eq 'published' }),
	'the late answer is recorded');
my $recorded = time();
set_faults($node, '');
$kafka->command_ok('rtt all 0');

my ($latency, $late) = split /\|/, $node->safe_psql('postgres', q{
	SELECT extract(epoch FROM published_at - created_at),
	       last_error IS NULL FROM outbox.events WHERE topic = 'late.e'});
note sprintf('emit to published_at %.2f s; emit to recorded %.2f s', $latency, $recorded - $sent);
cmp_ok($recorded - $sent, '>=', 3.5, 'the outcome was written at least 3.5 s after the emit (answer 1.5 s, stall 2 s)');
cmp_ok($latency, '>=', 1.4, 'published_at is no earlier than the acknowledgement');
cmp_ok($latency, '<', $recorded - $sent - 1.5,
	'published_at is the acknowledgement, not the time the outcome was written');

$node->stop;
$kafka->stop;
done_testing();
