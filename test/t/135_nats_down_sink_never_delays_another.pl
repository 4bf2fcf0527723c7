# A NATS sink whose server is down never delays another NATS sink: events for
# the sink that is up are published promptly (median and 90th percentile of
# commit to published far below a second), the other sink's events wait
# and outbox.workers shows that sink down and the first connected; when the
# second server comes back, its events follow.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxNats;
use OutboxNode qw(outbox_node wait_until);

my $up = OutboxNats->start();
my $down = OutboxNats->start();
$up->add_stream('UP', 'fa.>');
$down->add_stream('DOWN', 'fb.>');
my $node = outbox_node('nats_two_sinks');
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', $up->sink_sql('a'));
$node->safe_psql('postgres', $down->sink_sql('b', ack_timeout_ms => 1000));
$node->safe_psql('postgres', q{
	SELECT outbox.add_route('fa.*', 'a');
	SELECT outbox.add_route('fb.*', 'b');});
$node->safe_psql('postgres', q{SELECT outbox.emit('fa.warm', '{}'), outbox.emit('fb.warm', '{}')});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '2' }),
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
	'the second sink delivers its events once its server is back');
my @b = map { $_->{data} } grep { $_->{subject} eq 'fb.order' } $down->messages('DOWN');
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
$up->stop;
$down->stop;
done_testing();
