# Messages RabbitMQ refuses are the events' failed attempts, and hold back
# nothing but the later events of their own key:
# - a message over the node's max_message_size (64 KiB here) closes the
#   channel it was published on; the event is rejected and ends dead after
#   outbox.max_attempts, the later event of its key is delivered once it is
#   dead, and nothing else is lost with the channel;
# - a message no queue takes (mandatory, returned NO_ROUTE) is its target's
#   refusal: those events end dead after outbox.max_attempts too;
# while a third route's events, emitted all along, are delivered promptly,
# and the sink is never reported unavailable.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);
use OutboxNode qw(outbox_node wait_until);
use OutboxRabbit;

my $rabbit = OutboxRabbit->start(conf => "max_message_size = 65536\n");
$rabbit->declare_queue($_) for qw(big-q fine-q);
my $node = outbox_node('amqp_refused', "outbox.max_attempts = 3\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
my ($port, $user, $password) = ($rabbit->port, $rabbit->user, $rabbit->password);
$node->safe_psql('postgres', qq{
	SELECT outbox.create_sink('rabbit', 'amqp', '{"port": $port, "user": "$user", "password": "$password"}');
	SELECT outbox.add_route('big.*', 'rabbit', 'big-q');
	SELECT outbox.add_route('lost.*', 'rabbit', 'no-such-queue');
	SELECT outbox.add_route('fine.*', 'rabbit', 'fine-q');});
my $log_start = -s $node->logfile;

# The poison first, then its key's next event, then traffic on every route
# for about 5 s, each event in its own transaction.
$node->safe_psql('postgres', q{
	SELECT outbox.emit('big.order', jsonb_build_object('n', 0, 'blob', repeat('x', 100000)), 'p');
	SELECT outbox.emit('big.order', '{"n": 1}', 'p');});
for my $i (1 .. 30) {
	$node->safe_psql('postgres', qq{
		SELECT outbox.emit('fine.order', '{"i": $i}', 'k' || ($i % 3));
		SELECT outbox.emit('lost.order', '{"i": $i}', 'k' || ($i % 3));});
	sleep 0.15;
}

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'fine.order' AND status = 'published'})
	  eq '30' }),
	'the third route delivers everything');
my ($p50, $p90) = split /\|/, $node->safe_psql('postgres', q{
	SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)),
	       percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at))
	  FROM outbox.events WHERE topic = 'fine.order'});
note sprintf('fine.order, commit to published: p50 %.3f s, p90 %.3f s', $p50, $p90);
cmp_ok($p50, '<', 1.0, 'the refused messages do not hold the other route up (median)');
cmp_ok($p90, '<', 2.0, 'the refused messages do not hold the other route up (90th percentile)');

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT status FROM outbox.events WHERE topic = 'big.order' AND key = 'p' AND payload->>'n' = '0'})
	  eq 'dead' }),
	'the too large event ends dead');
like($node->safe_psql('postgres', q{SELECT attempts || ' ' || last_error FROM outbox.events WHERE payload->>'n' = '0'}),
	qr/^3 .*message size \d+ is larger than (configured max size 65536|the broker's max 65536)/,
	'after outbox.max_attempts attempts, with the broker\'s reason');
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT status FROM outbox.events WHERE topic = 'big.order' AND payload->>'n' = '1'})
	  eq 'published' }),
	'the later event of its key is published once it is dead');
my $big = $rabbit->dump_queue('big-q');
is_deeply([ map { decode_json($_->{body})->{n} } @$big ], [1], 'only the later event reached the queue');

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'lost.order' AND status = 'dead'})
	  eq '30' }),
	'the unroutable events end dead');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'lost.order'
	  AND (attempts <> 3 OR last_error NOT LIKE '%returned the message as unroutable: NO_ROUTE (312)%routing key "no-such-queue"%')}),
	'0', 'each after outbox.max_attempts attempts, returned NO_ROUTE');

my $fine = $rabbit->dump_queue('fine-q');
my %count;
$count{ $_->{message_id} }++ for @$fine;
is(scalar(keys %count), 30, 'every event of the third route arrived');
my (%last, @disorder);
for my $m (@$fine) {
	my $i = decode_json($m->{body})->{i};
	my $k = $i % 3;
	push @disorder, "k$k: $i after $last{$k}" if defined $last{$k} && $i < $last{$k};
	$last{$k} = $i;
}
is_deeply(\@disorder, [], 'per key in emit order');

my $log = slurp_file($node->logfile, $log_start);
unlike($log, qr/sink "rabbit" is unavailable/, 'the sink is never reported unavailable');
like($node->safe_psql('postgres', q{SELECT sinks FROM outbox.workers}), qr/rabbit=connected/,
	'outbox.workers shows it connected');

$node->stop;
$rabbit->stop;
done_testing();
