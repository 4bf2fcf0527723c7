# An event whose transaction commits long after emit() took its id (the id
# is the emit time) is claimed right after that commit, by the claims its
# commit wakes, whatever made the commit late and whatever the server's
# settings. The publisher's ready claim starts from a
# remembered floor that it raises up to a bound below which no uncommitted
# event can still appear; if the floor passes a late event, only the full
# scan every 10 s finds it. Extends t/025 (a transaction open for 3 s, plain
# and prepared, Kafka, 200 ms poll) to the cases the old build (34385b2) got
# wrong:
#  (a) emit() waits about 3 s for a lock (LOCK TABLE outbox.events IN SHARE
#      MODE, the lock a non-concurrent CREATE INDEX takes) after taking its
#      id and before its transaction has an xid; three such emits, each
#      committing as soon as the lock goes. The old bound (the oldest
#      transaction holding an xid in pg_stat_activity) did not see them.
#  (b) the same with track_activities = off server-wide, and a transaction
#      that emitted and stays open 3 s (the old bound read xact_start, which
#      track_activities = off hides);
#  (c) the same two with default_transaction_isolation = 'repeatable read'
#      server-wide (the publisher's cycles must not inherit it);
#  (e) a prepared transaction that emitted: other events flow for 2 s while
#      it is prepared, then all is quiet and another session runs COMMIT
#      PREPARED: that commit must wake the publisher (the old build woke
#      nobody) and its claim must reach the events.
# What holds the floor back and what moves it (a writing transaction that
# does not emit, a prepared one that did not emit, a cycle that fails after
# claiming) is t/048's.
# An emit() waiting for the lock makes the other sessions' emits wait too
# (they need the same lock): meanwhile the publisher's cycles go on, run by
# its poll every 100 ms (outbox.wakeup() commits did it before; they now
# start the claims from the beginning, which would find any event), and a
# claim finds an event only if the floor is at or below it; otherwise only
# the 10 s full scan does. In (e) the poll is 1 hour, so that only the
# commit's wake-up or the full scan can find the events. Each case starts
# right after a full scan (a row INSERTed without emit() with
# the smallest id, which only a full scan claims, has just been published):
# the next one is ~10 s away, so a late event the wake-up claims miss takes
# over 5 s, which the limit of 2.5 s from commit (pg_xact_commit_timestamp)
# to publication (published_at, after Redis acknowledged) tells apart even
# on a loaded machine.
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
use OutboxNode qw(outbox_node wait_until);

my $LIMIT = 2.5;  # seconds from commit to publication

my $redis = OutboxRedis->start();
my $node = outbox_node('wakeup', <<'EOF');
outbox.poll_interval = '100ms'
max_prepared_transactions = 10
track_commit_timestamp = on
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres',
	"SELECT outbox.create_sink('redis', 'redis', '{\"port\": " . $redis->port . ", \"mode\": \"stream\"}')");
$node->safe_psql('postgres', q{SELECT outbox.add_route('wk.*', 'redis', 'wk')});

sub sql { return $node->safe_psql('postgres', $_[0]) }

# --- background load: pgbench sessions -----------------------------------------

my %bench;
# 'flow': other sessions emitting and committing, 20 events a second.
my %BENCH_SQL = (flow => q{SELECT outbox.emit('wk.flow', '{"flow": true}');});
my %BENCH_RATE = (flow => 20);

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

# --- measuring ---------------------------------------------------------------

# Wait for a full scan: a pending row INSERTed without emit() whose id (the
# Unix epoch) lies below every floor is claimed by nothing else. Returns
# how long it took.
my $canaries = 0;
sub after_full_scan {
	my $id = sprintf('00000000-0000-7000-8000-%012d', ++$canaries);
	sql("INSERT INTO outbox.events (id, topic, payload) VALUES ('$id', 'wk.canary', '{}')");
	my $took = wait_until(sub {
		sql("SELECT status FROM outbox.events WHERE id = '$id'") eq 'published' });
	die "no full scan within $PostgreSQL::Test::Utils::timeout_default s" unless defined $took;
	note(sprintf('full scan %.2f s after the canary', $took));
	return $took;
}

# For events (id => xid of their transaction): once all are published (or
# $timeout passed, default 20 s: far beyond $LIMIT), [id, seconds from emit
# to commit, seconds from commit to publication (undef: not published)] each.
sub latencies {
	my ($events, $timeout) = @_;
	my $ids = join(', ', map { "'$_'" } sort keys %$events);
	wait_until(sub {
		sql("SELECT count(*) FROM outbox.events WHERE id IN ($ids) AND status <> 'published'") eq '0'
	}, $timeout // 20);
	my @rows;
	for my $id (sort keys %$events) {
		my $xid = $events->{$id};
		my ($waited, $latency) = split /\|/, sql(qq{
			SELECT round(extract(epoch FROM pg_xact_commit_timestamp('$xid'::xid) - created_at), 3),
			       round(extract(epoch FROM published_at - pg_xact_commit_timestamp('$xid'::xid)), 3)
			  FROM outbox.events WHERE id = '$id'});
		push @rows, [ $id, $waited, $latency eq '' ? undef : $latency ];
	}
	return @rows;
}

sub fmt {
	return join(', ', map {
		sprintf('emit->commit %.2f s, commit->published %s', $_->[1],
			defined $_->[2] ? sprintf("%.3f s", $_->[2]) : 'never (20 s)') } @_);
}

# Each event published within $LIMIT of its commit, whose emit was at least
# $min_wait before it.
sub check_prompt {
	my ($label, $min_wait, @rows) = @_;
	note("$label: " . fmt(@rows));
	is(scalar(grep { $_->[1] < $min_wait } @rows), 0,
		"$label: each event committed at least $min_wait s after emit() took its id");
	is(scalar(grep { !defined $_->[2] || $_->[2] >= $LIMIT } @rows), 0,
		"$label: each event published within $LIMIT s of its commit")
	  or diag("$label: " . fmt(@rows));
	return;
}

sub backend_pid { return $_[0]->query_safe('SELECT pg_backend_pid()') }

# The session's transaction id once it has one (emit() gave it one).
sub xid_of { return $_[0]->query_safe('SELECT pg_current_xact_id()::xid') }

# --- the cases -----------------------------------------------------------------

# Three sessions each run emit() as a transaction of its own, and it waits
# about 3 s for the lock a LOCK TABLE ... IN SHARE MODE holds: its id is
# taken before the wait, its transaction gets an xid after it and commits at
# once. Meanwhile the publisher keeps running cycles, and other sessions'
# emits queue up behind the lock (they commit when it goes).
#
# The order matters for the old build, which took the bound from the start
# of the oldest transaction holding an xid, and lowered its floor to it: a
# session that started before the late emits and got its xid after the lock
# (a queued emit) would have pulled the floor back below them by chance. So
# the other sessions start emitting only once the late ones wait, and each
# late emit commits in the same statement, holding its xid for microseconds.
sub lock_wait_case {
	my ($label) = @_;
	after_full_scan();
	# The lock is taken between two cycles that claimed something: a cycle
	# that holds claimed rows would wait for it to write their outcomes, and
	# run no other cycle meanwhile.
	stop_bench('flow');
	wait_until(sub {
		sql(q{SELECT count(*) FROM outbox.events WHERE topic = 'wk.flow' AND status = 'pending'}) eq '0' });
	my $locker = $node->background_psql('postgres');
	$locker->query_safe('BEGIN');
	$locker->query_safe('LOCK TABLE outbox.events IN SHARE MODE');
	my (@tx, @pids);
	for my $i (1 .. 3) {
		my $s = $node->background_psql('postgres');
		$s->set_query_timer_restart;
		push @pids, backend_pid($s);
		# The xid is read after emit() (the subquery runs first): reading it
		# before would give the transaction an xid during the wait.
		$s->query_until(qr/emitting/, "\\echo emitting\n"
			. "SELECT id, pg_current_xact_id()::xid FROM"
			. " (SELECT outbox.emit('wk.$label', '{\"late\": $i}') AS id OFFSET 0) e;\n");
		push @tx, $s;
	}
	my $pids = join(',', @pids);
	ok(defined wait_until(sub {
		sql("SELECT count(*) FROM pg_locks WHERE pid IN ($pids) AND NOT granted"
			. " AND relation = 'outbox.events'::regclass") eq '3' }),
		"$label: three emit() calls wait for the lock");
	# The lock is held 3 s more from the moment all three wait (starting
	# their sessions may take seconds on a loaded machine), so that each
	# commits about 3 s after emit() took its id.
	my $locked = time();
	start_bench('flow');
	# Meanwhile the publisher's cycles go on: it never waits for a lock.
	my $publisher_waited = 0;
	while (time() - $locked < 3) {
		$publisher_waited++ if sql(q{SELECT count(*) FROM pg_locks
			WHERE NOT granted AND pid IN (SELECT pid FROM outbox.workers)}) ne '0';
		usleep(100_000);
	}
	is($publisher_waited, 0, "$label: the publisher ran its cycles while emit() waited");
	$locker->query_safe('COMMIT');
	$locker->quit;
	my %events;
	for my $s (@tx) {
		my $out = $s->query_safe(q{SELECT 'committed'});
		my ($id, $xid) = $out =~ /^([0-9a-f-]{36})\|(\d+)\s+committed$/s
		  or die "unexpected output: $out";
		$s->quit;
		$events{$id} = $xid;
	}
	check_prompt("$label, emit() waited for a lock", 2, latencies(\%events));
	return;
}

# A transaction that emitted stays open 3 s while the publisher runs cycles.
sub open_tx_case {
	my ($label) = @_;
	after_full_scan();
	my $s = $node->background_psql('postgres');
	$s->query_safe('BEGIN');
	my $id = $s->query_safe(qq{SELECT outbox.emit('wk.$label', '{"open": true}')});
	my $xid = xid_of($s);
	sleep 3;
	$s->query_safe('COMMIT');
	$s->quit;
	check_prompt("$label, transaction open 3 s after emit()", 2, latencies({ $id => $xid }));
	return;
}

# Set a server-wide setting (undef: back to the configuration file's) and
# wait until new sessions see it.
my %conf_value;
sub set_server {
	my ($name, $value) = @_;
	$conf_value{$name} //= sql("SHOW $name");
	if (defined $value) {
		sql("ALTER SYSTEM SET $name = '$value'");
	} else {
		sql("ALTER SYSTEM RESET $name");
	}
	sql('SELECT pg_reload_conf()');
	my $want = $value // $conf_value{$name};
	ok(defined wait_until(sub { sql("SHOW $name") eq $want }), "$name is '$want' server-wide");
	sleep 1;  # the publisher takes it at its next wake-up
	return;
}

# Warm up: the sink connects, the publisher's floor leaves zero.
start_bench('flow');
ok(defined wait_until(sub {
	sql(q{SELECT count(*) FROM outbox.events WHERE topic = 'wk.flow' AND status = 'published'}) >= 20
}), 'warm-up: events flow');

# (a)
lock_wait_case('a');

# (b)
set_server('track_activities', 'off');
lock_wait_case('b');
open_tx_case('b2');
set_server('track_activities', undef);

# (c)
set_server('default_transaction_isolation', 'repeatable read');
lock_wait_case('c');
open_tx_case('c2');
set_server('default_transaction_isolation', undef);

# (e) A prepared transaction that emitted; other events flow for 2 s while it
# is prepared, then all is quiet and another session runs COMMIT PREPARED.
{
	after_full_scan();
	my $s = $node->background_psql('postgres');
	$s->query_safe('BEGIN');
	my %events;
	$events{ $s->query_safe(qq{SELECT outbox.emit('wk.e', '{"prepared": $_}')}) } = 0 for 1 .. 2;
	my $xid = xid_of($s);
	$_ = $xid for values %events;
	$s->query_safe(q{PREPARE TRANSACTION 'wk_e'});
	$s->quit;
	my $flowed = sql(q{SELECT count(*) FROM outbox.events WHERE topic = 'wk.flow' AND status = 'published'});
	sleep 2;
	stop_bench('flow');
	set_server('outbox.poll_interval', '1h');
	ok(defined wait_until(sub {
		sql(q{SELECT count(*) FROM outbox.events WHERE topic LIKE 'wk.%' AND status = 'pending'}) eq '0'
	}), 'e: nothing else pending before COMMIT PREPARED');
	cmp_ok(sql(q{SELECT count(*) FROM outbox.events WHERE topic = 'wk.flow' AND status = 'published'}),
		'>', $flowed, 'e: other events were published while the transaction was prepared');
	sleep 1;  # the publisher is asleep (poll: 1 h)
	sql(q{COMMIT PREPARED 'wk_e'});
	check_prompt('e, COMMIT PREPARED from another session', 2, latencies(\%events));
	set_server('outbox.poll_interval', undef);
	start_bench('flow');
}

# Everything arrived at Redis, and the publisher raised no error.
stop_bench('flow');
ok(defined wait_until(sub {
	sql(q{SELECT count(*) FROM outbox.events WHERE topic LIKE 'wk.%' AND status <> 'published'}) eq '0'
}), 'every event is published in the end');
my %late = map { $_ => 1 } split /\n/,
  sql(q{SELECT id FROM outbox.events WHERE topic NOT IN ('wk.flow', 'wk.canary')});
my %arrived = map { $_ => 1 } grep { $late{$_} } split /\n/, $redis->cli('XRANGE', 'wk', '-', '+');
is(scalar(keys %arrived), scalar(keys %late), scalar(keys %late) . ' late events arrived at Redis');
is(sql('SELECT coalesce(sum(failures), 0) FROM outbox.workers'), '0', 'the publisher raised no error');

$node->stop;
$redis->stop;
done_testing();
