# Dropping a partition needs AccessExclusive on outbox.events. While a
# transaction that emitted is open, maintenance must give up after
# outbox.maintenance_lock_timeout (and retry later) instead of waiting, so
# emit() is never queued behind it for longer than that.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('maintenance');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'outbox'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');

# Old, empty partitions that retention wants gone.
$node->safe_psql('postgres', "SELECT outbox.maintain('2020-01-01 00:00+00')");
my $old = q{SELECT count(*) FROM outbox.partitions WHERE range_start < '2021-01-01'};
is($node->safe_psql('postgres', $old), '4', 'partitions of 2020 exist');

# A business transaction that emitted and stays open.
my $open_tx = $node->background_psql('postgres');
$open_tx->query_safe('BEGIN');
$open_tx->query_safe(q{SELECT outbox.emit('orders.created', '{"n": 1}')});

# The seconds a statement takes by the server's clock, from just before it to
# just after it in one session (psql's start-up, seconds on a loaded machine,
# is no part of it); its stderr goes where $stderr (a reference) points.
sub timed {
	my ($sql, $stderr) = @_;
	my $out;
	$node->psql('postgres', "SELECT clock_timestamp() AS t0 \\gset\n$sql;\n"
		  . "SELECT extract(epoch FROM clock_timestamp() - :'t0'::timestamptz);",
		stdout => \$out, stderr => $stderr, on_error_die => 1);
	return (split /\n/, $out)[-1];
}

# Maintenance returns quickly, with a NOTICE, and keeps the partitions. Were
# it to wait for the lock, it would wait as long as the transaction stays
# open: here for ever.
my $stderr;
my $elapsed = timed("SET outbox.maintenance_lock_timeout = '200ms';\nSELECT outbox.maintain()", \$stderr);
cmp_ok($elapsed, '<', 5, "maintenance gave up after its lock timeout (${elapsed}s)");
like($stderr, qr/could not drop partition outbox\.events_p2020\d{4} within outbox\.maintenance_lock_timeout/,
	'the NOTICE says which partition waits for the next run');
is($node->safe_psql('postgres', $old), '4', 'no partition was dropped while the lock was held');

# emit() from another session goes through while the transaction is open.
$elapsed = timed(q{SELECT outbox.emit('orders.created', '{"n": 2}')}, \my $ignored);
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
