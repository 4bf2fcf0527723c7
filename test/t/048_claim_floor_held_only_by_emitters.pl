# The publisher's ready claim starts from a remembered floor
# (src/core/claim_floor.hpp), raised after each cycle up to a bound
# below which no uncommitted event can still appear (emit_horizon.hpp). This
# file proves what holds that floor back and what moves it:
#  (d) a long transaction that writes but never emits (an xid held 15-20 s)
#      does not hold the floor back: the old build's bound was the oldest
#      writing transaction, so one such transaction kept every claim starting
#      from its start time, walking the index entries of everything published
#      since (which its snapshot keeps from being cleaned up);
#  (e) a prepared transaction that did not emit does not either (the old
#      build started every claim from the beginning while any prepared
#      transaction existed), and events committed meanwhile are published
#      promptly;
#  (f) a cycle that claimed a batch and then failed (the fault injection
#      build's error at publisher.after_outcomes, all written but the
#      commit, and at publisher.before_finish, the batch at the broker) does
#      not move the floor past the events it claimed: they are claimed again
#      right after the error, not by the full scan every 10 s. (Only the
#      fault injection build has these points: the old build cannot run it.)
#  (g) a transaction that emitted and stays open holds the floor back for a
#      second only; when it commits, the claims look back to its emit.
# A slow claim is no wrong result, so (d), (e) and (g) read the floor through a
# probe: a pending row INSERTed without emit() (so no emit horizon covers
# it) whose id is the time T. The claims a commit wakes reach it only if the
# floor is at or below T; otherwise only the next full scan finds it. Each
# probe goes in right after a full scan, so the next one is ~10 s away: a
# probe published within 2.5 s of its commit means the floor was at or below
# T, one published after more than 3 s that it was above. With the
# transaction that only writes, or the prepared one that did not emit, a
# probe one second after it began waits for the full scan: the floor went
# past them.
# The poll is 1 hour; the publisher's cycles are run by other sessions
# emitting (20 and 10 a second: outbox.wakeup() would reset the floor), and
# latencies run from pg_xact_commit_timestamp to published_at (after Redis
# acknowledged).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until set_faults fault_injection_available);

my $LIMIT = 2.5;  # seconds from commit to publication: claimed by a wake-up
my $MISSED = 3;   # more than this: left for the full scan

my $CONF = <<'EOF';
outbox.poll_interval = '1h'
max_prepared_transactions = 10
track_commit_timestamp = on
EOF

my $redis = OutboxRedis->start();
my $node;  # the node the helpers below work on

sub sql { return $node->safe_psql('postgres', $_[0]) }

sub setup_node {
	my ($name, %opts) = @_;
	$node = outbox_node($name, $CONF, %opts);
	sql('CREATE EXTENSION outbox');
	sql("SELECT outbox.create_sink('redis', 'redis', '{\"port\": " . $redis->port
		  . ", \"mode\": \"stream\", \"db\": " . ($opts{fault_injection} ? 1 : 0) . "}')");
	sql(q{SELECT outbox.add_route('fl.*', 'redis', 'fl')});
	return;
}

# --- background load: pgbench sessions -----------------------------------------

my %bench;
my %BENCH_SQL = (
	flow => q{SELECT outbox.emit('fl.flow', '{"flow": true}');},
	waker => q{SELECT outbox.emit('fl.wake', '{}');});
my %BENCH_RATE = (flow => 20, waker => 10);

sub start_bench {
	for my $name (@_) {
		next if $bench{$name};
		my $file = "$PostgreSQL::Test::Utils::tmp_check/bench_$name.sql";
		open my $fh, '>', $file or die "$file: $!";
		print $fh "$BENCH_SQL{$name}\n";
		close $fh;
		my ($out, $err) = ('', '');
		$bench{$name} = IPC::Run::start(
			[ 'pgbench', '-n', '-h', $node->host, '-p', $node->port, '-c', '1',
			  '-R', $BENCH_RATE{$name}, '-T', '900', '-f', $file, 'postgres' ],
			'>', \$out, '2>', \$err);
	}
	return;
}

sub stop_bench {
	for my $name (@_) {
		my $h = delete $bench{$name} or next;
		$h->kill_kill(grace => 5);
	}
	return;
}

sub quiet {
	stop_bench('flow', 'waker');
	return wait_until(sub {
		sql(q{SELECT count(*) FROM outbox.events WHERE topic LIKE 'fl.%' AND status = 'pending'}) eq '0'
	});
}

# --- measuring ---------------------------------------------------------------

my $probes = 0;
# A pending row, INSERTed without emit(), whose id is the time $t (Unix
# seconds). Returns its id and its transaction's xid.
sub insert_probe {
	my ($t, $topic) = @_;
	my $ms = int($t * 1000);
	my $id = sprintf('%08x-%04x-7000-8000-%012x', $ms >> 16, $ms & 0xffff, ++$probes);
	my $xid = sql(qq{BEGIN;
		INSERT INTO outbox.events (id, topic, payload) VALUES ('$id', '$topic', '{}');
		SELECT pg_current_xact_id()::xid;
		COMMIT;});
	return ($id, $xid);
}

# Wait for a full scan: a probe with the smallest id (the Unix epoch) lies
# below every floor and is claimed by nothing else.
sub after_full_scan {
	my ($id) = insert_probe(0, 'fl.canary');
	my $took = wait_until(sub {
		sql("SELECT status FROM outbox.events WHERE id = '$id'") eq 'published' });
	die "no full scan within $PostgreSQL::Test::Utils::timeout_default s" unless defined $took;
	note(sprintf('full scan %.2f s after the canary', $took));
	return;
}

# Seconds from the commit of $xid to the publication of event $id (undef if
# not published within $timeout s).
sub latency {
	my ($id, $xid, $timeout) = @_;
	wait_until(sub {
		sql("SELECT status FROM outbox.events WHERE id = '$id'") eq 'published' }, $timeout // 20);
	my $s = sql(qq{SELECT round(extract(epoch FROM published_at
		- pg_xact_commit_timestamp('$xid'::xid)), 3) FROM outbox.events WHERE id = '$id'});
	return $s eq '' ? undef : $s;
}

sub fmt_s { return defined $_[0] ? sprintf('%.3f s', $_[0]) : 'not within 20 s' }

# Right after a full scan, once the clock is past $t + 2 s (the floor may go
# up to now - 1 s), a probe at $t: seconds from its commit to publication.
sub probe_at {
	my ($t) = @_;
	after_full_scan();
	after_full_scan() if time() < $t + 2.5;
	my ($id, $xid) = insert_probe($t, 'fl.probe');
	return latency($id, $xid);
}

# --- a release build -----------------------------------------------------------

setup_node('floor');
sql('CREATE TABLE side (x int)');
start_bench('flow', 'waker');
ok(defined wait_until(sub {
	sql(q{SELECT count(*) FROM outbox.events WHERE topic = 'fl.flow' AND status = 'published'}) >= 20
}), 'warm-up: events flow');

# (g) A transaction that emitted and stays open holds the floor back only
# for its first second: then the floor passes it (else every claim would
# walk every event published since; 057 measures that), so a probe half a
# second after its emit, committed once it has been open 2.5 s, waits for
# the full scan. When it commits, it reports before its events are visible,
# and the claims look back to its emit: the probe and its own event are
# claimed at once.
{
	my $s = $node->background_psql('postgres');
	$s->query_safe('BEGIN');
	my $held_id = $s->query_safe(q{SELECT outbox.emit('fl.open', '{}')});
	my $since = $s->query_safe('SELECT extract(epoch FROM clock_timestamp())');
	my $held_xid = $s->query_safe('SELECT pg_current_xact_id()::xid');
	after_full_scan();
	after_full_scan() if time() < $since + 2.5;
	my ($id, $xid) = insert_probe($since + 0.5, 'fl.probe');
	sleep 1.5;
	is(sql("SELECT status FROM outbox.events WHERE id = '$id'"), 'pending',
		'g: a transaction open more than a second after its emit is passed: a probe half a '
		  . 'second after its emit waits');
	$s->query_safe('COMMIT');
	$s->quit;
	ok(defined wait_until(sub {
		sql("SELECT count(*) FROM outbox.events WHERE id IN ('$id', '$held_id') AND status = 'published'") eq '2'
	}, 20), 'g: both are published');
	my $took = sql(qq{SELECT round(extract(epoch FROM max(published_at)
		- pg_xact_commit_timestamp('$held_xid'::xid)), 3) FROM outbox.events WHERE id IN ('$id', '$held_id')});
	note("g: published $took s after the holder's commit");
	ok($took ne '' && $took < $LIMIT,
		"g: its commit brings the claims back to its emit: the probe and its event are published "
		  . "within $LIMIT s ($took s)");
}

# (d) A transaction that writes (an xid, a row) and never emits, open while
# a probe a second after its start waits (10-20 s).
{
	my $s = $node->background_psql('postgres');
	$s->query_safe('BEGIN');
	$s->query_safe('INSERT INTO side VALUES (1)');
	my $began = $s->query_safe('SELECT extract(epoch FROM now())');  # its start
	my $took = probe_at($began + 1);
	my $held = time() - $began;
	note(sprintf('d: probe %s, the writer held its xid %.1f s', fmt_s($took), $held));
	ok(defined $took && $took > $MISSED,
		'd: a transaction that writes and never emits does not hold the floor back: a probe '
		  . 'a second after its start waits for the full scan (' . fmt_s($took) . ')');
	ok(defined $took && $took < 15, 'd: ... which finds it');
	# The events committed meanwhile went out at once.
	my $worst = sql(q{SELECT round(extract(epoch FROM max(published_at - created_at)), 3)
		FROM outbox.events WHERE topic = 'fl.flow' AND created_at > now() - interval '5 s'
		AND created_at < now() - interval '2 s'});
	ok($worst ne '' && $worst < $LIMIT, "d: other events are published at once (slowest $worst s)");
	$s->query_safe('COMMIT');
	$s->quit;
}

# (e) A prepared transaction that did not emit (it wrote a row).
{
	my $s = $node->background_psql('postgres');
	$s->query_safe('BEGIN');
	$s->query_safe('INSERT INTO side VALUES (2)');
	my $began = $s->query_safe('SELECT extract(epoch FROM clock_timestamp())');
	$s->query_safe(q{PREPARE TRANSACTION 'fl_idle'});
	$s->quit;
	my $took = probe_at($began + 1);
	is(sql('SELECT count(*) FROM pg_prepared_xacts'), '1', 'e: the transaction is still prepared');
	note('e: probe ' . fmt_s($took));
	ok(defined $took && $took > $MISSED,
		'e: a prepared transaction that did not emit does not hold the floor back: a probe a '
		  . 'second after it began waits for the full scan (' . fmt_s($took) . ')');
	ok(defined $took && $took < 15, 'e: ... which finds it');
	my $worst = sql(q{SELECT round(extract(epoch FROM max(published_at - created_at)), 3)
		FROM outbox.events WHERE topic = 'fl.flow' AND created_at > now() - interval '5 s'
		AND created_at < now() - interval '2 s'});
	ok($worst ne '' && $worst < $LIMIT,
		"e: other events are published at once while it is prepared (slowest $worst s)");
	sql(q{ROLLBACK PREPARED 'fl_idle'});
}

ok(defined quiet(), 'every event is published in the end');
is(sql('SELECT coalesce(sum(failures), 0) FROM outbox.workers'), '0', 'the publisher raised no error');
$node->stop;

# --- (f) the fault injection build ---------------------------------------------

SKIP: {
	skip 'f: needs the fault injection build (OUTBOX_FI_LIBDIR)', 1 unless fault_injection_available();
	setup_node('floor_fi', fault_injection => 1);
	start_bench('flow', 'waker');
	ok(defined wait_until(sub {
		sql(q{SELECT count(*) FROM outbox.events WHERE topic = 'fl.flow' AND status = 'published'}) >= 20
	}), 'f: warm-up: events flow');

	for my $point ('after_outcomes', 'before_finish') {
		after_full_scan();
		ok(defined quiet(), "f, $point: all quiet");
		# The reload wakes the publisher for a cycle with nothing to claim,
		# which does not reach the point: the error waits for the next
		# cycle that claims.
		set_faults($node, "publisher.$point=error#1");
		sleep 1;
		my $log_from = -s $node->logfile;
		# Three events of a transaction prepared for 2 s: when COMMIT
		# PREPARED wakes the publisher they lie more than a second back and
		# the transaction has left pg_prepared_xacts, so the cycle that
		# claims them has its bound past them, and moves the floor there if
		# it commits. (A plain COMMIT wakes the publisher a moment before its
		# emit horizon entry is cleared, so the bound of the cycle it wakes
		# may or may not pass its events.)
		my $s = $node->background_psql('postgres');
		$s->query_safe('BEGIN');
		my @ids = map { $s->query_safe(qq{SELECT outbox.emit('fl.$point', '{"n": $_}')}) } 1 .. 3;
		my $xid = $s->query_safe('SELECT pg_current_xact_id()::xid');
		$s->query_safe(qq{PREPARE TRANSACTION 'fl_$point'});
		$s->quit;
		sleep 2;
		sql(qq{COMMIT PREPARED 'fl_$point'});
		my @took = map { latency($_, $xid) } @ids;
		my $log = slurp_file($node->logfile, $log_from);
		my $errors = () = $log =~ /ERROR:  outbox: injected error at publisher\.$point/g;
		is($errors, 1, "f, $point: the cycle that claimed the events failed once");
		note("f, $point: " . join(', ', map { fmt_s($_) } @took));
		is(scalar(grep { !defined $_ || $_ >= $LIMIT } @took), 0,
			"f, $point: the events are claimed again and published within $LIMIT s of their "
			  . 'commit (' . join(', ', map { fmt_s($_) } @took) . ')');
		if ($point eq 'after_outcomes') {
			# The failed cycle had them acknowledged by Redis: they arrived twice.
			my %arrived;
			$arrived{$_}++ for split /\n/, $redis->cli('-n', 1, 'XRANGE', 'fl', '-', '+');
			is(scalar(grep { ($arrived{$_} // 0) == 2 } @ids), 3,
				"f, $point: each event arrived twice (the failed cycle had sent them)");
		}
		set_faults($node, '');
		start_bench('flow', 'waker');
	}
	ok(defined quiet(), 'f: every event is published in the end');
	$node->stop;
}

stop_bench('flow', 'waker');
$redis->stop;
done_testing();
