# The per-key order state costs the publisher a few dozen bytes per waiting
# event, whatever the keys weigh, and rebuilding it reads the waiting events a
# chunk at a time (the old build's order guard kept every waiting key in full,
# and a reload read every waiting keyed event into memory at once, so an
# emit()-only role whose events wait could make each reload cost the publisher
# their keys' total size).
#
# An emit()-only role emits 30,000 events on 3,000 keys of 4 kB (120 MB of
# key text) to a Redis route whose target key holds a string: each key's first
# event is refused (WRONGTYPE) and waits for a retry, the others wait behind
# it. Then routes change three times (each change reloads the configuration
# and rebuilds the order state from the 30,000 waiting events). Proves:
# - the publisher's peak RSS (VmHWM) grows by far less than the keys weigh;
# - per-key order still holds them back: no event of a key is delivered while
#   its first one waits, and once the target is fixed every event arrives, in
#   emit order per key.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxLifecycle qw(session);
use OutboxNode qw(outbox_node wait_until wait_while_progressing);
use OutboxRedis;

my $KEYS = 3000;
my $EVENTS = 30000;

my $redis = OutboxRedis->start();
my $port = $redis->port;
$redis->cli('SET', 'poison-stream', 'not a stream');
my $node = outbox_node('rebuild_mem', "outbox.max_attempts = 1000\noutbox.backoff_min = '2s'\noutbox.backoff_max = '5s'\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', qq{
	SELECT outbox.create_sink('redis', 'redis', '{"port": $port}');
	SELECT outbox.add_route('poison', 'redis', 'poison-stream');
	CREATE ROLE app LOGIN;
	GRANT USAGE ON SCHEMA outbox TO app;
	GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO app;});
$node->safe_psql('postgres', q{SELECT outbox.emit('warm', '{}')});
my $pid;
ok(defined wait_until(sub {
	$pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox publisher'");
	$pid ne '' }), 'the publisher runs');
sub peak_mb {
	my ($kb) = slurp_file("/proc/$pid/status") =~ /VmHWM:\s+(\d+)/;
	return $kb / 1024;
}

# Keys of 4 kB that do not compress away: a per-key random prefix.
$node->safe_psql('postgres', qq{DO \$\$ BEGIN
	PERFORM outbox.emit('poison', pg_catalog.jsonb_build_object('i', i),
	                    pg_catalog.left(pg_catalog.repeat(pg_catalog.md5((i % $KEYS)::text), 128), 4090)
	                    || (i % $KEYS)::text)
	  FROM pg_catalog.generate_series(1, $EVENTS) i;
	END \$\$}, extra_params => [ '-U', 'app' ]);
# (As long as their number keeps growing: a loaded machine takes minutes.)
ok(defined wait_while_progressing(sub {
	$node->safe_psql('postgres',
		"SELECT count(*) FROM outbox.events WHERE topic = 'poison' AND next_attempt_at IS NOT NULL") },
	sub { $_[0] eq "$EVENTS" }), "all $EVENTS events wait (first of each key refused, the rest behind it)");
my $base = peak_mb();
note(sprintf('publisher %d: peak RSS %.0f MB with %d events waiting', $pid, $base, $EVENTS));

# The reload happens at the start of the publisher's next cycle (a cycle
# runs at least every poll): once a publisher transaction that began after
# the change has ended, the new routes are loaded and the order state
# rebuilt. Sampled through one persistent session (a cycle may be short).
my $watcher = session($node, 'postgres');
for my $n (1 .. 3) {
	my $changed = (split /\n/, $node->safe_psql('postgres',
		"SELECT outbox.add_route('other$n', 'redis'); SELECT extract(epoch FROM clock_timestamp())"))[-1];
	my $cycle;    # the start of a publisher transaction that began after the change
	ok(defined wait_until(sub {
		my $start = $watcher->query(q{SELECT coalesce(extract(epoch FROM xact_start)::text, '')
			FROM pg_stat_activity WHERE backend_type = 'outbox publisher'}) // return 0;
		$cycle = $start if !defined $cycle && $start ne '' && $start > $changed;
		return defined $cycle && $start ne $cycle;
	}), "reload $n: a publisher cycle that began after the route change is over");
}
$watcher->close;
my $grew = peak_mb() - $base;
note(sprintf('after three reloads: peak RSS %.0f MB (+%.0f MB; the keys weigh %.0f MB)',
	peak_mb(), $grew, $EVENTS * 4096 / 1e6));
cmp_ok($grew, '<', 40, sprintf('three rebuilds grew the publisher by %.0f MB, not by the keys\' 120 MB', $grew));
is($redis->cli('TYPE', 'poison-stream'), 'string', 'nothing was delivered while the first events wait');

# Fix the target: everything flows, in emit order per key.
$redis->cli('DEL', 'poison-stream');
ok(defined wait_while_progressing(sub {
	$node->safe_psql('postgres',
		"SELECT count(*) FROM outbox.events WHERE topic = 'poison' AND status = 'published'") },
	sub { $_[0] eq "$EVENTS" }), 'once the target is fixed every event is published');
my @lines = split /\n/, $redis->cli('XRANGE', 'poison-stream', '-', '+');
my (%last, $disorder);
my $seen = 0;
for my $n (0 .. $#lines - 1) {
	next unless $lines[$n] eq 'payload';
	my ($i) = $lines[ $n + 1 ] =~ /"i":\s*(\d+)/;
	next unless defined $i;
	$seen++;
	my $k = $i % $KEYS;
	$disorder++ if defined $last{$k} && $i < $last{$k};
	$last{$k} = $i;
}
cmp_ok($seen, '>=', $EVENTS, 'every event reached the stream');
ok(!$disorder, 'per key, in emit order');

$node->stop;
done_testing();
