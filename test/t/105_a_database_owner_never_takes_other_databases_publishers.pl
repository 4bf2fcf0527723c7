# A role with CREATEDB that owns the extension in its database ("mallory")
# copies that database and calls outbox.publish_here() in every copy (she
# owns the extension there too). Before, her copies took the publishers:
# with outbox.max_databases set, a copy waiting over the limit took the
# place of a DBA's database whose publisher was terminated (or stepped
# aside for a copy of it) and was restarting; after a server restart the
# places went in pg_database's heap order, so her copies took them all and
# the DBA's databases, later in the heap after an ALTER DATABASE, got none
# (and no WARNING named them); without the limit her copies took every
# background worker, and a new tenant got no publisher. Now:
# - outbox.max_databases_per_owner (default 2) bounds the databases with
#   publishers of each owner that is not a superuser; the others get a
#   WARNING naming the owner and the setting;
# - a database that had a publisher keeps its place while it restarts or
#   steps aside: nothing waiting takes it;
# - places go to databases superusers own first, then the others, oldest
#   first; databases left unchecked at the limit are named in a WARNING;
# - copies waiting over a limit hold no shared slot, so a new tenant's
#   CREATE EXTENSION finds one.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until);

my $redis = OutboxRedis->start();
my $port = $redis->port;
my $node = outbox_node('owners', "max_worker_processes = 12\n");
sub sql { my ($db, $q, @as) = @_; return $node->safe_psql($db, $q, @as ? (extra_params => [ '-U', $as[0] ]) : ()) }
sub sink_sql {
	my ($list) = @_;
	return qq{SELECT outbox.create_sink('r', 'redis', '{"port": $port, "mode": "list"}');
		SELECT outbox.add_route('*', 'r', '$list');};
}
sub publishers {
	return sql('postgres', q{SELECT coalesce(string_agg(DISTINCT datname, ',' ORDER BY datname), '')
		FROM pg_stat_activity WHERE backend_type = 'outbox publisher'});
}
sub publishing_of {
	my ($owner) = @_;
	return sql('postgres', qq{SELECT count(DISTINCT a.datname) FROM pg_stat_activity a
		JOIN pg_database d ON d.datname = a.datname JOIN pg_roles r ON r.oid = d.datdba
		WHERE a.backend_type = 'outbox publisher' AND r.rolname = '$owner'});
}
sub mallorys_publishing { return publishing_of('mallory') }
sub set_conf {
	$node->append_conf('postgresql.conf', join('', map { "$_\n" } @_));
	$node->reload;
	sleep 1;
}
# An event emitted in $db reaches Redis list $list (whose length grows by one).
sub delivers {
	my ($db, $list) = @_;
	my $before = $redis->cli('LLEN', $list);
	sql($db, q{SELECT outbox.emit('e', '{}')});
	return defined wait_until(sub { $redis->cli('LLEN', $list) > $before }, 30);
}

sql('postgres', q{CREATE ROLE admin LOGIN SUPERUSER; CREATE ROLE mallory LOGIN CREATEDB NOSUPERUSER;});
sql('postgres', 'CREATE DATABASE tenant_a');
sql('tenant_a', 'CREATE EXTENSION outbox');
sql('tenant_a', sink_sql('a'));
# mallory's database: installed by a superuser made for it, then handed over.
sql('postgres', 'CREATE DATABASE mdb OWNER mallory');
sql('mdb', 'CREATE EXTENSION outbox', 'admin');
sql('mdb', sink_sql('m'), 'admin');
sql('mdb', 'REASSIGN OWNED BY admin TO mallory');
sql('postgres', 'DROP ROLE admin');
ok(delivers('tenant_a', 'a'), 'tenant_a publishes');
ok(delivers('mdb', 'm'), "mallory's database publishes");

# 1. Her copies, each switched on: at most max_databases_per_owner (2) of
# her databases have publishers.
my $offset = -s $node->logfile;
for my $i (1 .. 4) {
	sql('postgres', "CREATE DATABASE mc$i TEMPLATE mdb", 'mallory');
	sql("mc$i", 'SELECT outbox.publish_here()', 'mallory');
}
ok(defined wait_until(sub {
	slurp_file($node->logfile, $offset) =~
	  /WARNING:  outbox: no publisher for database "mc\d": its owner mallory has outbox.max_databases_per_owner \(2\) databases with publishers already/
}), "a copy over mallory's share is told why it waits");
sleep 3;
is(mallorys_publishing(), '2', 'two of her five databases have publishers, no more')
  or diag('publishers: ' . publishers());
ok(delivers('tenant_a', 'a'), 'tenant_a still publishes');

# 2. With outbox.max_databases full, a database of hers waiting over it
# never takes tenant_a's place while its publisher restarts. The limit is
# raised by one for a new tenant of the DBA's: the place goes to it.
set_conf('outbox.max_databases = 3', 'outbox.max_databases_per_owner = 0');
sql('postgres', 'CREATE DATABASE tenant_new');
sql('tenant_new', 'CREATE EXTENSION outbox');
sql('tenant_new', sink_sql('n'));
set_conf('outbox.max_databases = 4');
ok(delivers('tenant_new', 'n'), "the place the raised limit makes goes to the DBA's new tenant");
ok(defined wait_until(sub { publishers() =~ /tenant_a/ && publishers() =~ /tenant_new/
	  && mallorys_publishing() eq '2' }), 'four databases publish: the limit is full')
  or diag('publishers: ' . publishers());
for my $round (1 .. 3) {
	sql('postgres', q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE backend_type = 'outbox publisher' AND datname = 'tenant_a'});
	ok(defined wait_until(sub { publishers() =~ /tenant_a/ }, 30),
		"round $round: tenant_a's terminated publisher is back");
	sleep 2;
	is(mallorys_publishing(), '2', "round $round: none of her waiting databases took its place")
	  or diag('publishers: ' . publishers());
}
# A copy of tenant_a by the DBA: its publisher steps aside and comes back.
sql('postgres', 'CREATE DATABASE tenant_a_snap TEMPLATE tenant_a');
ok(defined wait_until(sub { publishers() =~ /tenant_a(,|$)/ }, 30),
	"tenant_a publishes again after the DBA's copy of it");
sleep 2;
is(mallorys_publishing(), '2', 'none of hers took its place meanwhile');
ok(delivers('tenant_a', 'a'), 'tenant_a delivers');

# 3. A restart with tenant_a's and tenant_new's rows moved to the end of
# pg_database's heap: the DBA's databases get their places first.
sql('postgres', 'ALTER DATABASE tenant_a CONNECTION LIMIT 100; ALTER DATABASE tenant_new CONNECTION LIMIT 100');
$offset = -s $node->logfile;
$node->restart;
ok(defined wait_until(sub { publishers() =~ /tenant_a/ && publishers() =~ /tenant_new/ }, 30),
	"after a restart the DBA's databases have publishers")
  or diag('publishers: ' . publishers());
ok(delivers('tenant_a', 'a') && delivers('tenant_new', 'n'), '... and deliver');
ok(defined wait_until(sub {
	slurp_file($node->logfile, $offset) =~
	  /WARNING:  outbox: \d+ databases? not checked for the extension: outbox.max_databases \(4\) databases have publishers already/
}), 'the databases left unchecked at the limit are told of in the log');

# 4. No outbox.max_databases, the default share per owner, and more of her
# copies switched on than there are background workers: a new tenant's
# database still gets a publisher.
set_conf('outbox.max_databases = 0', 'outbox.max_databases_per_owner = 2');
for my $i (5 .. 12) {
	sql('postgres', "CREATE DATABASE mc$i TEMPLATE mdb", 'mallory');
	sql("mc$i", 'SELECT outbox.publish_here()', 'mallory');
}
sleep 3;
is(mallorys_publishing(), '2', 'with her twelve copies switched on, two of her databases publish')
  or diag('publishers: ' . publishers());
sql('postgres', 'CREATE DATABASE tenant_z');
sql('tenant_z', 'CREATE EXTENSION outbox');
sql('tenant_z', sink_sql('z'));
ok(delivers('tenant_z', 'z'), 'a tenant created after them gets a publisher');
is(sql('tenant_a', q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}), '0',
	"tenant_a's events are all published");

# 5. She gives her databases that publish to a role she is a member of
# (ALTER DATABASE ... OWNER TO needs only that and CREATEDB), so that her
# share frees up for more copies; and again. A place counts against the
# database's owner now: one given to an owner over its share stops.
sql('postgres', 'CREATE ROLE games NOLOGIN; GRANT games TO mallory');
for my $round (1 .. 3) {
	for my $db (split /\n/, sql('postgres', q{SELECT DISTINCT a.datname FROM pg_stat_activity a
		JOIN pg_database d ON d.datname = a.datname JOIN pg_roles r ON r.oid = d.datdba
		WHERE a.backend_type = 'outbox publisher' AND r.rolname = 'mallory'})) {
		sql('postgres', "ALTER DATABASE $db OWNER TO games", 'mallory');
	}
	sleep 4;
}
sleep 6;
cmp_ok(publishing_of('games'), '<=', 2, 'the role she gave them to has at most its share of databases publishing')
  or diag('publishers: ' . publishers());
cmp_ok(publishing_of('mallory'), '<=', 2, '... and so has she');
ok(delivers('tenant_z', 'z'), 'the tenant still publishes');

# 6. One of hers made a template leaves the launcher's list: its publishers
# stop rather than run uncounted while another copy takes her share; made
# an ordinary database again, her share still holds.
my ($hidden) = split /\n/, sql('postgres', q{SELECT DISTINCT a.datname FROM pg_stat_activity a
	JOIN pg_database d ON d.datname = a.datname JOIN pg_roles r ON r.oid = d.datdba
	WHERE a.backend_type = 'outbox publisher' AND r.rolname IN ('mallory', 'games') ORDER BY 1});
sql('postgres', "ALTER DATABASE $hidden WITH IS_TEMPLATE true", 'mallory');
ok(defined wait_until(sub {
	sql('postgres', qq{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox publisher'
		AND datname = '$hidden'}) eq '0' }, 30),
	'a database she makes a template loses its publishers');
sleep 6;
sql('postgres', "ALTER DATABASE $hidden WITH IS_TEMPLATE false", 'mallory');
sleep 8;
cmp_ok(publishing_of('games'), '<=', 2, 'made ordinary again, the shares still hold (games)');
cmp_ok(publishing_of('mallory'), '<=', 2, '... (mallory)');

$node->stop;
$redis->stop;
done_testing();
