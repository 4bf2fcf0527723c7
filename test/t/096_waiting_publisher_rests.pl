# A publisher with nothing it may send sleeps: it wakes for an answer, a
# commit, a due retry or a timeout, not in a loop. Measured over 10 s in
# each waiting state: the publisher's own CPU time (from /proc) stays under
# 2 % of a core, and the database's committed transactions (the publisher's
# cycles, read from another database) under 20 a second.
#
# States: nothing to do; a sink that is down (its events parked until the
# sink's retry time); a sink whose answers are late (the broker answers
# after 20 s, outbox.ack_wait is 500 ms: the events wait for the late
# answers); a paused route; events no route matches; many keys waiting
# behind late answers of one partition without a leader while the sink
# answers its others (each key went late at another moment: looked at again
# each on a schedule of its own, 30 such keys cost 37 transactions a second
# and 2.3 % of a core; now they are due together). While a sink's answers
# were late, events parked behind it still counted as the next due retry,
# though the claims leave that sink's topics alone: the idle wait was 0, and
# the publisher ran about 3,900 empty transactions a second on 56 % of a
# core for the whole wait.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use POSIX ();
use IO::Socket::INET;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql);
use OutboxKafka;

my $kafka = OutboxKafka->start(topics => ['slow:3', 'lone:4']);
my $node = outbox_node('rests', "outbox.ack_wait = '500ms'\noutbox.poll_interval = '1s'\n");
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION outbox');
my $ticks_per_s = POSIX::sysconf(POSIX::_SC_CLK_TCK());

sub publisher_pid {
	my $pid;
	wait_until(sub {
		$pid = $node->safe_psql('app', q{SELECT pid FROM outbox.workers WHERE pid IS NOT NULL LIMIT 1});
		$pid ne '' });
	return $pid;
}

# The process's user plus system CPU time, in seconds.
sub cpu_seconds {
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or die "no process $pid: $!";
	my $stat = <$fh>;
	close $fh;
	$stat =~ s/^.*\) //;    # past the command name, which may hold spaces
	my @f = split / /, $stat;
	return ($f[11] + $f[12]) / $ticks_per_s;    # utime, stime (fields 14 and 15)
}

sub commits {
	return $node->safe_psql('postgres',
		q{SELECT xact_commit FROM pg_stat_database WHERE datname = 'app'});
}

# What the publisher costs while it waits for $seconds.
sub rest_cost {
	my ($state, $seconds) = @_;
	$seconds //= 10;
	my $pid = publisher_pid();
	# The cumulative statistics are flushed at most once a second: read
	# after a flush on both ends.
	sleep 2;
	my ($c0, $x0, $t0) = (cpu_seconds($pid), commits(), time());
	sleep $seconds;
	sleep 2;
	my ($c1, $x1, $t1) = (cpu_seconds($pid), commits(), time());
	my $cpu = ($c1 - $c0) / ($t1 - $t0 - 2);
	my $tps = ($x1 - $x0) / ($t1 - $t0 - 2);
	note sprintf('%s: publisher CPU %.2f %% of a core, %.1f transactions/s', $state, 100 * $cpu, $tps);
	cmp_ok($cpu, '<', 0.02, "$state: the publisher uses under 2 % of a core");
	cmp_ok($tps, '<', 20, "$state: under 20 transactions a second");
	return;
}

# Nothing at all.
publisher_pid();
rest_cost('nothing to do');

# Events no route matches, then a paused route's.
$node->safe_psql('app', q{SELECT outbox.emit('nowhere.e', '{}', 'k' || i) FROM generate_series(1, 50) i});
rest_cost('unrouted events');

$node->safe_psql('app', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('app', q{SELECT outbox.add_route('paused.*', 'kafka', 'slow')});
$node->safe_psql('app', q{SELECT outbox.pause('paused.*')});
$node->safe_psql('app', q{SELECT outbox.emit('paused.e', '{}', 'k' || i) FROM generate_series(1, 50) i});
rest_cost('a paused route');

# A sink that is down: Redis on a port nothing listens on.
my $dead_port = do {
	my $sock = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1', LocalPort => 0);
	my $p = $sock->sockport;
	close $sock;
	$p;
};
$node->safe_psql('app', qq{SELECT outbox.create_sink('down', 'redis', '{"port": $dead_port}')});
$node->safe_psql('app', q{SELECT outbox.add_route('down.*', 'down')});
$node->safe_psql('app', q{SELECT outbox.emit('down.e', '{}', 'k' || i) FROM generate_series(1, 50) i});
ok(defined wait_until(sub {
	$node->safe_psql('app', q{SELECT count(*) FROM outbox.events
		WHERE topic = 'down.e' AND next_attempt_at IS NOT NULL}) ne '0' }),
	'the events of the sink that is down are parked');
rest_cost('a sink that is down');
$node->safe_psql('app', q{SELECT outbox.remove_route('down.*')});

# A sink whose answers are late: every broker answers after 20 s.
$node->safe_psql('app', q{SELECT outbox.add_route('slow.*', 'kafka', 'slow')});
$kafka->command_ok('rtt all 20000');
$node->safe_psql('app', q{SELECT outbox.emit('slow.e', '{}', 'k' || i) FROM generate_series(1, 50) i});
ok(defined wait_until(sub {
	$node->safe_psql('app', q{SELECT count(*) FROM outbox.events
		WHERE topic = 'slow.e' AND next_attempt_at IS NOT NULL}) ne '0' }),
	'the events whose answers are late are parked');
# More of them while the first ones' answers are awaited.
$node->safe_psql('app', q{SELECT outbox.emit('slow.e', '{}', 'k' || i) FROM generate_series(51, 100) i});
rest_cost('late answers', 8);
$kafka->command_ok('rtt all 0');
ok(defined wait_until(sub {
	$node->safe_psql('app', q{SELECT count(*) FROM outbox.events
		WHERE topic = 'slow.e' AND status <> 'published'}) eq '0' }),
	'once the broker answers again, the late events are published');

# Keys behind a partition without a leader: librdkafka holds its messages
# for message.timeout.ms (a minute here) while the sink answers the topic's
# other partitions. 120 keys, each written twice, one key every 20 ms: the
# first events of partition 0's keys (about 30) go late at moments spread
# over seconds, their second events wait behind them.
$node->safe_psql('app', kafka_sink_sql('lone', $kafka->bootstrap, 'message.timeout.ms' => '60000'));
$node->safe_psql('app', q{SELECT outbox.add_route('lone.*', 'lone', 'lone')});
$kafka->command_ok('leader lone 0 -1');
for my $round (1, 2)
{
	$node->safe_psql('app', join("\n",
		map { "SELECT outbox.emit('lone.e', '{\"round\": $round}', 'k$_'); SELECT pg_sleep(0.02);" } 1 .. 120));
}
ok(defined wait_until(sub {
	$node->safe_psql('app', q{SELECT count(*) FROM outbox.events
		WHERE topic = 'lone.e' AND last_error LIKE 'waiting for an earlier event%'}) >= 20 }),
	'later events wait behind the late answers of their keys');
rest_cost('keys behind a partition without a leader');
$kafka->command_ok('leader lone 0 1');
ok(defined wait_until(sub {
	$node->safe_psql('app', q{SELECT count(*) FROM outbox.events
		WHERE topic = 'lone.e' AND status <> 'published'}) eq '0' }),
	'once the partition has a leader again, its events are published');
my ($count, $arrived, $disorder) = $kafka->arrivals_in_emit_order($node, q{topic = 'lone.e'},
	topics => ['lone'], db => 'app');
is($arrived, $count, 'every event of the partition without a leader arrived');
is($disorder, 0, 'and each key\'s events arrived in emit order');

$node->stop;
$kafka->stop;
done_testing();
