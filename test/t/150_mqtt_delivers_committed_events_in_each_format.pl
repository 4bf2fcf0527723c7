# An MQTT sink delivers exactly the committed events, in the shapes
# docs/formats.md describes, to a subscriber at QoS 1 (Debian's
# python3-paho-mqtt):
# - MQTT 5, raw: the body is the payload, content type application/json,
#   correlation data the event id, user properties outbox-id, outbox-topic,
#   outbox-key (keyed events only), then the user headers with their names
#   (a user header named like one of outbox's own is not taken);
# - MQTT 5, cloudevents: structured mode (application/cloudevents+json);
# - MQTT 3.1.1: the raw envelope {"id","topic","key","payload","headers"};
# - a route without a target publishes to the event's topic, a route with
#   one to that topic;
# - nothing of a rolled-back transaction or subtransaction arrives;
# - outbox.workers shows the sinks connected, and no password is logged
#   (it comes from the server's environment, {"env": ...}).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxMosquitto;
use OutboxNode qw(outbox_node wait_until);

my $PASSWORD = 'mqtt-Secret-5150';
my $mq = OutboxMosquitto->start();
$mq->subscribe('#');

$ENV{OUTBOX_MQTT_PASSWORD} = $PASSWORD;
my $node = outbox_node('mqtt_formats', "outbox.cloudevents_source = '/test/mqtt'\n");
delete $ENV{OUTBOX_MQTT_PASSWORD};
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
# The broker takes anonymous clients: a user and password it does not check
# still travel, and must never be logged.
$node->safe_psql('postgres',
	$mq->sink_sql('mqtt', user => 'svc', password => { env => 'OUTBOX_MQTT_PASSWORD' }));
$node->safe_psql('postgres', $mq->sink_sql('mqtt311', protocol => '3.1.1'));
$node->safe_psql('postgres', q{
	SELECT outbox.add_route('raw.*', 'mqtt');
	SELECT outbox.add_route('ce.*', 'mqtt', format => 'cloudevents');
	SELECT outbox.add_route('other.*', 'mqtt', 'raw/routed');
	SELECT outbox.add_route('old.*', 'mqtt311');});

$node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox.emit('raw.order', '{"n": 1}', 'k1', '{"trace": "t1", "outbox-id": "forged"}');
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
	SELECT outbox.emit('other.thing', '{"o": 1}');
	SELECT outbox.emit('old.order', '{"v": 1}', 'k3', '{"h": "v"}');});

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '6' }),
	'the six committed events are published')
  or diag($node->safe_psql('postgres', 'SELECT topic, status, attempts, last_error FROM outbox.events'));
ok(defined wait_until(sub { scalar(my @m = $mq->messages) >= 6 }), 'the subscriber has them');

my %id = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
	q{SELECT coalesce('n' || (payload->>'n'), 'c' || (payload->>'c'), 'o' || (payload->>'o'),
	                  'v' || (payload->>'v')), id FROM outbox.events});
my $json = JSON::PP->new;
my @all = $mq->messages;
is(scalar @all, 6, 'six messages, nothing rolled back');

my %by;    # n1, n2, n3, o1 => [ position, message ]
for my $i (0 .. $#all) {
	next unless $all[$i]{topic} =~ m{^raw[./]};
	my $body = $json->decode($all[$i]{body});
	my ($name) = map { "$_$body->{$_}" } grep { defined $body->{$_} } qw(n o);
	$by{ $name // '?' } = [ $i, $all[$i] ];
}
is_deeply([ sort keys %by ], [qw(n1 n2 n3 o1)], 'MQTT 5 raw: the bodies are the payloads');
ok(defined $by{n1} && defined $by{n3} && $by{n1}[0] < $by{n3}[0], 'per key, in emit order');
is_deeply({ map { $_ => $by{$_}[1]{topic} } keys %by },
	{ n1 => 'raw.order', n2 => 'raw.order', n3 => 'raw.order', o1 => 'raw/routed' },
	'the MQTT topic is the event topic (one level), or the route target');
is_deeply($by{n1}[1]{properties},
	[ [ 'outbox-id', $id{n1} ], [ 'outbox-topic', 'raw.order' ], [ 'outbox-key', 'k1' ],
	  [ 'trace', 't1' ] ],
	'user properties: outbox-id, -topic, -key, then the user header; a forged outbox-id dropped');
is($by{n1}[1]{content_type}, 'application/json', 'content type application/json');
is($by{n1}[1]{correlation}, $id{n1}, 'correlation data: the event id');
is_deeply($by{n2}[1]{properties},
	[ [ 'outbox-id', $id{n2} ], [ 'outbox-topic', 'raw.order' ] ],
	'no outbox-key for an event without a key');
is(OutboxMosquitto::property($by{o1}[1], 'outbox-topic'), 'other.thing',
	'a routed event keeps its topic in outbox-topic');

my ($ce) = grep { $_->{topic} eq 'ce.order' } @all;
is($ce->{content_type}, 'application/cloudevents+json', 'cloudevents: structured mode');
my $event = $json->decode($ce->{body});
like(delete $event->{time}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/, 'time is RFC 3339 in UTC');
is_deeply($event, {
		specversion => '1.0', id => $id{c1}, source => '/test/mqtt', type => 'ce.order',
		datacontenttype => 'application/json', partitionkey => 'k2',
		traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
		outboxheaders => '{"X-Other":"o"}', data => { c => 1 } },
	'the CloudEvent: attributes, key, extensions, other headers, the payload as data');
is(OutboxMosquitto::property($ce, 'outbox-id'), $id{c1}, 'and outbox-id as a user property');

my ($old) = grep { $_->{topic} eq 'old.order' } @all;
like($old->{body}, qr/^\{"id":"\Q$id{v1}\E","topic":"old\.order","key":"k3","payload":/,
	'MQTT 3.1.1: the raw envelope, its fields in order');
is_deeply($json->decode($old->{body}),
	{ id => $id{v1}, topic => 'old.order', key => 'k3', payload => { v => 1 }, headers => { h => 'v' } },
	'MQTT 3.1.1: id, topic, key, payload and headers in the envelope');
is_deeply($old->{properties}, [], 'MQTT 3.1.1: no properties');

like($node->safe_psql('postgres', q{SELECT sinks FROM outbox.workers}), qr/\bmqtt=connected\b/,
	'outbox.workers shows the sink connected');
unlike(slurp_file($node->logfile), qr/\Q$PASSWORD\E/, 'the password is never logged');

$node->stop;
done_testing();
