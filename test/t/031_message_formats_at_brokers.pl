# Routes deliver in the format they name: CloudEvents (Kafka binary mode
# headers; Redis structured JSON) and Debezium outbox conventions (key, id
# header, payload as value; Debezium Server's Redis stream layout), next to
# raw routes, with the CloudEvents source following outbox.cloudevents_source.
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
$kafka->command_ok("create_topic $_ 1") for qw(ce-out dbz-out raw-out);
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
	SELECT outbox.add_route('raw.*', 'kafka', 'raw-out');
	SELECT outbox.add_route('rce.*', 'stream', 'ce-stream', 'cloudevents');
	SELECT outbox.add_route('rcel.*', 'list', 'ce-list', 'cloudevents');
	SELECT outbox.add_route('rdbz.*', 'stream', 'dbz-stream', 'debezium');
	SELECT outbox.add_route('rdbzl.*', 'list', 'dbz-list', 'debezium');});

sub id_of {
	my ($topic) = @_;
	return $node->safe_psql('postgres',
		"SELECT id FROM outbox.events WHERE topic = '$topic' ORDER BY id DESC LIMIT 1");
}

sub time_of {
	my ($topic) = @_;
	return $node->safe_psql('postgres',
		"SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
		  . " FROM outbox.events WHERE topic = '$topic' ORDER BY id DESC LIMIT 1");
}

$node->safe_psql('postgres', q{
	SELECT outbox.emit('ce.order', '{"n": 1}', 'order-1', '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "X-Tenant": "acme"}');
	SELECT outbox.emit('dbz.order', '{"n": 2}', 'order-2', '{"X-Tenant": "acme"}');
	SELECT outbox.emit('raw.order', '{"n": 3}', 'order-3');
	SELECT outbox.emit('rce.order', '{"n": 4}', 'order-4', '{"X-Tenant": "acme", "region": "eu"}');
	SELECT outbox.emit('rcel.order', '{"n": 5}');
	SELECT outbox.emit('rdbz.order', '{"n": 6}', 'order-6');
	SELECT outbox.emit('rdbz.order', '{"n": 7}');
	SELECT outbox.emit('rdbzl.order', '{"n": 8}', 'order-8');});
ok(defined wait_until(sub { pending_count($node) eq '0' }, 20), 'every event published');

# --- Kafka, cloudevents: binary content mode.
my ($ce) = @{ $kafka->consume(topics => ['ce-out'], count => 1) };
is($ce->{key}, 'order-1', 'cloudevents: the key is the message key');
is($ce->{value}, '{"n":1}', 'cloudevents: the value is the payload');
is_deeply($ce->{headers},
	[ [ 'ce_specversion', '1.0' ], [ 'ce_id', id_of('ce.order') ],
	  [ 'ce_source', '/outbox/postgres' ], [ 'ce_type', 'ce.order' ],
	  [ 'ce_time', time_of('ce.order') ], [ 'content-type', 'application/json' ],
	  [ 'X-Tenant', 'acme' ],
	  [ 'traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' ] ],
	'cloudevents: ce_ headers (source defaults to /outbox/<database>), then the user headers in jsonb order');

# --- Kafka, debezium: the outbox event router's conventions.
my ($dbz) = @{ $kafka->consume(topics => ['dbz-out'], count => 1) };
is($dbz->{key}, 'order-2', 'debezium: the key is the message key');
is($dbz->{value}, '{"n":2}', 'debezium: the value is the payload');
is_deeply($dbz->{headers}, [ [ 'id', id_of('dbz.order') ], [ 'X-Tenant', 'acme' ] ],
	'debezium: an id header, then the user headers');

# --- Kafka, raw, unchanged beside them.
my ($raw) = @{ $kafka->consume(topics => ['raw-out'], count => 1) };
is_deeply($raw->{headers},
	[ [ 'outbox-id', id_of('raw.order') ], [ 'outbox-topic', 'raw.order' ] ],
	'raw: the contract headers on the same sink');

# --- Redis, cloudevents: structured JSON in a stream field and a list.
my @entry = split /\n/, $redis->cli('XRANGE', 'ce-stream', '-', '+');
is(scalar @entry, 3, 'cloudevents stream: one entry with one field');
is($entry[1], 'cloudevent', 'cloudevents stream: the field is "cloudevent"');
is_deeply(decode_json($entry[2]),
	{ specversion => '1.0', id => id_of('rce.order'), source => '/outbox/postgres',
	  type => 'rce.order', time => time_of('rce.order'),
	  datacontenttype => 'application/json', partitionkey => 'order-4', region => 'eu',
	  outboxheaders => '{"X-Tenant":"acme"}', data => { n => 4 } },
	'cloudevents stream: structured event; header names that cannot be attributes kept in outboxheaders');
my @list = split /\n/, $redis->cli('LRANGE', 'ce-list', '0', '-1');
is_deeply(decode_json($list[0]),
	{ specversion => '1.0', id => id_of('rcel.order'), source => '/outbox/postgres',
	  type => 'rcel.order', time => time_of('rcel.order'),
	  datacontenttype => 'application/json', data => { n => 5 } },
	'cloudevents list: the structured event, no partitionkey without a key');

# --- Redis, debezium: Debezium Server's stream layout; the payload in lists.
my @dbz = split /\n/, $redis->cli('XRANGE', 'dbz-stream', '-', '+');
is_deeply([ @dbz[ 1, 2, 4, 5 ] ], [ 'order-6', '{"n":6}', 'default', '{"n":7}' ],
	'debezium stream: field named after the key ("default" without one), value the payload');
is($redis->cli('LRANGE', 'dbz-list', '0', '-1'), '{"n":8}', 'debezium list: the payload');

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
}, 20), 'ce_source follows outbox.cloudevents_source after a reload');

done_testing();
