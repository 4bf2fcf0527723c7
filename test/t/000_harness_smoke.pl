# Smoke test for the TAP harness and the installed extension: a fresh node with
# outbox preloaded accepts CREATE EXTENSION and records an emitted event as
# pending. If this fails, every other TAP test would fail for the same reason.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('smoke');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'outbox'");
$node->start;

is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'outbox', 'server starts with outbox preloaded');

my ($ret, $stdout, $stderr) = $node->psql('postgres', 'CREATE EXTENSION outbox');
is($ret, 0, 'CREATE EXTENSION outbox succeeds');
unlike($stderr, qr/WARNING/,
	'CREATE EXTENSION warns about nothing when outbox is preloaded');

my $id = $node->safe_psql('postgres',
	q{SELECT outbox.emit('orders.created', '{"a":1}')});
like(
	$id,
	qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
	'emit returns a UUIDv7 event id');

# No route exists, so the publisher must leave the event pending.
is( $node->safe_psql(
		'postgres',
		qq{SELECT topic, payload::text, status FROM outbox.events WHERE id = '$id'}),
	'orders.created|{"a": 1}|pending',
	'the emitted event is stored in outbox.events as pending');

$node->stop;
done_testing();
