# A role granted only emit() sends one event its broker refuses for good (a
# Redis key of the wrong type here; a message over Kafka's
# message.max.bytes in the review that found it) and then a hundred
# thousand more on the same key. Each of those waits behind the first, and
# is due again at the first's every retry: claims took due retries first,
# and a claim full of them left no room for never-tried events, so every
# other application's events waited until all the followers were parked
# again, at every retry of the first (up to two minutes per 300,000 in the
# review). Now never-tried events get at least a quarter of every first
# batch.
#
# Proves: while the followers churn, another application's events reach
# their stream within 3 s each (the old build: tens of seconds); the
# followers stay behind their first event, none delivered.
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

my $FOLLOWERS = 100_000;
my $redis = OutboxRedis->start();
my $port = $redis->port;
my $node = outbox_node('followers', "outbox.max_attempts = 1000000\n");
$node->safe_psql('postgres', qq{
CREATE EXTENSION outbox;
CREATE ROLE app LOGIN; CREATE ROLE attacker LOGIN;
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO app, attacker;
SELECT outbox.create_sink('r', 'redis', '{"port": $port}');
SELECT outbox.add_route('atk.*', 'r', 'poison');
SELECT outbox.add_route('victim.*', 'r', 'victim');});
$redis->cli('SET', 'poison', 'not a stream');

$node->safe_psql('postgres', q{SELECT outbox.emit('atk.head', '{}', 'k')}, extra_params => [ '-U', 'attacker' ]);
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT attempts > 0 FROM outbox.events WHERE topic = 'atk.head'}) eq 't' }),
	'the first event is refused and waits for a retry');
$node->safe_psql('postgres',
	"SELECT outbox.emit('atk.follower', pg_catalog.jsonb_build_object('n', n), 'k') FROM generate_series(1, $FOLLOWERS) n",
	extra_params => [ '-U', 'attacker' ]);

# Another application's events, one at a time, while the followers churn.
my $worst = 0;
for my $i (1 .. 20) {
	my $before = $redis->cli('XLEN', 'victim');
	my $start = time();
	$node->safe_psql('postgres', "SELECT outbox.emit('victim.e', '{\"i\": $i}')", extra_params => [ '-U', 'app' ]);
	my $took = wait_until(sub { $redis->cli('XLEN', 'victim') > $before }, 60);
	my $lag = defined $took ? time() - $start : 60;
	$worst = $lag if $lag > $worst;
	usleep(300_000);
}
cmp_ok($worst, '<', 3, "another application's events arrive within 3 s each while $FOLLOWERS followers wait (worst "
	  . sprintf('%.2f', $worst) . ' s)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'atk.follower' AND status = 'published'}),
	'0', 'no follower went ahead of its first event');
is($redis->cli('TYPE', 'poison'), 'string', 'nothing reached the refused key');

$node->stop;
$redis->stop;
done_testing();
