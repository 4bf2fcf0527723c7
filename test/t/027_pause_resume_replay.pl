# Controls at work: a paused route's events wait (other routes flow) and
# arrive in order on resume; replay() delivers retained events again with
# their own outbox-id; pausing and resuming are logged once each.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql pending_count);

my $kafka = OutboxKafka->start();
$kafka->command("create_topic $_") for ('paused 1', 'flowing 1');
my $node = outbox_node('controls');
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('postgres', q{
	SELECT outbox.add_route('paused.*', 'kafka', 'paused');
	SELECT outbox.add_route('flowing.*', 'kafka', 'flowing');});
my $log_offset = -s $node->logfile;

# The pause is logged by a publisher that had the route loaded unpaused (a
# route loaded paused at its start is not news). On a loaded machine the
# publisher may start, or first load its routes, only after pause(): an
# event of the other route, emitted after both routes and published, shows
# that a cycle has loaded them both unpaused.
$node->safe_psql('postgres', q{SELECT outbox.emit('flowing.e', '{"x": 0}')});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'the publisher has loaded both routes');

$node->safe_psql('postgres', q{SELECT outbox.pause('paused.*')});
$node->safe_psql('postgres', q{
	SELECT outbox.emit('paused.e', jsonb_build_object('i', i), 'k') FROM generate_series(1, 20) i;
	SELECT outbox.emit('flowing.e', '{"x": 1}');});
ok(defined wait_until(sub { pending_count($node, 'postgres', q{topic = 'flowing.e'}) eq '0' }),
	'another route flows while one is paused');
sleep 1;
is(pending_count($node, 'postgres', q{topic = 'paused.e'}), '20', 'the paused route\'s events wait');
# Never tried, they are left where emit() put them (the claims take only
# topics an unpaused route takes); outbox.route_lag says why they wait.
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	WHERE topic = 'paused.e' AND next_attempt_at IS NULL AND attempts = 0 AND last_error IS NULL}),
	'20', 'they wait untouched');
is($node->safe_psql('postgres', q{SELECT paused || ' ' || pending FROM outbox.route_lag
	WHERE pattern = 'paused.*'}), 'true 20', 'outbox.route_lag shows the route paused with them');

$node->safe_psql('postgres', q{SELECT outbox.resume('paused.*')});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'they flow on resume');
my $got = $kafka->consume(topics => ['paused'], count => 20, timeout_ms => 5000);
is_deeply([ map { ($_->{value} =~ /(\d+)/)[0] } @$got ], [ 1 .. 20 ], 'in emit order');

my $log = slurp_file($node->logfile, $log_offset);
is(scalar(() = $log =~ /route "paused\.\*" paused/g), 1, 'the pause is logged once');
is(scalar(() = $log =~ /route "paused\.\*" resumed/g), 1, 'the resume is logged once');

# replay(): the same events again, same ids.
is($node->safe_psql('postgres', q{SELECT outbox.replay(now() - interval '1 hour', 'paused.e')}),
	'20', 'replay re-queues the 20 published events');
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'replayed events are published');
# Read again (a read ends once nothing came for a while) until all 40 are there.
$got = $kafka->consume(topics => ['paused'], timeout_ms => 5000, until => sub { @{ $_[0] } >= 40 });
is(scalar @$got, 40, 'each arrived twice');
my %ids;
for my $m (@$got) {
	my ($id) = map { $_->[1] } grep { $_->[0] eq 'outbox-id' } @{ $m->{headers} };
	$ids{$id}++;
}
is(scalar(grep { $_ == 2 } values %ids), 20, 'a replayed delivery carries the same outbox-id');

$node->stop;
$kafka->stop;
done_testing();
