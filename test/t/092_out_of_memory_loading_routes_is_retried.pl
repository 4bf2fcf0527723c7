# Out of memory while the publisher loads sinks and routes: the load is
# retried, never taken as done (an earlier Dispatcher::Configure swallowed the
# bad_alloc, kept the old routing table and the publisher recorded the new
# configuration version as loaded, so an event whose route arrived in that
# change waited for another change, for ever). Now the cycle aborts and the
# next one loads the configuration again. Needs the fault injection build.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until set_faults);

my $redis = OutboxRedis->start();
my $node = outbox_node('cfgoom', '', fault_injection => 1);
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', "SELECT outbox.create_sink('r', 'redis', '{\"port\": " . $redis->port . "}')");
$node->safe_psql('postgres', q{SELECT outbox.add_route('a', 'r')});
$node->safe_psql('postgres', q{SELECT outbox.emit('a', '{"w":1}'), outbox.emit('b', '{"waits":1}')});
ok(defined wait_until(sub { $node->safe_psql('postgres',
	"SELECT status || coalesce(next_attempt_at::text, '') FROM outbox.events WHERE topic = 'a'") eq 'published' }), 'route a delivers');
sleep 1;
is($node->safe_psql('postgres',
	"SELECT status || ' ' || (next_attempt_at IS NULL) FROM outbox.events WHERE topic = 'b'"),
	'pending true', 'b waits for a route, untouched');

my $off = -s $node->logfile;
set_faults($node, 'dispatch.configure=oom#1');
usleep(500_000);
$node->safe_psql('postgres', q{SELECT outbox.add_route('b', 'r')});
my $t = time();
my $w = wait_until(sub { $node->safe_psql('postgres', "SELECT status FROM outbox.events WHERE topic = 'b'") eq 'published' });
my $log = slurp_file($node->logfile, $off);
my ($line) = $log =~ /(.*could not load sinks and routes.*)/;
note("log: " . ($line // 'no such line'));
note('b: ' . $node->safe_psql('postgres', "SELECT status, next_attempt_at, last_error FROM outbox.events WHERE topic = 'b'"));
ok(defined $w, sprintf('b is delivered after add_route(b) (%s)', defined $w ? sprintf('%.1f s', time() - $t)
	: "not within $PostgreSQL::Test::Utils::timeout_default s"));
like($log, qr/could not load sinks and routes/, 'the failed load was logged');
set_faults($node, '');
$node->safe_psql('postgres', q{SELECT outbox.emit('b', '{"later":1}')});
ok(defined wait_until(sub { $node->safe_psql('postgres',
	"SELECT count(*) FROM outbox.events WHERE topic = 'b' AND status <> 'published'") eq '0' }),
	'a later event of b flows by the new route too');

$node->stop;
$redis->stop;
done_testing();
