# Without shared_preload_libraries, CREATE EXTENSION warns that nothing will
# be published, and emit() still stores events as pending.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('no_preload');
$node->init;
$node->start;

my ($stdout, $stderr);
$node->psql('postgres', 'CREATE EXTENSION outbox', stdout => \$stdout, stderr => \$stderr,
	on_error_die => 1);
like($stderr, qr/WARNING:  outbox is not in shared_preload_libraries: events are stored but not published/,
	'CREATE EXTENSION warns that the publisher cannot run');
is($node->safe_psql('postgres', 'SELECT outbox.publisher_preloaded()'), 'f', 'not preloaded');

$node->safe_psql('postgres', q{SELECT outbox.emit('orders.created', '{"id": 7}', 'k')});
is($node->safe_psql('postgres', q{SELECT status FROM outbox.events WHERE topic = 'orders.created'}),
	'pending', 'emit() works and the event waits as pending');

# With the library preloaded after a restart, no warning on a fresh install.
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'outbox'");
$node->restart;
$node->safe_psql('postgres', 'CREATE DATABASE second');
$node->psql('second', 'CREATE EXTENSION outbox', stderr => \$stderr, on_error_die => 1);
unlike($stderr, qr/WARNING/, 'no warning once outbox is preloaded');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'pending'}),
	'1', 'the pending event survived the restart');

$node->stop;
done_testing();
