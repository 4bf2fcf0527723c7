# A database owner (untrusted, contract's security model) cannot change how
# the publisher runs through ALTER DATABASE ... SET. The publisher pinned
# search_path, isolation, timeouts and session_replication_role, but not
# `role`: an owner's `ALTER DATABASE ... SET role = <unprivileged role>`
# made every publisher of that database start as that role, and every cycle
# failed with "permission denied". The workers now put every
# setting a database owner can choose back to its default at start
# (worker_session.cpp), and publishing goes on. Tried with `role` and with
# `session_authorization` (whose default is the session's own user).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until);

my $redis = OutboxRedis->start();
my $node = outbox_node('setrole', '');
$node->safe_psql('postgres', 'CREATE ROLE tenant LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE');
$node->safe_psql('postgres', 'CREATE DATABASE shop OWNER tenant');
$node->safe_psql('shop', 'CREATE EXTENSION outbox');
$node->safe_psql('shop', "SELECT outbox.create_sink('r', 'redis', '{\"port\": " . $redis->port . "}')");
$node->safe_psql('shop', q{SELECT outbox.add_route('*', 'r')});
$node->safe_psql('shop', 'GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO tenant');
# SET ROLE NONE: the test's own (superuser) sessions get the database's role
# setting too once it is set.
my $unpub = sub { $node->safe_psql('shop', "SET SESSION AUTHORIZATION DEFAULT; SET ROLE NONE; SELECT count(*) FROM outbox.events WHERE status <> 'published'") };
$node->safe_psql('shop', q{SELECT outbox.emit('t', '{"a":1}')});
ok(defined wait_until(sub { $unpub->() eq '0' }), 'publishing works');

# The database owner, no superuser, sets who sessions of its database are,
# then restarts the server (as its publishers would restart for any reason).
for my $setting (q{role = 'tenant'}, q{session_authorization = 'tenant'}) {
	my ($rc, $out, $err) = $node->psql('shop', "ALTER DATABASE shop SET $setting",
		extra_params => [ '-U', 'tenant' ]);
	is($rc, 0, "the database owner may ALTER DATABASE shop SET $setting") or diag($err);
	$node->restart;
	my $off = -s $node->logfile;
	$node->safe_psql('shop', q{SELECT outbox.emit('t', '{"a":2}')}, extra_params => [ '-U', 'tenant' ]);
	my $t = time();
	my $w = wait_until(sub { $unpub->() eq '0' });
	ok(defined $w, sprintf('with %s, an event emitted after a restart is published (waited %.1f s)',
		$setting, time() - $t));
	my @denied = slurp_file($node->logfile, $off) =~ /(.*outbox.*permission denied.*)/g;
	is(scalar(@denied), 0, "with $setting, no publisher error says permission denied")
	  or diag(join("\n", @denied[0 .. ($#denied < 2 ? $#denied : 2)]));
	$node->safe_psql('postgres', 'ALTER DATABASE shop RESET ALL');
}

$node->stop;
$redis->stop;
done_testing();
