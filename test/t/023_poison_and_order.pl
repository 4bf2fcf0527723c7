# A poison event (one the broker refuses) goes dead after outbox.max_attempts
# while its neighbours and other keys flow; events of its key wait behind it
# until then; retry_dead() revives it. Per-key order holds across retries.
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
$kafka->command('create_topic poison 3');
my $node = outbox_node('poison', "outbox.max_attempts = 3");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
# The producer refuses messages over 2000 bytes: a poison pill for big payloads.
$node->safe_psql('postgres', kafka_sink_sql('small', $kafka->bootstrap,
	'message.max.bytes' => '2000'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('poison.*', 'small', 'poison')});

# One transaction: neighbours before and after the poison event, its key
# after it, and other keys.
$node->safe_psql('postgres', q{
	SELECT outbox.emit('poison.test', '{"seq": 1}', 'victim');
	SELECT outbox.emit('poison.test', jsonb_build_object('seq', 2, 'blob', repeat('x', 5000)), 'victim');
	SELECT outbox.emit('poison.test', '{"seq": 3}', 'victim');
	SELECT outbox.emit('poison.test', '{"seq": 10}', 'other');
	SELECT outbox.emit('poison.test', '{"seq": 11}');
});

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT status FROM outbox.events WHERE payload->>'seq' = '2'})
	  eq 'dead' }), 'the poison event goes dead');
my ($attempts, $error) = split /\|/, $node->safe_psql('postgres',
	q{SELECT attempts, last_error FROM outbox.events WHERE payload->>'seq' = '2'});
is($attempts, 3, 'after outbox.max_attempts attempts');
like($error, qr/size|large/i, 'last_error says why');
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'everything else is published');

my $got = $kafka->consume(topics => ['poison'], count => 4, timeout_ms => 5000);
my @victim = map { $_->{value} } sort { $a->{offset} <=> $b->{offset} }
  grep { defined $_->{key} && $_->{key} eq 'victim' } @$got;
is_deeply(\@victim, [ '{"seq":1}', '{"seq":3}' ],
	'its key: the event before it, then (once it is dead) the one after it');
# Held back, it went out in a later cycle than the event before it, after
# the poison event's two backoffs (50 ms, then 50-100 ms): published in the
# same batch, the two would be a fraction of a millisecond apart.
is($node->safe_psql('postgres', q{
	SELECT (SELECT published_at FROM outbox.events WHERE payload->>'seq' = '3')
	     - (SELECT published_at FROM outbox.events WHERE payload->>'seq' = '1')
	     >= interval '50 ms'}),
	't', 'the event after it waited for it to die');
is(scalar(grep { $_->{value} =~ /"seq":1[01]/ } @$got), 2, 'other keys and keyless events flowed');

# retry_dead() revives it; with a sink that accepts it (swapped in first, so
# the revived event cannot die again on the old one), it is delivered.
$node->safe_psql('postgres', q{
	SELECT outbox.remove_route('poison.*');
	SELECT outbox.drop_sink('small');});
# One Produce request in flight per connection: the test broker does not check an
# idempotent producer's sequence numbers, so with several in flight a failed request
# followed by a successful one would make librdkafka report the failed batch delivered
# (test/kafka/kafka_broker.cpp explains; a real broker refuses the out-of-sequence one).
$node->safe_psql('postgres', kafka_sink_sql('big', $kafka->bootstrap,
	'max.in.flight.requests.per.connection' => '1'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('poison.*', 'big', 'poison')});
# (Checked inside the reviving transaction: at its commit the publisher
# wakes and tries the event again.)
is($node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox.retry_dead('poison.test');
	SELECT status || ' ' || attempts FROM outbox.events WHERE payload->>'seq' = '2';
	COMMIT;}),
	"1\npending 0", 'retry_dead revives the event: pending again, attempts reset');
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT status FROM outbox.events WHERE payload->>'seq' = '2'})
	  eq 'published' }), 'the revived event is published');
is(scalar @{ $kafka->consume(topics => ['poison'], count => 5, timeout_ms => 5000) }, 5,
	'and arrives');

# Per-key order across retries: the broker fails produce requests for a
# while (librdkafka retries some itself; the rest come back to us).
$kafka->command('produce_errors 30 NOT_ENOUGH_REPLICAS');
$node->safe_psql('postgres', q{
	SELECT outbox.emit('poison.order', jsonb_build_object('i', i), 'k' || (i % 4))
	  FROM generate_series(1, 200) AS i;});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'the ordered events are published');
# Read again (a read ends once nothing came for a while) until all 200 are there.
$got = $kafka->consume(topics => ['poison'], timeout_ms => 5000, until => sub {
	my %i = map { $_->{value} =~ /"i":(\d+)/ ? ($1 => 1) : () } @{ $_[0] };
	keys %i == 200 });
my (%last, %seen);
my $in_order = 1;
for my $m (sort { $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} } @$got) {
	next unless $m->{value} =~ /"i":(\d+)/;
	my $i = $1;
	next if $seen{$i}++;
	$in_order = 0 if defined $last{ $m->{key} } && $i < $last{ $m->{key} };
	$last{ $m->{key} } = $i;
}
is(scalar keys %seen, 200, 'all 200 arrived');
ok($in_order, 'per key, in emit order despite the failed requests');

$node->stop;
$kafka->stop;
done_testing();
