# A database owner (untrusted, contract's security model) cannot change how
# the publisher runs through ALTER DATABASE ... SET. The publisher pinned
# search_path, isolation, timeouts and session_replication_role, but not
# `role`: an owner's `ALTER DATABASE ... SET role = <unprivileged role>`
# made every publisher of that database start as that role, and every cycle
# failed with "permission denied" (red team). The workers now put every
# setting a database owner can choose back to its default at start
# (worker_session.cpp), and publishing goes on.
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
my $unpub = sub { $node->safe_psql('shop', "SET ROLE NONE; SELECT count(*) FROM outbox.events WHERE status <> 'published'") };
$node->safe_psql('shop', q{SELECT outbox.emit('t', '{"a":1}')});
ok(defined wait_until(sub { $unpub->() eq '0' }, 30), 'publishing works');

# The database owner, no superuser.
my ($rc, $out, $err) = $node->psql('shop', q{ALTER DATABASE shop SET role = 'tenant'},
	extra_params => [ '-U', 'tenant' ]);
is($rc, 0, 'the database owner may ALTER DATABASE shop SET role') or diag($err);
# The owner's way to restart the publishers (TAP 951): RENAME to the same
# name is refused, after the guard paused them.
($rc, $out, $err) = $node->psql('postgres', q{ALTER DATABASE shop RENAME TO shop},
	extra_params => [ '-U', 'tenant' ]);
note("ALTER DATABASE shop RENAME TO shop: $err");

$node->safe_psql('shop', q{SELECT outbox.emit('t', '{"a":2}')}, extra_params => [ '-U', 'tenant' ]);
my $t = time();
my $w = wait_until(sub { $unpub->() eq '0' }, 40);
ok(defined $w, sprintf('an event emitted after the change is published (waited %.1f s)', time() - $t));
my $ws = $node->safe_psql('shop', 'SET ROLE NONE; SELECT state, last_error FROM outbox.workers');
note("outbox.workers: $ws");
my @denied = slurp_file($node->logfile) =~ /(.*permission denied.*)/g;
note('log lines with "permission denied": ' . scalar(@denied));
note($_) for @denied[0 .. ($#denied < 2 ? $#denied : 2)];

$node->stop;
$redis->stop;
done_testing();
