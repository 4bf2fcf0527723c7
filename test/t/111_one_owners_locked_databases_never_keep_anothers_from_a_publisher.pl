# A role with CREATEDB keeps ALTER DATABASE ... RENAME of six empty
# databases of its own open in one transaction: the launcher's probes of
# them (a publisher that connects, two at a time) each wait 5 s for the
# lock and fail. An outside review kept both probe places busy this way for
# as long as the transaction stayed open: its two databases with publishers
# made the locked ones wait over its outbox.max_databases_per_owner share,
# each wait gave the database's shared slot back and with it the count of
# its failed probes, so none was ever found failing three times; once those
# two databases closed to connections, their places went to the locked ones,
# probe after probe, and a database a DBA then installed outbox into for
# another tenant got no publisher in 136 s.
#
# Now an owner that is not a superuser has one probe at a time, and the
# failures of a database's probes are remembered when it gives its slot
# back. Proves: with that attack running, another tenant's new database
# with the extension gets a publisher within 30 s, while the renames stay
# open; CREATE DATABASE ... OID is refused to the attacker (its databases
# come after the others in the launcher's order). And after a restart, with
# a second such role and both keeping their databases locked across it
# (prepared renames), the tenant's database gets its publisher within 20 s:
# owners whose probes failed yield the probe places to other owners'.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node wait_until);

my $node = outbox_node('owner_probes',
	"outbox.workers = 1\nmax_worker_processes = 16\nmax_prepared_transactions = 4\n");
sub sql { return $node->safe_psql(@_) }
sql('postgres', q{CREATE ROLE atk LOGIN CREATEDB; CREATE ROLE atk_b LOGIN CREATEDB; CREATE ROLE tenant LOGIN});
# atk's two databases with publishers: its share.
for my $db ('atk1', 'atk2') {
	sql('postgres', "CREATE DATABASE $db OWNER atk");
	sql($db, 'CREATE EXTENSION outbox');
}
ok(defined wait_until(sub { sql('postgres', q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'outbox publisher' AND datname IN ('atk1', 'atk2')}) eq '2' }),
	"atk's two databases have publishers");

my ($rc, $out, $err) = $node->psql('postgres', 'CREATE DATABASE low OID 20000', extra_params => [ '-U', 'atk' ]);
like($err, qr/only a superuser may choose a new database's OID/, 'atk may not choose an OID');

# Six empty databases, renamed in one transaction left open: each keeps its
# lock, and a probe of it waits 5 s and fails.
for my $i (1 .. 6) {
	$node->safe_psql('postgres', "CREATE DATABASE w$i", extra_params => [ '-U', 'atk' ]);
}
# Another such role's six, older than the tenant's database too (below).
for my $i (1 .. 6) {
	$node->safe_psql('postgres', "CREATE DATABASE z$i", extra_params => [ '-U', 'atk_b' ]);
}
my $holder = $node->background_psql('postgres', extra_params => [ '-U', 'atk' ]);
$holder->query_safe('BEGIN');
$holder->query_safe("ALTER DATABASE w$_ RENAME TO x$_") for 1 .. 6;
# Its two databases close: their places go, and the locked ones are probed.
sql('postgres', "ALTER DATABASE $_ ALLOW_CONNECTIONS false") for 'atk1', 'atk2';
ok(defined wait_until(sub { sql('postgres', q{SELECT count(*) FROM pg_locks
	WHERE locktype = 'object' AND classid = 'pg_database'::regclass AND NOT granted}) ne '0' }),
	"probes wait for atk's locked databases");
sleep 12;    # a few rounds of failed probes

sql('postgres', 'CREATE DATABASE shop OWNER tenant');
sql('shop', 'CREATE EXTENSION outbox');
my $took = wait_until(sub {
	sql('shop', q{SELECT count(*) FROM outbox.workers WHERE pid IS NOT NULL}) eq '1' }, 30);
ok(defined $took, "another tenant's new database gets a publisher within 30 s while atk's locks stay");
note('after ' . ($took // 'more than 30') . ' s');
is(sql('postgres', q{SELECT count(*) FROM pg_stat_activity
	WHERE usename = 'atk' AND state = 'idle in transaction'}), '1', "atk's renames were still open");

$holder->query_safe('ROLLBACK');
$holder->quit;

# After a restart every database is probed again. Both roles keep their six
# locked across it (prepared renames): their older databases came first, one
# probe place each, probe after failing probe, and the tenant's database
# waited 35 to 120 s for one. An owner whose probes failed now yields the
# places to other owners' databases.
for my $who ([ 'atk', 'w' ], [ 'atk_b', 'z' ]) {
	my ($role, $prefix) = @$who;
	$node->safe_psql('postgres', 'BEGIN; '
		. join('', map { "ALTER DATABASE $prefix$_ RENAME TO r$prefix$_; " } 1 .. 6)
		. "PREPARE TRANSACTION 'hold_$role'", extra_params => [ '-U', $role ]);
}
$node->restart;
$took = wait_until(sub {
	sql('shop', q{SELECT count(*) FROM outbox.workers WHERE pid IS NOT NULL}) eq '1' }, 20);
ok(defined $took, "after a restart, the tenant's database gets its publisher within 20 s while "
	. 'two roles keep theirs locked');
note('after ' . ($took // 'more than 20') . ' s');
is(sql('postgres', q{SELECT count(*) FROM pg_prepared_xacts}), '2', 'both renames were still prepared');
sql('postgres', "ROLLBACK PREPARED 'hold_$_'") for 'atk', 'atk_b';
$node->stop;
done_testing();
