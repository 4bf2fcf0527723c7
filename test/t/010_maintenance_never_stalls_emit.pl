# Dropping a partition needs AccessExclusive on outbox.events. While a
# transaction that emitted is open, maintenance must give up after
# outbox.maintenance_lock_timeout (and retry later) instead of waiting, so
# emit() is never queued behind it for longer than that. Each time it gives
# up it names the sessions that hold the tables: to a maintain() caller in a
# NOTICE, and in the server log when the publisher's own maintenance does.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);
use FindBin;
use lib "$FindBin::RealBin/../lib";
use OutboxNode qw(timed wait_until);

my $node = PostgreSQL::Test::Cluster->new('maintenance');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'outbox'");
# The publisher maintains partitions at its start, whenever that is: until a
# transaction holds the tables, retention keeps 2020 so that it cannot drop
# the partitions this test makes before the test looks at them.
$node->append_conf('postgresql.conf', "outbox.retention = '100 years'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');

# Old, empty partitions that retention wants gone. outbox.maintain() skips
# its run while the publisher's own maintenance at its start runs, and a
# step gives up after outbox.maintenance_lock_timeout while that holds the
# tables (longer than 100 ms on a loaded machine): called until they exist.
my $old = q{SELECT count(*) FROM outbox.partitions WHERE range_start < '2021-01-01'};
wait_until(sub {
	$node->safe_psql('postgres', "SELECT outbox.maintain('2020-01-01 00:00+00')");
	$node->safe_psql('postgres', $old) eq '4' });
is($node->safe_psql('postgres', $old), '4', 'partitions of 2020 exist');

# A business transaction that emitted and stays open.
my $open_tx = $node->background_psql('postgres');
$open_tx->query_safe('BEGIN');
$open_tx->query_safe(q{SELECT outbox.emit('orders.created', '{"n": 1}')});
my $holder = $open_tx->query_safe('SELECT pg_backend_pid()');
$holder =~ s/\s+//g;

# From here on, retention wants 2020 gone (the default: 7 days).
$node->append_conf('postgresql.conf', "outbox.retention = '7 days'");
$node->reload;

# Maintenance returns quickly, with a NOTICE, and keeps the partitions. Were
# it to wait for the lock, it would wait as long as the transaction stays
# open: here for ever. (Times are the server's: OutboxNode::timed.) Should
# the publisher's own maintenance run just then, this one says so and skips:
# asked again.
my ($elapsed, $stderr);
for (1 .. 50) {
	($elapsed, undef, $stderr) = timed($node, 'SELECT outbox.maintain()',
		settings => ["SET outbox.maintenance_lock_timeout = '200ms'"]);
	last unless $stderr =~ /another maintenance is running/;
	sleep 0.2;
}
unlike($stderr, qr/ERROR/, 'maintenance does not fail') or diag $stderr;
cmp_ok($elapsed, '<', 5, "maintenance gave up after its lock timeout (${elapsed}s)");
like($stderr, qr/could not drop partition outbox\.events_p2020\d{4} within outbox\.maintenance_lock_timeout/,
	'the NOTICE says which partition waits for the next run');
like($stderr, qr/DETAIL:  Sessions holding locks on outbox\.events or its partitions: .*pid $holder \(idle in transaction\)/,
	'and names the session that holds the tables');

# The publisher's maintenance (at its start, then every minute) says the
# same in the server log, where a DBA reads it. It runs as outbox_writer,
# which may not see other roles' session states: the pid is named.
my $publisher = $node->safe_psql('postgres', q{SELECT pid FROM outbox.workers WHERE database = 'postgres'});
like($publisher, qr/^\d+$/, 'a publisher runs');
my $offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($publisher)");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.workers WHERE database = 'postgres' AND pid <> $publisher"),
	'the launcher starts a new publisher');
my $logged = 0;
my $tries = 10 * $PostgreSQL::Test::Utils::timeout_default;
for (1 .. $tries) {
	last if $logged = slurp_file($node->logfile, $offset) =~
	  /LOG:  outbox: could not drop partition outbox\.events_p2020\d{4} within outbox\.maintenance_lock_timeout.*\n.*DETAIL:  Sessions holding locks on outbox\.events or its partitions: .*pid $holder\b/;
	sleep 0.1 if $_ < $tries;
}
ok($logged, "the publisher's maintenance logs the partition it could not drop and who holds it");
is($node->safe_psql('postgres', $old), '4', 'no partition was dropped while the lock was held');

# emit() from another session goes through while the transaction is open.
my $emitted;
($elapsed, $emitted, $stderr) = timed($node, q{SELECT outbox.emit('orders.created', '{"n": 2}')});
like($emitted, qr/^[0-9a-f-]{36}$/m, 'emit() returned its id') or diag $stderr;
cmp_ok($elapsed, '<', 5, "emit() is not queued behind maintenance (${elapsed}s)");

# Once the transaction commits, the next run drops them.
$open_tx->query_safe('COMMIT');
$open_tx->quit;
$node->safe_psql('postgres', 'SELECT outbox.maintain()');
is($node->safe_psql('postgres', $old), '0', 'the next maintenance dropped the old partitions');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'orders.created'}),
	'2', 'both committed events are kept');

$node->stop;
done_testing();
