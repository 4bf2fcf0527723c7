# A role with CREATEDB that leaves ALTER DATABASE ... RENAME of its own
# databases open in two transactions (PostgreSQL allows it in a transaction
# block; it holds the database's lock until commit) cannot keep publishing
# from starting anywhere else. The launcher probes a database it knows
# nothing about with a publisher that connects to it, two at a time; those
# probes waited for the renamed databases' locks for as long as the
# transactions stayed open, and a new tenant's database, with the extension
# just created, got no publisher in all that time. Now a publisher waits at
# most 5 s to connect: the probes fail, the launcher backs off from those
# two databases and probes the others.
#
# Proves: with both renames open and the launcher restarted (so that it
# probes every database again, the locked ones included, and its two probes
# wait on their locks), a database created afterwards with the extension
# gets a publisher well before the renames end; once they end, nothing is
# left waiting. The same when the probes connected and wait on
# pg_extension, whose lock a database owner holds in its own database
# (ANALYZE open, VACUUM FULL queued behind it).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node wait_until);

my $node = outbox_node('locked_dbs', "outbox.workers = 1\n");
$node->safe_psql('postgres', q{CREATE ROLE tenant LOGIN CREATEDB});
for my $db ('mine1', 'mine2') {
	$node->safe_psql('postgres', "CREATE DATABASE $db OWNER tenant");
}

# Both renames open, each holding its database's lock.
my @renames;
for my $i (1, 2) {
	my $s = $node->background_psql('postgres', extra_params => [ '-U', 'tenant' ]);
	$s->query_safe('BEGIN');
	$s->query_safe("ALTER DATABASE mine$i RENAME TO held$i");
	push @renames, $s;
}
pass('tenant holds ALTER DATABASE ... RENAME of both its databases open');

# A new launcher knows nothing: it probes every database again.
my $launcher = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox launcher'});
like($launcher, qr/^\d+$/, 'a launcher runs');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($launcher)");
# Its two probes wait for the renamed databases' locks.
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM pg_locks
		WHERE locktype = 'object' AND classid = 'pg_database'::regclass AND NOT granted}) eq '2' }),
	"the new launcher's probes wait for the two renamed databases");

# A new tenant's database with the extension.
$node->safe_psql('postgres', 'CREATE DATABASE shop');
$node->safe_psql('shop', 'CREATE EXTENSION outbox');
my $waited = wait_until(sub {
	$node->safe_psql('shop', q{SELECT count(*) FROM outbox.workers WHERE pid IS NOT NULL}) eq '1' }, 60);
ok(defined $waited, 'the new database gets a publisher while the renames stay open')
  or diag $node->safe_psql('postgres', q{SELECT pid, datname, wait_event_type, wait_event, backend_type
	FROM pg_stat_activity WHERE backend_type LIKE 'outbox%'});
like(slurp_file($node->logfile), qr/canceling statement due to lock timeout/,
	'a probe gave up waiting for a renamed database (the log says so)');

# The renames end (rolled back): nothing waits any more.
$_->query_safe('ROLLBACK') for @renames;
$_->quit for @renames;
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM pg_locks
		WHERE locktype = 'object' AND classid = 'pg_database'::regclass AND NOT granted}) eq '0' }),
	'no lock request waits once they end');

# The same once connected: in two more databases of its own, the owner
# holds ANALYZE of pg_extension open and queues VACUUM FULL of it behind
# (PostgreSQL lets a database owner do both to its own catalogs), so that a
# probe that connected waits on its first look at pg_extension. That look's
# lock wait is bounded as the connection's is: the probe leaves.
my @holds;
for my $db ('mine3', 'mine4') {
	$node->safe_psql('postgres', "CREATE DATABASE $db OWNER tenant");
	my $analyze = $node->background_psql($db, extra_params => [ '-U', 'tenant' ]);
	$analyze->query_safe('BEGIN');
	$analyze->query_safe('ANALYZE pg_catalog.pg_extension');
	my $vacuum = $node->background_psql($db, extra_params => [ '-U', 'tenant' ]);
	$vacuum->query_until(qr/queued/, "\\echo queued\nVACUUM FULL pg_catalog.pg_extension;\n");
	push @holds, $analyze, $vacuum;
}
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		WHERE d.datname IN ('mine3', 'mine4') AND l.relation = 'pg_catalog.pg_extension'::regclass
		  AND l.mode = 'AccessExclusiveLock' AND NOT l.granted}) eq '2' }),
	'VACUUM FULL of pg_extension waits in both databases');
$launcher = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox launcher'});
my $offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($launcher)");
$node->safe_psql('postgres', 'CREATE DATABASE shop2');
$node->safe_psql('shop2', 'CREATE EXTENSION outbox');
ok(defined wait_until(sub {
	$node->safe_psql('shop2', q{SELECT count(*) FROM outbox.workers WHERE pid IS NOT NULL}) eq '1' }, 60),
	'another new database gets a publisher while the catalogs stay locked')
  or diag $node->safe_psql('postgres', q{SELECT pid, datname, wait_event_type, wait_event, query
	FROM pg_stat_activity WHERE backend_type LIKE 'outbox%'});
# The launcher probes databases superusers own first: shop2's publisher may
# start before the probes of mine3 and mine4 have waited their 5 s.
ok(defined wait_until(sub {
	slurp_file($node->logfile, $offset) =~ /could not find out within 5s whether database "mine[34]" has the extension/ }, 60),
	'a probe that connected left, saying why');
$_->quit for @holds;

$node->stop;
done_testing();
