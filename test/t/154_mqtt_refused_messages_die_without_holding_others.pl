# Messages an MQTT 5 broker refuses end dead after outbox.max_attempts,
# without holding other keys or topics, and without the sink ever being
# judged down:
# - not authorised: a topic the broker's ACL file (the test's own) denies,
#   refused with PUBACK reason code 0x87;
# - too large: over the maximum packet size the broker announced in its
#   CONNACK (8 kB here), so libmosquitto never sends it.
# Meanwhile other keys and topics are published promptly, and a refused
# event's own key goes on once it is dead. Then a second MQTT sink whose
# broker is down never delays the first: its events wait and outbox.workers
# shows it down, the first one's are published promptly, and the second's
# follow, per key in order, once its broker is back.
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

my $mq = OutboxMosquitto->start(max_packet_size => 8192, deny => ['rf.denied']);
$mq->subscribe('#');
my $node = outbox_node('mqtt_refused', "outbox.max_attempts = 3\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', $mq->sink_sql('mqtt'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('rf.*', 'mqtt')});
my $log_start = -s $node->logfile;

$node->safe_psql('postgres', q{
	SELECT outbox.emit('rf.big', jsonb_build_object('pad', repeat('x', 20000)), 'kb');
	SELECT outbox.emit('rf.big', '{"after": "big"}', 'kb');
	SELECT outbox.emit('rf.big', '{"other": "key"}', 'kc');
	SELECT outbox.emit('rf.denied', '{"n": 1}', 'kn');
	SELECT outbox.emit('rf.denied', '{"n": 2}', 'kn');
	SELECT outbox.emit('rf.ok', '{"ok": 1}', 'kb');
	SELECT outbox.emit('rf.ok', '{"ok": 2}');});

my $status = sub {
	my ($where) = @_;
	return $node->safe_psql('postgres',
		"SELECT status || ':' || attempts FROM outbox.events WHERE $where");
};
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	  WHERE status = 'published' AND (payload ? 'ok' OR payload ? 'other')}) eq '3' }, 30),
	'other keys of the topic and other topics are published while the refused events retry');
unlike($status->(q{payload ? 'pad'}), qr/^published/, 'the too-large event is not published');

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	  WHERE status = 'dead' AND (payload ? 'pad' OR payload->>'n' = '1')}) eq '2' }),
	'the refused events end dead')
  or diag($node->safe_psql('postgres', 'SELECT topic, key, status, attempts, last_error FROM outbox.events'));
is($status->(q{payload ? 'pad'}), 'dead:3', 'the too-large event died after max_attempts attempts');
like($node->safe_psql('postgres', q{SELECT last_error FROM outbox.events WHERE payload ? 'pad'}),
	qr/^too large for the broker/, 'its last error says it is too large');
is($status->(q{payload->>'n' = '1'}), 'dead:3', 'the event for a denied topic died after max_attempts');
like($node->safe_psql('postgres', q{SELECT last_error FROM outbox.events WHERE payload->>'n' = '1'}),
	qr/0x87 not authorized \(topic "rf\.denied"\)/, 'its last error names the reason code and topic');
ok(defined wait_until(sub { $status->(q{payload ? 'after'}) eq 'published:0' }),
	'the next event of the too-large one\'s key is published once that one is dead');
ok(defined wait_until(sub { $status->(q{payload->>'n' = '2'}) eq 'dead:3' }),
	'the next event for the denied topic dies on its own attempts');

my @got = grep { $_->{topic} =~ m{^rf\.} } $mq->messages;
is_deeply([ sort map { $_->{body} =~ /"(ok|other|after)"/ ? $1 : 'unexpected' } @got ],
	[qw(after ok ok other)], 'the subscriber has the four events the broker took');
my $log = slurp_file($node->logfile, $log_start);
unlike($log, qr/sink "mqtt" is unavailable/, 'the sink is never judged down');
unlike($node->safe_psql('postgres', q{SELECT string_agg(sinks, '; ') FROM outbox.workers}),
	qr/mqtt=down/, 'outbox.workers does not show it down');

# A second sink, whose broker goes down, never delays the first.
my $down = OutboxMosquitto->start();
$down->subscribe('#');
$node->safe_psql('postgres', $mq->sink_sql('a'));
$node->safe_psql('postgres', $down->sink_sql('b', ack_timeout_ms => 1000, connect_timeout_ms => 500));
$node->safe_psql('postgres', q{
	SELECT outbox.add_route('fa.*', 'a');
	SELECT outbox.add_route('fb.*', 'b');});
$node->safe_psql('postgres', q{SELECT outbox.emit('fa.warm', '{}'), outbox.emit('fb.warm', '{}')});
ok(defined wait_until(sub {
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM outbox.events WHERE topic LIKE '%.warm' AND status = 'published'}) eq '2' }),
	'both sinks deliver before the outage');
$down->stop;
for my $i (1 .. 40) {
	$node->safe_psql('postgres', qq{
		SELECT outbox.emit('fa.order', '{"i": $i}', 'k' || ($i % 3));
		SELECT outbox.emit('fb.order', '{"i": $i}', 'k' || ($i % 3));});
	usleep(150_000);
}
ok(defined wait_until(sub {
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM outbox.events WHERE topic = 'fa.order' AND status = 'published'}) eq '40' }),
	'the sink that is up delivers everything');
my ($p50, $p90) = split /\|/, $node->safe_psql('postgres', q{
	SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)),
	       percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at))
	  FROM outbox.events WHERE topic = 'fa.order'});
note(sprintf('sink a, commit to published: p50 %.3f s, p90 %.3f s', $p50, $p90));
cmp_ok($p50, '<', 1.0, 'the sink that is up is not held up by the one that is down (median)');
cmp_ok($p90, '<', 2.0, 'the sink that is up is not held up by the one that is down (90th percentile)');
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM outbox.events WHERE topic = 'fb.order' AND status = 'published'}), '0',
	'the down sink\'s events wait');
my $sinks = $node->safe_psql('postgres', q{SELECT string_agg(sinks, '; ') FROM outbox.workers});
like($sinks, qr/\ba=connected\b/, 'outbox.workers shows the sink that is up connected');
like($sinks, qr/\bb=down\b/, 'and the other one down');

$down->start_again;
ok(defined wait_until(sub {
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM outbox.events WHERE topic = 'fb.order' AND status = 'published'}) eq '40' }),
	'the second sink delivers its events once its broker is back');
# The subscriber's session waited in the restarted broker (it saved it);
# the subscriber itself reconnects within a second or so.
my $fb = sub { map { $_->{body} } grep { $_->{topic} eq 'fb.order' } $down->messages };
wait_until(sub { scalar(my @got = $fb->()) >= 40 });
my @b = $fb->();
is(scalar @b, 40, 'each of them once');
my %last;
my $order_ok = 1;
for my $d (@b) {
	my ($i) = $d =~ /"i": ?(\d+)/;
	my $k = $i % 3;
	$order_ok = 0 if defined $last{$k} && $last{$k} > $i;
	$last{$k} = $i;
}
ok($order_ok, 'per key in emit order');

$node->stop;
done_testing();
