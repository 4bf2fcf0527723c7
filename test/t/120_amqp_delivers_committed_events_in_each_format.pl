# The AMQP sink against a real RabbitMQ node: committed events arrive in the
# raw and the cloudevents format, as docs/formats.md shows them (body,
# properties, headers table; user headers RabbitMQ would act on left out),
# while events of a rolled-back transaction or subtransaction never arrive.
# The sink's password comes from the server's environment and appears in
# nothing outbox logs or shows; outbox.workers shows the sink connected; and
# create_sink() refuses bad options with 22023 naming the option.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node wait_until pending_count);
use OutboxRabbit;

my $rabbit = OutboxRabbit->start(password => 'amqp-s3cret-pw');
$rabbit->declare_queue($_) for qw(raw-q ce-q);
# The password from the server's environment: set before the server starts.
$ENV{OUTBOX_TEST_AMQP_PASSWORD} = $rabbit->password;
my $node = outbox_node('amqp', "outbox.max_attempts = 3\noutbox.cloudevents_source = '/outbox/shop'\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
my $port = $rabbit->port;
my $user = $rabbit->user;
$node->safe_psql('postgres', qq{
	SELECT outbox.create_sink('rabbit', 'amqp',
		'{"port": $port, "user": "$user", "password": {"env": "OUTBOX_TEST_AMQP_PASSWORD"}}');
	SELECT outbox.add_route('r.*', 'rabbit', 'raw-q');
	SELECT outbox.add_route('c.*', 'rabbit', 'ce-q', format => 'cloudevents');});

$node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox.emit('r.orders', '{"id": 42, "note": "quote \" and \\\\ backslash"}', 'order-42',
		'{"X-Tenant": "acme", "CC": "audit-q", "x-delay": "60000", "outbox-id": "forged",
		  "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}');
	SELECT outbox.emit('r.orders', '{"id": 43}');
	SELECT outbox.emit('c.orders', '{"id": 44}', 'order-44', '{"X-Tenant": "acme", "region": "eu"}');
	SAVEPOINT s;
	SELECT outbox.emit('r.orders', '{"rolled": "back in a subtransaction"}', 'order-42');
	ROLLBACK TO SAVEPOINT s;
	COMMIT;
	BEGIN;
	SELECT outbox.emit('r.orders', '{"rolled": "back"}', 'order-42');
	SELECT outbox.emit('c.orders', '{"rolled": "back"}');
	ROLLBACK;});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'the committed events are published');

my %id = map { my ($k, $v) = split /\|/; ($k => $v) } split /\n/, $node->safe_psql('postgres',
	q{SELECT payload->>'id', id FROM outbox.events});
my ($created) = $node->safe_psql('postgres',
	q{SELECT extract(epoch FROM date_trunc('second', created_at))::bigint FROM outbox.events WHERE payload->>'id' = '42'});

my $raw = $rabbit->dump_queue('raw-q');
is(scalar @$raw, 2, 'two raw messages: nothing of the rolled-back transaction or subtransaction');
# Order is promised per key only: 42 has a key, 43 none.
my ($m42) = grep { $_->{body} =~ /^\{"id":42,/ } @$raw;
my ($m43) = grep { $_->{body} eq '{"id":43}' } @$raw;
$_ //= {} for $m42, $m43;
is($m42->{body}, '{"id":42,"note":"quote \" and \\\\ backslash"}',
	'the body is the payload as compact JSON');
is($m42->{message_id}, $id{42}, 'message_id is the event id');
is($m42->{type}, 'r.orders', 'type is the topic');
is($m42->{content_type}, 'application/json', 'content_type application/json');
is($m42->{app_id}, 'outbox', 'app_id outbox');
is($m42->{delivery_mode}, 2, 'persistent');
is($m42->{timestamp}, $created, 'timestamp: created_at in seconds');
# A headers table is a map: RabbitMQ 4 hands the fields on in an order of its
# own (3.x keeps the publisher's), so only the names are compared.
is_deeply([ sort @{ $m42->{header_names} || [] } ],
	[ sort 'outbox-id', 'outbox-topic', 'outbox-key', 'X-Tenant', 'traceparent' ],
	'headers: outbox-id, outbox-topic, outbox-key and the user headers RabbitMQ does not act on');
is($m42->{headers}{'outbox-id'}, $id{42}, 'outbox-id is the event id (a forged one is left out)');
is($m42->{headers}{'outbox-key'}, 'order-42', 'outbox-key is the key');
is($m42->{headers}{'X-Tenant'}, 'acme', 'user headers keep their names');
is_deeply([ sort @{ $m43->{header_names} || [] } ], [ 'outbox-id', 'outbox-topic' ], 'no key: no outbox-key');

my $ce = $rabbit->dump_queue('ce-q');
is(scalar @$ce, 1, 'one cloudevents message');
is($ce->[0]{content_type}, 'application/cloudevents+json', 'structured mode content type');
is($ce->[0]{headers}, undef, 'structured mode: no headers table');
is($ce->[0]{message_id}, $id{44}, 'message_id is the event id');
my $event = decode_json($ce->[0]{body});
is($event->{specversion}, '1.0', 'specversion');
is($event->{id}, $id{44}, 'id');
is($event->{source}, '/outbox/shop', 'source');
is($event->{type}, 'c.orders', 'type');
is($event->{partitionkey}, 'order-44', 'partitionkey');
is($event->{region}, 'eu', 'an extension attribute from a user header');
is($event->{outboxheaders}, '{"X-Tenant":"acme"}', 'the other user headers in outboxheaders');
is_deeply($event->{data}, { id => 44 }, 'data is the payload');
like($ce->[0]{body}, qr/^\{"specversion":"1\.0","id":"[^"]+","source":"\/outbox\/shop","type":"c\.orders","time":"[^"]+Z","datacontenttype":"application\/json","partitionkey":"order-44","region":"eu","outboxheaders":"\{\\"X-Tenant\\":\\"acme\\"\}","data":\{"id":44\}\}$/,
	'the structured event byte for byte, in docs/formats.md\'s order');

like($node->safe_psql('postgres', 'SELECT sinks FROM outbox.workers'), qr/rabbit=connected/,
	'outbox.workers shows the sink connected');
my $password = $rabbit->password;
unlike($node->safe_psql('postgres', q{SELECT options::text FROM outbox.sinks WHERE name = 'rabbit'}),
	qr/\Q$password\E/, 'the password is stored as its reference');
my @ours = grep { /outbox: / && !/statement: / } split /\n/, slurp_file($node->logfile);
ok(@ours > 0 && !(grep { /\Q$password\E/ } @ours), 'the password never appears in what outbox logs');

# create_sink() checks the options without connecting: 22023 naming the option.
for my $case ([ '{"hostname": "x"}', qr/unknown option "hostname"/ ],
	[ '{"port": 0}', qr/option "port" must be between 1 and 65535/ ],
	[ '{"tls": true}', qr/option "tls" must be a JSON string/ ],
	[ '{"tls_ca": "/etc/ssl/certs/ca.pem", "tls": "true"}', qr/option "tls_ca" must be the PEM text/ ],
	[ '{"password": {"env": "OUTBOX_TEST_NOT_SET"}}', qr/OUTBOX_TEST_NOT_SET/ ]) {
	my ($options, $want) = @$case;
	my ($rc, $out, $err) = $node->psql('postgres',
		qq{SELECT outbox.create_sink('bad', 'amqp', '$options')}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/22023/, "create_sink refuses $options with 22023");
	like($err, $want, 'naming the option');
}
my ($rc, $out, $err) = $node->psql('postgres',
	q{SELECT outbox.add_route('long.*', 'rabbit', repeat('k', 256))});
like($err, qr/at most 255 bytes/, 'a routing key longer than 255 bytes is refused');

$node->stop;
$rabbit->stop;
done_testing();
