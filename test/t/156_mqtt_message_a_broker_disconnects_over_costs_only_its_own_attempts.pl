# MQTT 3.1.1 cannot learn the broker's packet limit, so one event past it
# makes mosquitto close the connection, and every message in flight on the
# sink's connections is lost with it. Under a steady stream on other keys,
# that event (retried with its backoff) keeps taking its neighbours down
# with it; they must not pay for it: each is tried alone before an attempt
# counts against it. So no other event is charged an attempt, none ends
# dead, all are published, each key in order; the culprit alone ends dead
# after outbox.max_attempts, and its key's next event goes on then.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use OutboxMosquitto;
use OutboxNode qw(outbox_node wait_until);

my $mq = OutboxMosquitto->start(max_packet_size => 4096, unlimited_queue => 1);
$mq->subscribe('#');
my $node = outbox_node('mqtt_disconnect_culprit',
	"outbox.max_attempts = 4\noutbox.backoff_max = '1s'\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', $mq->sink_sql('mqtt', protocol => '3.1.1', connections => 4));
$node->safe_psql('postgres', q{SELECT outbox.add_route('dc.*', 'mqtt')});
$node->safe_psql('postgres', q{SELECT outbox.emit('dc.t', '{"warm": 1}', 'w')});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT status FROM outbox.events}) eq 'published' }),
	'the sink delivers');

$node->safe_psql('postgres', q{
	SELECT outbox.emit('dc.t', jsonb_build_object('culprit', repeat('x', 8000)), 'kc');
	SELECT outbox.emit('dc.t', '{"after": "culprit"}', 'kc');});
# A steady stream on 30 other keys while the culprit is retried.
my $rounds = 0;
for my $round (1 .. 40) {
	$node->safe_psql('postgres', qq{SELECT outbox.emit('dc.t',
	  jsonb_build_object('r', $round, 'i', i), 'k' || i) FROM generate_series(1, 30) i});
	$rounds++;
	usleep(150_000);
	last if $round >= 12 && $node->safe_psql('postgres',
		q{SELECT status FROM outbox.events WHERE payload ? 'culprit'}) eq 'dead';
}
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
$node->stop;
done_testing();
