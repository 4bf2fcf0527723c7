# outbox's tables belong to role outbox_writer (src/catalog/writer_role.cpp), shared
# by every database of a cluster. Proves:
# - two databases with outbox share the one role; dropping the extension in
#   one leaves the other's tables and publishing alone, and the role stays;
#   with the extension dropped everywhere, DROP ROLE outbox_writer works
#   (docs/security.md);
# - a dump restores into a cluster that has no such role (CREATE EXTENSION
#   in the dump makes it), with pg_restore, with --no-owner (the partitions
#   are then the restoring role's until the publisher's maintenance gives
#   them to outbox_writer), and after `pg_dumpall --globals-only` was
#   restored first (the role it makes is taken): no error, every table and
#   partition outbox_writer's, the pending events delivered.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node wait_until);
use OutboxRedis;

my $redis = OutboxRedis->start();
my $port = $redis->port;
my $not_writers = q{SELECT count(*) FROM pg_class
	WHERE relnamespace = 'outbox'::regnamespace AND relkind IN ('r', 'p', 'v')
	  AND relowner <> 'outbox_writer'::regrole};
my $unpublished = q{SELECT count(*) FROM outbox.events WHERE status <> 'published'};

# Two databases, one role.
my $node = outbox_node('writer_source');
for my $db ('one', 'two') {
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
		CREATE EXTENSION outbox;
		SELECT outbox.create_sink('redis', 'redis', '{"port": $port}');
		SELECT outbox.add_route('orders.*', 'redis', '$db');});
	is($node->safe_psql($db, $not_writers), '0', "$db: every table and partition is outbox_writer's");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_roles WHERE rolname = 'outbox_writer'}), '1',
	'both databases share one outbox_writer');
$node->safe_psql($_, q{SELECT outbox.emit('orders.a', '{}', 'k') FROM generate_series(1, 5)}) for ('one', 'two');
ok(defined wait_until(sub { $redis->cli('XLEN', 'one') eq '5' && $redis->cli('XLEN', 'two') eq '5' }),
	'both databases publish');
$node->safe_psql('one', 'DROP EXTENSION outbox');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_roles WHERE rolname = 'outbox_writer'}), '1',
	'DROP EXTENSION in one database leaves the role');
$node->safe_psql('two', q{SELECT outbox.emit('orders.a', '{}', 'k') FROM generate_series(1, 5)});
ok(defined wait_until(sub { $redis->cli('XLEN', 'two') eq '10' }), 'and the other database publishing');
is($node->safe_psql('two', $not_writers), '0', "with its tables still outbox_writer's");

# The source to dump: pending events on a paused route, a partition ahead.
$node->safe_psql('two', q{
	SELECT outbox.pause('orders.*');
	SELECT outbox.emit('orders.b', pg_catalog.jsonb_build_object('i', i), 'k' || (i % 3))
	  FROM pg_catalog.generate_series(1, 12) i;
	SELECT outbox.maintain(now() + interval '3 days');});
my $dir = PostgreSQL::Test::Utils::tempdir;
my @src = ('-h', $node->host, '-p', $node->port);
my ($out, $err) = ('', '');
ok(IPC::Run::run([ 'pg_dump', @src, '-Fc', '-f', "$dir/two.dump", 'two' ], '>', \$out, '2>', \$err),
	'pg_dump') or diag $err;
ok(IPC::Run::run([ 'pg_dumpall', @src, '--globals-only', '-f', "$dir/globals.sql" ], '>', \$out, '2>',
	\$err), 'pg_dumpall --globals-only') or diag $err;
like(slurp_file("$dir/globals.sql"), qr/CREATE ROLE outbox_writer/, 'the globals hold outbox_writer');

# With the extension gone everywhere, the role can be dropped.
$node->safe_psql('two', 'DROP EXTENSION outbox');
$node->safe_psql('postgres', 'DROP ROLE outbox_writer');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_roles WHERE rolname = 'outbox_writer'}), '0',
	'DROP ROLE outbox_writer works once no database has outbox');
$node->stop;

my %restores = (
	plain_restore => { options => [] },
	no_owner => { options => ['--no-owner'] },
	globals_first => { options => [], globals => 1 },
);
for my $name (sort keys %restores) {
	my $case = $restores{$name};
	my $target = outbox_node("writer_$name");
	my @dst = ('-h', $target->host, '-p', $target->port);
	is($target->safe_psql('postgres', q{SELECT count(*) FROM pg_roles WHERE rolname = 'outbox_writer'}),
		'0', "$name: the cluster has no outbox_writer");
	if ($case->{globals}) {
		($out, $err) = ('', '');
		IPC::Run::run([ 'psql', @dst, '-X', '-q', '-d', 'postgres', '-f', "$dir/globals.sql" ],
			'>', \$out, '2>', \$err);
		is($target->safe_psql('postgres',
			q{SELECT rolcanlogin::text || rolsuper::text FROM pg_roles WHERE rolname = 'outbox_writer'}),
			'falsefalse', "$name: pg_dumpall's globals made it");
	}
	$target->safe_psql('postgres', 'CREATE DATABASE two');
	($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'pg_restore', @dst, '--exit-on-error', @{ $case->{options} }, '-d', 'two',
			"$dir/two.dump" ], '>', \$out, '2>', \$err);
	ok($ok, "$name: pg_restore succeeds") or diag $err;
	unlike($err, qr/ERROR|error:/, "$name: and reports no error");
	ok(defined wait_until(sub { $target->safe_psql('two', $not_writers) eq '0' }),
		"$name: every table and partition is outbox_writer's");
	is($target->safe_psql('postgres', q{SELECT rolcanlogin::text || rolsuper::text
		FROM pg_roles WHERE rolname = 'outbox_writer'}), 'falsefalse', "$name: a role that never logs in");
	$target->safe_psql('two', q{SELECT outbox.resume('orders.*')});
	ok(defined wait_until(sub { $target->safe_psql('two', $unpublished) eq '0' }),
		"$name: every pending event is delivered");
	unlike(slurp_file($target->logfile), qr/terminated by signal/, "$name: no server process crashed");
	$target->stop;
}
$redis->stop;
done_testing();
