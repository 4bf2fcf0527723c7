# A copy of a database made with CREATE DATABASE ... TEMPLATE carries
# outbox's tables, pending events and sinks. A database owner with CREATEDB
# copied its outbox database 14 times: every background worker went to the
# copies, a new tenant's database got no publisher, and each copy published
# the template's pending events to the real brokers again. Now:
# - a copy publishes nothing: its publisher finds another database's OID in
#   outbox.home, logs a WARNING and gives its worker back (the launcher looks
#   again only when outbox.publish_here() is called there, or after 10
#   minutes);
# - outbox.workers in the copy says why;
# - the template's pending events arrive once, and a tenant database created
#   after eight copies, with 3 background workers to spare, gets a publisher;
# - outbox.publish_here() in a copy makes it publish its own events;
# - outbox.max_databases caps how many databases have publishers: one over
#   it gets a WARNING and waits, and gets its publisher when it is raised.
# - CREATE DATABASE ... OID is refused to roles that are no superuser.
# (A restore runs CREATE EXTENSION and publishes at once: 100, 101.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until);

my $COPIES = 8;
my $redis = OutboxRedis->start();
my $port = $redis->port;
# The launcher, the template's publisher and the tenant's: 3 left over.
my $node = outbox_node('copies', "max_worker_processes = 6\n");
sub sql { my ($db, $q) = @_; return $node->safe_psql($db, $q) }
sub arrived { return $redis->cli('LLEN', 'copied') }

$node->safe_psql('postgres', 'CREATE DATABASE src');
sql('src', 'CREATE EXTENSION outbox');
sql('src', qq{SELECT outbox.create_sink('r', 'redis', '{"port": $port, "mode": "list"}');
	SELECT outbox.add_route('c.*', 'r', 'copied');
	SELECT outbox.pause('c.*');
	SELECT outbox.emit('c.e', jsonb_build_object('n', n), 'k') FROM generate_series(1, 5) n;});

my $offset = -s $node->logfile;
$node->safe_psql('postgres', "CREATE DATABASE copy$_ TEMPLATE src") for 1 .. $COPIES;
# Every copy resumes the route it copied, as the template does: a publisher
# in any copy would now send the template's five events again.
sql("copy$_", q{SELECT outbox.resume('c.*')}) for 1 .. $COPIES;
sql('src', q{SELECT outbox.resume('c.*')});
ok(defined wait_until(sub { sql('src', q{SELECT count(*) FROM outbox.events WHERE status = 'pending'}) eq '0' }),
	"the template publishes its pending events");
# Each copy by name: a probe may say it more than once.
ok(defined wait_until(sub {
	my %said = map { $_ => 1 } slurp_file($node->logfile, $offset) =~
	  /WARNING:  outbox: database "(copy\d+)" is a copy of another database: publishing is paused here/g;
	keys %said >= $COPIES }), 'every copy says in the log that it publishes nothing');
like(sql('copy1', 'SELECT state FROM outbox.workers'), qr/^paused: this database is a copy/,
	'outbox.workers in a copy says why it has no publisher');
# A probe logs the WARNING, then exits: the last one may still be on its way
# out when the test reads the log (longer on a loaded machine). None stays.
my $copy_publishers = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox publisher'
	AND datname LIKE 'copy%'};
ok(defined wait_until(sub { sql('copy1', $copy_publishers) eq '0' }), 'no copy keeps a publisher running')
  or diag('copies with a publisher: ' . sql('copy1', $copy_publishers));

# A tenant's database created after the copies gets a publisher.
$node->safe_psql('postgres', 'CREATE DATABASE tenant');
sql('tenant', 'CREATE EXTENSION outbox');
sql('tenant', qq{SELECT outbox.create_sink('r', 'redis', '{"port": $port, "mode": "list"}');
	SELECT outbox.add_route('t.*', 'r', 'tenant');
	SELECT outbox.emit('t.e', '{}');});
ok(defined wait_until(sub { $redis->cli('LLEN', 'tenant') eq '1' }),
	"a tenant's database created after $COPIES copies gets a publisher");
sleep 2;    # time for any copy's publisher to send what it copied
is(arrived(), '5', "the template's five events arrived once, from the template only");

# publish_here() in one copy: it publishes its own (copied) events.
sql('copy1', 'SELECT outbox.publish_here()');
ok(defined wait_until(sub { arrived() eq '10' }), 'after publish_here() the copy publishes its events');
is(sql('copy1', 'SELECT count(*) FROM outbox.workers WHERE pid IS NOT NULL'), '1',
	'... with a publisher of its own');

# outbox.max_databases: src, tenant and copy1 publish; with a limit of 3,
# a fourth database that asks gets a WARNING and waits.
$node->append_conf('postgresql.conf', "outbox.max_databases = 3\n");
$node->reload;
$offset = -s $node->logfile;
sql('copy2', 'SELECT outbox.publish_here()');
ok(defined wait_until(sub {
	slurp_file($node->logfile, $offset) =~
	  /WARNING:  outbox: no publisher for database "copy2": outbox.max_databases \(3\) databases have publishers already/
}), 'a database over outbox.max_databases is told it waits');
is(arrived(), '10', '... and publishes nothing');
$node->append_conf('postgresql.conf', "outbox.max_databases = 4\n");
$node->reload;
ok(defined wait_until(sub { arrived() eq '15' }), 'raised, the limit lets it publish');

# A role with CREATEDB may not choose a new database's OID (PostgreSQL 15
# lets it): a copy made with the OID of its template, once the template was
# dropped, found its own OID in outbox.home and published the template's
# events again. A superuser may.
$node->safe_psql('postgres', 'CREATE ROLE oid_chooser LOGIN CREATEDB');
my ($rc, $out, $err) = $node->psql('postgres', 'CREATE DATABASE chosen_oid OID 70000',
	extra_params => [ '-U', 'oid_chooser' ]);
isnt($rc, 0, 'CREATE DATABASE ... OID is refused to a role that is no superuser');
like($err, qr/ERROR:  outbox: only a superuser may choose a new database's OID/, '... saying so');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_database WHERE datname = 'chosen_oid'}), '0',
	'... and nothing was made');
$node->safe_psql('postgres', 'CREATE DATABASE chosen_oid OID 70000');
is($node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'chosen_oid'}), '70000',
	'a superuser may');

$node->stop;
$redis->stop;
done_testing();
