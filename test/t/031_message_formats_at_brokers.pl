# Routes deliver exactly the shapes docs/formats.md describes: CloudEvents
# (Kafka binary mode, Redis structured mode, user headers mapped to the same
# attributes on both), Debezium's outbox EventRouter (payload as a JSON
# string by default, as an object with debezium-expanded; Debezium Server's
# extended Redis entry carrying the event id), next to raw routes, with the
# CloudEvents source following outbox.cloudevents_source.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql pending_count);
use OutboxRedis;

my $kafka = OutboxKafka->start();
$kafka->command_ok("create_topic $_ 1") for qw(ce-out dbz-out dbzx-out raw-out);
my $redis = OutboxRedis->start();
my $node = outbox_node('formats');
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
my $port = $redis->port;
$node->safe_psql('postgres', qq{
	SELECT outbox.create_sink('stream', 'redis', '{"port": $port}');
	SELECT outbox.create_sink('list', 'redis', '{"port": $port, "mode": "list"}');
	SELECT outbox.add_route('ce.*', 'kafka', 'ce-out', 'cloudevents');
	SELECT outbox.add_route('dbz.*', 'kafka', 'dbz-out', format => 'debezium');
	SELECT outbox.add_route('dbzx.*', 'kafka', 'dbzx-out', format => 'debezium-expanded');
	SELECT outbox.add_route('raw.*', 'kafka', 'raw-out');
	SELECT outbox.add_route('rce.*', 'stream', 'ce-stream', 'cloudevents');
	SELECT outbox.add_route('rcel.*', 'list', 'ce-list', 'cloudevents');
	SELECT outbox.add_route('rdbz.*', 'stream', 'dbz-stream', 'debezium');
	SELECT outbox.add_route('rdbzx.*', 'stream', 'dbzx-stream', 'debezium-expanded');
	SELECT outbox.add_route('rdbzl.*', 'list', 'dbz-list', 'debezium');});

# The id of the event whose payload is {"n": $n}.
sub id_of {
	my ($n) = @_;
	return $node->safe_psql('postgres',
		"SELECT id FROM outbox.events WHERE payload = '{\"n\": $n}'");
}

sub time_of {
	my ($n) = @_;
	return $node->safe_psql('postgres',
		"SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
		  . " FROM outbox.events WHERE payload = '{\"n\": $n}'");
}

# The same user headers go to Kafka (n 1) and Redis (n 4) in cloudevents:
# valid attribute names, a reserved one ("id") and an invalid one.
my $traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
my $ce_headers = qq{{"traceparent": "$traceparent", "X-Tenant": "acme", "region": "eu", "id": "user-id"}};
$node->safe_psql('postgres', qq{
	SELECT outbox.emit('ce.order', '{"n": 1}', 'order-1', '$ce_headers');
	SELECT outbox.emit('dbz.order', '{"n": 2}', 'order-2', '{"X-Tenant": "acme", "ID": "forged"}');
	SELECT outbox.emit('raw.order', '{"n": 3}', 'order-3');
	SELECT outbox.emit('rce.order', '{"n": 4}', 'order-4', '$ce_headers');
	SELECT outbox.emit('rcel.order', '{"n": 5}');
	SELECT outbox.emit('rdbz.order', '{"n": 6}', 'order-6', '{"X-Tenant": "acme", "Id": "forged"}');
	SELECT outbox.emit('rdbz.order', '{"n": 7}');
	SELECT outbox.emit('rdbzl.order', '{"n": 8}', 'order-8', '{"trace": "t1"}');
	SELECT outbox.emit('dbzx.order', '{"n": 10}', 'order-10');
	SELECT outbox.emit('rdbzx.order', '{"n": 11}', 'order-11');});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'every event published');

# --- Kafka, cloudevents: binary content mode. jsonb orders the headers by
# name length: id, region, X-Tenant, traceparent.
my $outboxheaders = '{"id":"user-id","X-Tenant":"acme"}';
my ($ce) = @{ $kafka->consume(topics => ['ce-out'], count => 1) };
is($ce->{key}, 'order-1', 'cloudevents: the key is the message key');
is($ce->{value}, '{"n":1}', 'cloudevents: the value is the payload');
is_deeply($ce->{headers},
	[ [ 'ce_specversion', '1.0' ], [ 'ce_id', id_of(1) ],
	  [ 'ce_source', '/outbox/postgres' ], [ 'ce_type', 'ce.order' ],
	  [ 'ce_time', time_of(1) ], [ 'content-type', 'application/json' ],
	  [ 'ce_region', 'eu' ], [ 'ce_traceparent', $traceparent ],
	  [ 'ce_outboxheaders', $outboxheaders ] ],
	'cloudevents: ce_ headers (source defaults to /outbox/<database>), extension attributes as ce_<name>, the other user headers in ce_outboxheaders');

# --- Kafka, debezium: EventRouter's defaults, the payload as a JSON string.
my ($dbz) = @{ $kafka->consume(topics => ['dbz-out'], count => 1) };
is($dbz->{key}, 'order-2', 'debezium: the key is the message key');
is($dbz->{value}, '"{\"n\":2}"', 'debezium: the value is the payload as a JSON string literal');
is(JSON::PP->new->allow_nonref->decode($dbz->{value}), '{"n":2}',
	'debezium: the string holds the payload\'s JSON text');
is_deeply($dbz->{headers}, [ [ 'id', id_of(2) ], [ 'X-Tenant', 'acme' ] ],
	'debezium: an id header, then the user headers (one named like it left out)');

# --- Kafka, debezium-expanded: table.expand.json.payload=true.
my ($dbzx) = @{ $kafka->consume(topics => ['dbzx-out'], count => 1) };
is($dbzx->{key}, 'order-10', 'debezium-expanded: the key is the message key');
is($dbzx->{value}, '{"n":10}', 'debezium-expanded: the value is the payload');
is_deeply($dbzx->{headers}, [ [ 'id', id_of(10) ] ], 'debezium-expanded: the id header');

# --- Kafka, raw, unchanged beside them.
my ($raw) = @{ $kafka->consume(topics => ['raw-out'], count => 1) };
is_deeply($raw->{headers},
	[ [ 'outbox-id', id_of(3) ], [ 'outbox-topic', 'raw.order' ] ],
	'raw: the contract headers on the same sink');

# --- Redis, cloudevents: structured JSON in a stream field and a list, the
# headers mapped as on Kafka.
my @entry = split /\n/, $redis->cli('XRANGE', 'ce-stream', '-', '+');
is(scalar @entry, 3, 'cloudevents stream: one entry with one field');
is($entry[1], 'cloudevent', 'cloudevents stream: the field is "cloudevent"');
is_deeply(decode_json($entry[2]),
	{ specversion => '1.0', id => id_of(4), source => '/outbox/postgres',
	  type => 'rce.order', time => time_of(4),
	  datacontenttype => 'application/json', partitionkey => 'order-4', region => 'eu',
	  traceparent => $traceparent, outboxheaders => $outboxheaders, data => { n => 4 } },
	'cloudevents stream: structured event; the same attributes and outboxheaders as on Kafka');
my @list = split /\n/, $redis->cli('LRANGE', 'ce-list', '0', '-1');
is_deeply(decode_json($list[0]),
	{ specversion => '1.0', id => id_of(5), source => '/outbox/postgres',
	  type => 'rcel.order', time => time_of(5),
	  datacontenttype => 'application/json', data => { n => 5 } },
	'cloudevents list: the structured event, no partitionkey without a key');

# --- Redis, debezium: Debezium Server's extended entry (key, value, ID,
# headers upper-cased); lists get the same fields as one JSON object.
my @dbz = split /\n/, $redis->cli('XRANGE', 'dbz-stream', '-', '+');
is_deeply([ @dbz[ 1 .. 8 ] ],
	[ 'key', 'order-6', 'value', '"{\"n\":6}"', 'ID', id_of(6), 'X-TENANT', 'acme' ],
	'debezium stream: key, value as a JSON string, ID = event id, user headers upper-cased (one named like ID left out)');
is_deeply([ @dbz[ 10 .. 15 ] ],
	[ 'key', 'default', 'value', '"{\"n\":7}"', 'ID', id_of(7) ],
	'debezium stream: key "default" without one');
is(scalar @dbz, 16, 'debezium stream: two entries, nothing else');
my @dbzx = split /\n/, $redis->cli('XRANGE', 'dbzx-stream', '-', '+');
is_deeply([ @dbzx[ 1 .. 6 ] ], [ 'key', 'order-11', 'value', '{"n":11}', 'ID', id_of(11) ],
	'debezium-expanded stream: the value is the payload');
is($redis->cli('LRANGE', 'dbz-list', '0', '-1'),
	'{"key":"order-8","value":"{\"n\":8}","ID":"' . id_of(8) . '","TRACE":"t1"}',
	'debezium list: the entry as one JSON object');

# --- The source follows outbox.cloudevents_source on reload.
$node->append_conf('postgresql.conf', "outbox.cloudevents_source = 'urn:example:shop'");
$node->reload;
# The publisher reads the setting per batch; give the reload a moment.
ok(defined wait_until(sub {
	$node->safe_psql('postgres', "SELECT outbox.emit('ce.order', '{\"n\": 9}')");
	my $got = $kafka->consume(topics => ['ce-out'], timeout_ms => 1000);
	my ($last) = reverse @$got;
	return 0 unless $last;
	my %h = map { @$_ } @{ $last->{headers} };
	return ($h{ce_source} // '') eq 'urn:example:shop';
}), 'ce_source follows outbox.cloudevents_source after a reload');

done_testing();
