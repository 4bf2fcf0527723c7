# An AMQP sink whose node is down never delays another sink: two sinks on
# two RabbitMQ nodes, the second node killed. While it is down, the first
# sink's events are published promptly, the second's wait (outbox.workers
# shows it down, the first connected; only the second is logged
# unavailable), and once its node is back every waiting event arrives, per
# key in emit order.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);
use OutboxNode qw(outbox_node wait_until pending_count);
use OutboxRabbit;

my $up = OutboxRabbit->start();
my $gone = OutboxRabbit->start();
$up->declare_queue('up-q');
$gone->declare_queue('gone-q');
my $node = outbox_node('amqp_two_sinks');
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
for my $s ([ 'up', $up ], [ 'gone', $gone ]) {
	my ($name, $r) = @$s;
	my ($port, $user, $password) = ($r->port, $r->user, $r->password);
	$node->safe_psql('postgres', qq{
		SELECT outbox.create_sink('$name', 'amqp', '{"port": $port, "user": "$user", "password": "$password"}');
		SELECT outbox.add_route('$name.*', '$name', '$name-q');});
}
$node->safe_psql('postgres', q{SELECT outbox.emit('up.warm', '{}'), outbox.emit('gone.warm', '{}')});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'both sinks deliver');

my $log_start = -s $node->logfile;
$gone->kill_node;
# Five seconds of traffic, each event in its own transaction, as independent
# applications would emit them.
for my $i (1 .. 35) {
	$node->safe_psql('postgres', qq{
		SELECT outbox.emit('up.order', '{"i": $i}', 'k' || ($i % 3));
		SELECT outbox.emit('gone.order', '{"i": $i}', 'k' || ($i % 3));});
	sleep 0.15;
}
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'up.order' AND status = 'published'})
	  eq '35' }),
	'the first sink delivers everything while the second is down');
my ($p50, $p90) = split /\|/, $node->safe_psql('postgres', q{
	SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)),
	       percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at))
	  FROM outbox.events WHERE topic = 'up.order'});
note sprintf('first sink, commit to published: p50 %.3f s, p90 %.3f s', $p50, $p90);
cmp_ok($p50, '<', 1.0, 'the first sink is not delayed by the second (median)');
cmp_ok($p90, '<', 2.0, 'the first sink is not delayed by the second (90th percentile)');

is(pending_count($node, 'postgres', q{topic = 'gone.order'}), '35', 'the second sink\'s events wait');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'gone.order' AND attempts > 0}),
	'0', 'without being charged attempts (the sink is down, not the events at fault)');
my $sinks = $node->safe_psql('postgres', q{SELECT sinks FROM outbox.workers});
like($sinks, qr/gone=down/, 'outbox.workers shows the second sink down');
like($sinks, qr/up=connected/, 'and the first connected');
my $log = slurp_file($node->logfile, $log_start);
like($log, qr/sink "gone" is unavailable/, 'the second sink is logged unavailable');
unlike($log, qr/sink "up" is unavailable/, 'the first never');

$gone->restart;
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'the second sink\'s events flow once its node is back');
my $arrived = $gone->dump_queue('gone-q');
my %seen;
my (%last, @disorder);
for my $m (@$arrived) {
	my $p = decode_json($m->{body});
	next unless defined $p->{i};
	next if $seen{ $m->{message_id} }++;
	my $k = $p->{i} % 3;
	push @disorder, "k$k: $p->{i} after $last{$k}" if defined $last{$k} && $p->{i} < $last{$k};
	$last{$k} = $p->{i};
}
is(scalar(keys %seen), 35, 'every waiting event arrived');
is_deeply(\@disorder, [], 'per key in emit order');
like($node->safe_psql('postgres', q{SELECT sinks FROM outbox.workers}), qr/gone=connected/,
	'outbox.workers shows the second sink connected again');

$node->stop;
$up->stop;
$gone->stop;
done_testing();
