# Errors, cancels and terminates injected inside the launcher, at each of
# its points, for 10 s (longer until each action has fired at least once)
# while a steady keyed emit load runs and publishers exit now and then (so
# the launcher has to start them again through the points it fails at): the
# launcher is never down for more than a few seconds, there are never more
# than outbox.workers publishers for the database nor two with one index, and
# nothing committed is lost or arrives out of order per key.
#
# Why: the old build's launcher died on any ERROR (a cancel included) and
# came back 10 s later knowing nothing of its publishers, so it started
# duplicates; a terminate unregistered it for good. The launcher now logs an
# ERROR and carries on, exits with code 1 on SIGTERM (restarted after 1 s),
# and publishers hold their (database, index) place in shared memory, so a
# restarted launcher never starts a second one. t/043 covers the same with
# real signals; this file drives the launcher's own failure points
# (launcher.scan, launcher.before_start, launcher.after_start; see
# `grep -rn OUTBOX_FAULT src/`) and needs the fault injection build
# (OUTBOX_FI_LIBDIR, which test/run_all.sh sets). The old build has no fault
# points, so this file cannot run against it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until set_faults fault_injection_available);
use OutboxFaults qw(new_load);
use OutboxLifecycle qw(session sample watch redis_stream_fetch fmt_sample);

plan skip_all => 'needs the fault injection build (OUTBOX_FI_LIBDIR; test/run_all.sh sets it)'
  unless fault_injection_available();

my $WORKERS = 2;
my $SECS = 10;    # how long faults are injected
my $TOPIC = 'lf.load';
my $T0 = time();
my $seed = $ENV{OUTBOX_FAULT_SEED} // (int($T0) ^ $$);
srand($seed);
note("random seed $seed (set OUTBOX_FAULT_SEED to repeat)");

# The rule sets the loop cycles through: every point of the launcher takes
# each action under one of them.
my @RULES = (
	'launcher.scan=error/2, launcher.before_start=cancel/2, launcher.after_start=terminate/2',
	'launcher.scan=cancel/2, launcher.before_start=terminate/2, launcher.after_start=error/2',
	'launcher.scan=terminate/3, launcher.before_start=error/2, launcher.after_start=cancel/2',
);

my $redis = OutboxRedis->start();
my $node = outbox_node('launcher_faults', <<"EOF", fault_injection => 1);
outbox.workers = $WORKERS
outbox.batch_size = 200
max_worker_processes = 16
restart_after_crash = on
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres',
	"SELECT outbox.create_sink('redis', 'redis', '{\"port\": " . $redis->port . ", \"mode\": \"stream\"}')");
$node->safe_psql('postgres', q{SELECT outbox.add_route('lf.*', 'redis')});

my $s = session($node, 'postgres');
my $load = new_load(node => $node, sessions => 2, keys => 20, per_tx => 2, sleep_ms => 50, topic => $TOPIC);
ok(defined OutboxFaults::wait_publishers($node, $WORKERS, []), "$WORKERS publishers share the key slots");
$load->start;
usleep(1_000_000);

# The launcher's stops and starts in the server log from byte $offset on:
# (restarts, longest downtime in s from a "launcher stopping" to the next
# "launcher started", whether the last stop is still waiting for its start).
sub downtime {
	my ($offset) = @_;
	my ($down_since, $max_down, $restarts) = (undef, 0, 0);
	for my $line (split /\n/, slurp_file($node->logfile, $offset)) {
		my ($h, $m, $sec) = $line =~ /^\d{4}-\d\d-\d\d (\d\d):(\d\d):(\d\d\.\d+)/ or next;
		my $t = $h * 3600 + $m * 60 + $sec;
		if ($line =~ /outbox: launcher stopping/) {
			$down_since //= $t;
		}
		elsif ($line =~ /outbox: launcher started/ && defined $down_since) {
			my $d = $t - $down_since;
			$d += 86400 if $d < 0;
			$max_down = $d if $d > $max_down;
			$restarts++;
			undef $down_since;
		}
	}
	return ($restarts, $max_down, defined $down_since);
}

# --- faults in the launcher for $SECS seconds --------------------------------

my $offset = -s $node->logfile;
my $start = time();
my ($next_rules, $next_kill, $rule_i, $kills) = ($start, $start + 0.7, 0, 0);
# At least $SECS seconds, and until each action has fired in the launcher
# and a terminated launcher has been restarted (they fire at random: 1 in N
# hits), at most 120 s (a loaded machine runs fewer launcher loops a second).
my ($next_look, %seen, $restarted) = (0);
my $r = watch(session => $s, secs => 120, min_secs => $SECS, until => sub {
	if (time() >= $next_look) {
		my $log = slurp_file($node->logfile, $offset);
		$seen{$1} = 1 while $log =~ /outbox: fault injection: (\w+) at launcher\./g;
		($restarted) = downtime($offset);
		$next_look = time() + 0.5;
	}
	return keys %seen == 3 && $restarted;
}, each => sub {
	my ($x) = @_;
	my $now = time();
	if ($now >= $next_rules) {
		set_faults($node, $RULES[ $rule_i++ % @RULES ]);
		$next_rules = $now + 1.2;
	}
	# A publisher exits now and then, so the launcher starts one through its
	# before_start and after_start points.
	if ($now >= $next_kill && @{ $x->{publishers} }) {
		my $victim = $x->{publishers}[ int(rand(@{ $x->{publishers} })) ];
		$node->psql('postgres', "SELECT pg_terminate_backend($victim)");
		$kills++;
		$next_kill = $now + 0.8 + rand(0.6);
	}
});
set_faults($node, '');
my $faults_end = time();
note(sprintf('faults for %.1f s: %d samples, %d publishers terminated', $faults_end - $start, $r->{answered}, $kills));

cmp_ok($r->{max_publishers}, '<=', $WORKERS,
	"never more than $WORKERS publishers at once while the launcher fails ($r->{answered} samples)")
  or diag('e.g. ' . fmt_sample($r->{worst}));
ok(!defined $r->{dup_index}, 'no two publishers hold the same index while the launcher fails')
  or diag("e.g. $r->{dup_index}");
cmp_ok($r->{max_launchers}, '<=', 1, 'never two launchers at once');

# A launcher stopped by the last faults (it may still be finishing the
# pause after an injected error) is back within a few seconds.
my $back = wait_until(sub {
	my (undef, undef, $down) = downtime($offset);
	my $x = !$down && sample($s);
	return $x && @{ $x->{launchers} } == 1;
});
ok(defined $back, sprintf('a launcher runs %.1f s after the faults stopped', $back // -1));

# What the launcher went through, from the server log.
my $log = slurp_file($node->logfile, $offset);
my %fired;
$fired{$1}{$2}++ while $log =~ /outbox: fault injection: (\w+) at launcher\.(\w+)/g;
note('injected: ' . join('; ', map { my $a = $_; "$a: " . join(', ', map { "$fired{$a}{$_} at $_" } sort keys %{ $fired{$a} }) } sort keys %fired));
for my $action (qw(error cancel terminate)) {
	cmp_ok(scalar(keys %{ $fired{$action} || {} }), '>', 0, "$action was injected in the launcher");
}
my $errors = () = $log =~ /ERROR:\s+(?:outbox: injected error at launcher|canceling statement due to user request)/g;
cmp_ok($errors, '>', 0, "the launcher logged the injected errors and cancels ($errors)");

my ($restarts, $max_down, $down) = downtime($offset);
cmp_ok($restarts, '>', 0, "the launcher was terminated and restarted ($restarts times)");
ok(!$down, 'the launcher is running at the end (its last stop was followed by a start)');
cmp_ok($max_down, '<', 5, sprintf('the launcher was never down for more than 5 s (at most %.1f s)', $max_down));
unlike($log, qr/terminated by signal|exited with exit code [^01]/, 'no server process crashed');

# --- afterwards: publishing carries on, nothing lost -------------------------

my $recovery = OutboxFaults::wait_backlog_cleared($node, $faults_end);
ok(defined $recovery, sprintf('the backlog of the fault period drains (%.1f s after the faults)', $recovery // -1));
my $w = OutboxFaults::wait_publishers($node, $WORKERS, []);
ok(defined $w, "once the faults stop, $WORKERS publishers share the key slots again");
$r = watch(session => $s, secs => 2);
is(scalar @{ $r->{last}{launchers} }, 1, 'one launcher runs after the faults');
is($r->{max_publishers}, $WORKERS, "still $WORKERS publishers, no more");

my @failed = $load->stop;
is(scalar @failed, 0, 'the emitting sessions ran throughout') or diag("failed sessions: @failed");
ok(defined OutboxFaults::wait_topic_drained($node, $TOPIC), 'every event is published in the end');
my $rec = OutboxFaults::reconcile(node => $node, topic => $TOPIC,
	fetch => sub { redis_stream_fetch($redis, $TOPIC) });
cmp_ok($rec->{committed}, '>', 100, "the load committed events during the faults ($rec->{committed})");
is($rec->{lost}, 0, 'every committed event arrived');
is($rec->{order_violations} + $rec->{split_keys}, 0, 'per key, events arrived in emit order');
is($rec->{rolled_back_delivered} + $rec->{stray}, 0, 'nothing arrived that did not commit');
note("$rec->{duplicates} duplicate deliveries (at least once)");
my ($keyed, $keyless) = OutboxFaults::table_complete($node);
is("$keyed/$keyless", '0/0', 'outbox.events holds every event the load committed');

note(sprintf('total %.1f s', time() - $T0));
$s->close;
$node->stop;
$redis->stop;
done_testing();
