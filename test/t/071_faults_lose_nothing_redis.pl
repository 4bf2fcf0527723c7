# The fault suite for the Redis sink (stream mode, a real redis-server):
# while a steady emit load runs (three sessions of small transactions with
# keyed and keyless events, some rolled back on purpose, see OutboxFaults.pm),
# inject one fault after another and after each one reconcile the stream
# against what committed: every committed event arrives (duplicates are
# allowed and counted), nothing of a rolled-back transaction arrives, and per
# key the first deliveries keep emit order. Two publishers (outbox.workers = 2).
#
# Durability of Redis itself: the test Redis runs with appendonly yes and
# appendfsync always (OutboxRedis.pm), so an XADD it acknowledged is on disk
# before the reply and survives a SIGKILL of redis-server. A Redis without
# persistence forgets acknowledged entries when it restarts; that is the
# operator's durability setting, not outbox losing events (outbox marks an
# event published only after Redis acknowledged it, and cannot know Redis
# forgot it later), so the reconciliation needs a Redis that keeps what it
# acknowledged in order to measure outbox alone. The restart scenario checks
# that the stream never shrinks across a restart.
#
# Each scenario streams to its own key (the route's target is the topic),
# reconciled with XRANGE by the entries' id field. One row per fault goes to
# reliability.tsv (see OutboxFaults::record_result):
#
#   down_up       redis-server killed, left down 3 s, started again; 3 times
#   restart       redis-server killed and started again at once, 3 times at
#                 random moments (acknowledged entries must survive)
#   latency       Redis stalling writes: CLIENT PAUSE 300 ms WRITE back to back
#                 for 4 s, then one pause of 2.5 s (beyond the sink's 2 s
#                 read timeout). (DEBUG SLEEP is disabled in Redis 7 unless
#                 the server enables debug commands.)
#   sigkill       a publisher killed with SIGKILL at 10 random moments (each a
#                 crash restart of the server; the load resumes each time)
#   immediate     pg_ctl stop -m immediate while a pipeline waits for Redis,
#                 then start (recovery counted from the start)
#   long_xact     a transaction holding the xmin horizon and one that emitted,
#                 open 6 s: delivery goes on, the backlog stays low
#   long_outage   redis-server down 20 s: emit() keeps working, the partitions
#                 grow (reported per 1000 events), maintenance with retention 0
#                 as if 3 days later keeps the partitions holding pending events
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxRedis;
use OutboxFaults qw(fault_node new_load backlog);

my @SCENARIOS = qw(down_up restart latency sigkill immediate long_xact long_outage);
my $redis = OutboxRedis->start();
my $node = fault_node('faults_redis');
$node->safe_psql('postgres',
	"SELECT outbox.create_sink('redis', 'redis', '{\"port\": " . $redis->port . ", \"mode\": \"stream\"}')");
$node->safe_psql('postgres', q{SELECT outbox.add_route('fr.*', 'redis')});

my $load = new_load(node => $node, sessions => 3, keys => 30, per_tx => 3, sleep_ms => 20,
	topic => "fr.$SCENARIOS[0]");
my $suite = OutboxFaults::new_suite(node => $node, load => $load, sink => 'redis', prefix => 'fr',
	publishers => 2, scenarios => \@SCENARIOS, fetch => \&fetch);
$suite->start;

# The stream's entries: XADD <topic> * id <id> topic <topic> key <key> payload <json> headers <json>.
sub fetch {
	my ($topic) = @_;
	my @lines = split /\n/, $redis->cli('XRANGE', $topic, '-', '+'), -1;
	my @out;
	for (my $i = 0; $i + 10 < @lines; $i += 11) {
		die "unexpected XRANGE output at line $i: @lines[$i .. $i + 3]"
		  unless $lines[ $i + 1 ] eq 'id' && $lines[ $i + 3 ] eq 'topic' && $lines[ $i + 7 ] eq 'payload';
		push @out, { id => $lines[ $i + 2 ], value => $lines[ $i + 8 ], lane => $topic, pos => scalar @out };
	}
	return \@out;
}

$suite->run('down_up',
	fault => 'Redis down 3 s and up, 3 times',
	lose_nothing => 'nothing is lost when Redis goes down and comes back 3 times',
	inject => sub {
		return $suite->down_up(down => sub { $redis->stop }, up => sub { $redis->restart },
			what => 'redis-server killed and started 3 s later');
	});

$suite->run('restart',
	fault => 'Redis restarted (SIGKILL, start at once)',
	lose_nothing => 'nothing is lost when Redis is killed and restarted 3 times (entries it acknowledged survive)',
	inject => sub {
		my ($topic) = @_;
		my @kept;
		for (1 .. 3) {
			usleep(int((0.5 + rand(1.0)) * 1e6));
			my $before = $redis->cli('XLEN', $topic);
			$redis->restart;
			my $after = $redis->cli('XLEN', $topic);
			push @kept, "$before->$after";
			cmp_ok($after, '>=', $before, "a Redis restart keeps the $before entries it had acknowledged ($after after)");
		}
		return { injections => 3, end => time(),
			detail => 'stream length before->after each restart: ' . join(', ', @kept) };
	});

$suite->run('latency',
	fault => 'Redis stalling writes (CLIENT PAUSE)',
	lose_nothing => 'nothing is lost when Redis answers slowly, even beyond the sink timeout',
	inject => sub {
		my ($max, $pauses) = (0, 0);
		my $t = time();
		while (time() - $t < 4) {
			$redis->cli('CLIENT', 'PAUSE', 300, 'WRITE');
			$pauses++;
			usleep(300_000);
			my $b = backlog($node) // 0;
			$max = $b if $b > $max;
		}
		$redis->cli('CLIENT', 'PAUSE', 2500, 'WRITE');
		$pauses++;
		usleep(2_600_000);
		my $b = backlog($node) // 0;
		$max = $b if $b > $max;
		return { injections => $pauses, end => time(),
			detail => ($pauses - 1) . ' write pauses of 300 ms back to back, then one of 2.5 s; max backlog seen '
			  . $max };
	});

$suite->run('sigkill',
	fault => 'publisher killed with SIGKILL',
	lose_nothing => 'nothing is lost when a publisher is killed with SIGKILL 10 times at random moments',
	recovery_timeout => 120,
	inject => sub { return $suite->sigkill_publishers($_[0], times => 10) });

$suite->run('immediate',
	fault => 'server crash (pg_ctl stop -m immediate) mid-batch',
	lose_nothing => 'nothing is lost when the server stops with -m immediate while a pipeline waits for Redis',
	inject => sub {
		my ($topic) = @_;
		return $suite->immediate_stop($topic,
			slow => sub { $_[0] ? $redis->cli('CLIENT', 'PAUSE', 1500, 'WRITE') : $redis->cli('CLIENT', 'UNPAUSE') });
	});

$suite->run('long_xact',
	fault => 'long transaction holding the xmin horizon',
	lose_nothing => 'nothing is lost while a long transaction holds the xmin horizon',
	inject => sub { return $suite->long_transaction($_[0], hold => 6) });

$suite->run('long_outage',
	fault => 'sink down for a long time (20 s)',
	lose_nothing => 'nothing is lost when Redis is down for 20 s while emit() goes on',
	inject => sub {
		return $suite->long_outage($_[0], secs => 20,
			down => sub { $redis->stop },
			up => sub { $redis->restart });
	});

$suite->finish;

$node->stop;
$redis->stop;
done_testing();
