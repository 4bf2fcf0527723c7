# A NATS JetStream sink delivers exactly the committed events, in the shapes
# docs/formats.md describes:
# - raw: the body is the payload; outbox-id, outbox-topic and outbox-key
#   (keyed events only) travel as headers beside Nats-Msg-Id (the event id),
#   user headers keep their names, and those NATS gives a meaning
#   (Nats-*, Status, Description) are dropped;
# - cloudevents: binary mode, ce- headers, the payload as the body;
# - a route without a target publishes to the event's topic as the subject,
#   a route with one to that subject;
# - nothing of a rolled-back transaction or subtransaction arrives;
# - the password comes from the server's environment ({"env": ...});
# - outbox.workers shows the sink connected.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNats;
use OutboxNode qw(outbox_node wait_until);

my $nats = OutboxNats->start();
$nats->add_stream('RAW', 'raw.>');
$nats->add_stream('CE', 'ce.>');

# The postmaster's environment, which the publisher inherits.
$ENV{OUTBOX_NATS_PASSWORD} = $OutboxNats::PASSWORD;
my $node = outbox_node('nats_formats', "outbox.cloudevents_source = '/test/nats'\n");
delete $ENV{OUTBOX_NATS_PASSWORD};
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres',
	$nats->sink_sql('nats', password => { env => 'OUTBOX_NATS_PASSWORD' }));
$node->safe_psql('postgres', q{
	SELECT outbox.add_route('raw.*', 'nats');
	SELECT outbox.add_route('ce.*', 'nats', format => 'cloudevents');
	SELECT outbox.add_route('other.*', 'nats', 'raw.routed');});

$node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox.emit('raw.order', '{"n": 1}', 'k1',
		'{"trace": "t1", "Nats-Msg-Id": "forged", "nats-expected-stream": "X", "Status": "503"}');
	SELECT outbox.emit('raw.order', '{"n": 2}');
	COMMIT;
	BEGIN;
	SELECT outbox.emit('raw.order', '{"n": "rolled back"}', 'k1');
	ROLLBACK;
	BEGIN;
	SELECT outbox.emit('raw.order', '{"n": 3}', 'k1');
	SAVEPOINT s;
	SELECT outbox.emit('raw.order', '{"n": "subtransaction"}', 'k1');
	ROLLBACK TO SAVEPOINT s;
	COMMIT;
	SELECT outbox.emit('ce.order', '{"c": 1}', 'k2', '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "X-Other": "o"}');
	SELECT outbox.emit('other.thing', '{"o": 1}');});

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '5' }),
	'the five committed events are published')
  or diag($node->safe_psql('postgres', 'SELECT topic, status, attempts, last_error FROM outbox.events'));

my %id = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
	q{SELECT coalesce('n' || (payload->>'n'), 'c' || (payload->>'c'), 'o' || (payload->>'o')), id
	    FROM outbox.events});
my $json = JSON::PP->new;

my @raw = $nats->messages('RAW');
is(scalar @raw, 4, 'RAW holds the three committed raw events and the routed one, nothing rolled back');
# Order is promised per key only: n1 and n3 share k1, the others have no key
# and may arrive between or after them.
my %by;    # n1, n2, n3, o1 => [ position in the stream, message ]
for my $i (0 .. $#raw) {
	my $body = $json->decode($raw[$i]{data});
	my ($name) = map { "$_$body->{$_}" } grep { defined $body->{$_} } qw(n o);
	$by{ $name // '?' } = [ $i, $raw[$i] ];
}
is_deeply([ sort keys %by ], [qw(n1 n2 n3 o1)], 'the bodies are the payloads');
ok(defined $by{n1} && defined $by{n3} && $by{n1}[0] < $by{n3}[0], 'per key, in emit order');
is_deeply({ map { $_ => $by{$_}[1]{subject} } keys %by },
	{ n1 => 'raw.order', n2 => 'raw.order', n3 => 'raw.order', o1 => 'raw.routed' },
	'the subject is the topic, or the route target');
is_deeply($by{n1}[1]{headers}, {
		'Nats-Msg-Id' => $id{n1}, 'outbox-id' => $id{n1}, 'outbox-topic' => 'raw.order',
		'outbox-key' => 'k1', trace => 't1' },
	'raw headers: Nats-Msg-Id is the event id, outbox-id, -topic, -key, the user header; '
	  . 'Nats-*, Status dropped');
is_deeply($by{n2}[1]{headers},
	{ 'Nats-Msg-Id' => $id{n2}, 'outbox-id' => $id{n2}, 'outbox-topic' => 'raw.order' },
	'no outbox-key for an event without a key');
is($by{o1}[1]{headers}{'outbox-topic'}, 'other.thing', 'a routed event keeps its topic in outbox-topic');

my @ce = $nats->messages('CE');
is(scalar @ce, 1, 'CE holds the cloudevents event');
is_deeply($json->decode($ce[0]{data}), { c => 1 }, 'binary mode: the body is the payload');
my %h = %{ $ce[0]{headers} };
like(delete $h{'ce-time'}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/, 'ce-time is RFC 3339 in UTC');
is_deeply(\%h, {
		'Nats-Msg-Id' => $id{c1}, 'ce-specversion' => '1.0',
		'ce-id' => $id{c1}, 'ce-source' => '/test/nats', 'ce-type' => 'ce.order',
		'content-type' => 'application/json', 'ce-partitionkey' => 'k2',
		'ce-traceparent' => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
		'ce-outboxheaders' => '{"X-Other":"o"}' },
	'cloudevents headers: the attributes with ce-, the key, extensions, other headers');

like($node->safe_psql('postgres', q{SELECT sinks FROM outbox.workers}), qr/\bnats=connected\b/,
	'outbox.workers shows the sink connected');
unlike(slurp_file($node->logfile), qr/\Q$OutboxNats::PASSWORD\E/, 'the password is never logged');

$node->stop;
$nats->stop;
done_testing();
