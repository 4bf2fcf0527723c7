# Parallel publishers (outbox.workers = 4) keep per-key order, and never
# claim one event twice. Each key belongs to one of 1024 key slots and each
# slot to at most one publisher at a time; keyless events go to any of them.
#
# Four concurrent sessions emit about 50,000 events for 500 keys (each key
# emitted by one session, with a per-key sequence number in the payload) plus
# keyless events, in many small transactions, some of them rolled back. The
# broker answers every request 5 ms late, so batches are in flight when
# something happens to a publisher.
#
# Phase A, no fault: 4 publishers share the 1024 slots, every one of them
# publishes, every committed event arrives exactly once (a second copy would
# mean two publishers claimed it), per key in emit order.
#
# Phase B, while the load goes on: one publisher is terminated (SIGTERM; the
# survivors take its slots until the launcher restarts it), later another is
# killed with SIGKILL (the whole server goes through crash recovery and the
# load resumes). Every committed event arrives at least once, nothing rolled
# back arrives, and per key the first delivery of each event follows emit order.
# Duplicates are allowed here (at least once) and reported.
#
# Phase C, a backlog: one transaction commits 12,000 events for the 500 keys
# after their ids fell below the claims' safe bound, so each publisher drains
# it with several batches in flight at once (outbox.batches_in_flight). Every
# event arrives exactly once, per key in emit order, and a cycle that claimed
# more than one batch shows that the pipeline was used.
#
# Each phase goes to its own Kafka topic (6 partitions) so that each can be
# reconciled on its own.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run ();
use Time::HiRes qw(time usleep);
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql pending_count psql_tolerant);

my $PUBLISHERS = 4;
my $SLOTS = 1024;
my $KEYS = 500;           # key-000 .. key-499; session s emits the keys with index % 4 = s
my $SESSIONS = 4;
my $PER_TX = 5;           # keyed events per committed transaction (plus a keyless one every 3rd)
my %TX = (par_a => 1100, par_b => 1250);    # committed transactions per session and phase
my $T0 = time();

my $kafka = OutboxKafka->start(topics => [ 'par_a:6', 'par_b:6', 'par_c:6' ]);
my $node = outbox_node('parallel', <<"EOF");
outbox.workers = $PUBLISHERS
outbox.batch_size = 200
max_worker_processes = 16
restart_after_crash = on
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('postgres', q{SELECT outbox.add_route('par_*', 'kafka')});
$kafka->command_ok('rtt all 5');

# The load: per key a sequence number kept in the same transaction as the
# emit, and per session how many transactions committed, so a session that
# died with the server resumes where its last commit left it.
$node->safe_psql('postgres', <<"EOF");
CREATE TABLE key_seq (key text PRIMARY KEY, seq int NOT NULL DEFAULT 0);
INSERT INTO key_seq SELECT format('key-%s', lpad(i::text, 3, '0')) FROM generate_series(0, $KEYS - 1) i;
CREATE TABLE emit_progress (topic text, session int, done int NOT NULL DEFAULT 0,
                            PRIMARY KEY (topic, session));
INSERT INTO emit_progress SELECT t, s FROM unnest(ARRAY['par_a', 'par_b']) t,
                                           generate_series(0, $SESSIONS - 1) s;
CREATE PROCEDURE emit_load(p_topic text, p_session int, p_until int, p_sleep_ms int)
LANGUAGE plpgsql AS \$\$
DECLARE
  d int;
  k text;
  n int;
BEGIN
  LOOP
    SELECT done INTO d FROM emit_progress WHERE topic = p_topic AND session = p_session;
    EXIT WHEN d >= p_until;
    IF d % 40 = 7 THEN
      -- A transaction that rolls back: none of its events may ever arrive.
      k := format('key-%s', lpad((p_session + $SESSIONS * floor(random() * ($KEYS / $SESSIONS))::int)::text, 3, '0'));
      PERFORM outbox.emit(p_topic, jsonb_build_object('k', k, 'rolled_back', true), k);
      PERFORM outbox.emit(p_topic, jsonb_build_object('s', p_session, 'rolled_back', true));
      ROLLBACK;
    END IF;
    UPDATE emit_progress SET done = done + 1 WHERE topic = p_topic AND session = p_session;
    FOR j IN 1..$PER_TX LOOP
      k := format('key-%s', lpad((p_session + $SESSIONS * floor(random() * ($KEYS / $SESSIONS))::int)::text, 3, '0'));
      UPDATE key_seq SET seq = seq + 1 WHERE key = k RETURNING seq INTO n;
      PERFORM outbox.emit(p_topic, jsonb_build_object('k', k, 'seq', n), k);
    END LOOP;
    IF d % 3 = 0 THEN
      PERFORM outbox.emit(p_topic, jsonb_build_object('s', p_session, 'tx', d));
    END IF;
    COMMIT;
    IF p_sleep_ms > 0 THEN
      PERFORM pg_sleep(p_sleep_ms / 1000.0);
    END IF;
  END LOOP;
END
\$\$;
EOF

# --- helpers ---------------------------------------------------------------

# The publishers of the database as [ { pid, published, key_slots } ... ], by
# pid; undef while the server does not answer (crash recovery).
sub publishers {
	my ($ret, $out) = psql_tolerant($node, 'postgres',
		q{SELECT pid, published, key_slots FROM outbox.workers WHERE database = 'postgres' ORDER BY pid});
	return undef if $ret != 0;
	return [ map { my ($p, $n, $s) = split /\|/; { pid => $p, published => $n, key_slots => $s } }
		  grep { length } split /\n/, $out ];
}

sub describe {
	my ($w) = @_;
	return 'no answer' unless defined $w;
	return join(', ', map { "pid $_->{pid}: $_->{key_slots} slots, $_->{published} published" } @$w)
	  || 'no publisher';
}

sub slot_sum { my $s = 0; $s += $_->{key_slots} for @{ $_[0] }; return $s; }

# $n publishers own all slots between them, each some.
sub settled {
	my ($w, $n) = @_;
	return defined $w && @$w == $n && slot_sum($w) == $SLOTS
	  && !(grep { $_->{key_slots} <= 0 } @$w);
}

sub pending {
	my ($ret, $out) = psql_tolerant($node, 'postgres',
		q{SELECT count(*) FROM outbox.events WHERE status = 'pending'});
	return $ret == 0 ? $out : undef;
}

sub progress {
	my ($topic) = @_;
	my ($ret, $out) = psql_tolerant($node, 'postgres',
		"SELECT coalesce(sum(done), 0) FROM emit_progress WHERE topic = '$topic'");
	return $ret == 0 ? $out : undef;
}

# Emitting sessions: one psql per session running emit_load until its target.
my $log_dir = $PostgreSQL::Test::Utils::log_path;
my %emitters;    # session => IPC::Run harness
my $emitter_runs = 0;

sub start_emitters {
	my ($topic, $sleep_ms, @sessions) = @_;
	@sessions = (0 .. $SESSIONS - 1) unless @sessions;
	for my $s (@sessions) {
		$emitter_runs++;
		my $out = "$log_dir/emitter_${topic}_${s}_$emitter_runs.log";
		$emitters{$s} = IPC::Run::start(
			[ $node->installed_command('psql'), '-X', '-q', '-v', 'ON_ERROR_STOP=1',
			  '-d', $node->connstr('postgres'),
			  OutboxNode::app_session_args(),
			  '-c', "CALL emit_load('$topic', $s, $TX{$topic}, $sleep_ms)" ],
			'<', \undef, '>', $out, '2>&1');
	}
}

# Waits for every emitter to exit; returns the sessions whose psql failed.
sub finish_emitters {
	my @failed;
	for my $s (sort keys %emitters) {
		my $h = delete $emitters{$s};
		push @failed, $s unless eval { $h->finish };
	}
	return @failed;
}

# Everything arrived on $topic, checked against the committed events.
# Returns a summary hash; runs the checks named with $label.
sub reconcile {
	my ($topic, $label, $exactly_once) = @_;

	# Committed events: id => key ('' when keyless); per key the ids in emit
	# (sequence) order.
	my %committed;
	my %emit_order;
	my $ids_follow_seq = 1;
	for my $row (split /\n/, $node->safe_psql('postgres', qq{
			SELECT id, coalesce(key, ''), coalesce(payload->>'seq', '')
			  FROM outbox.events WHERE topic = '$topic'
			 ORDER BY key, (payload->>'seq')::int})) {
		my ($id, $key, $seq) = split /\|/, $row;
		$committed{$id} = $key;
		next if $key eq '';
		my $list = ($emit_order{$key} //= []);
		$ids_follow_seq = 0 if @$list && $list->[-1] ge $id;
		push @$list, $id;
	}
	ok($ids_follow_seq, "$label: per key, event ids ascend with the emit sequence");

	$kafka->command_ok('rtt all 0');
	# Read again (a read ends once nothing came for a while) until every
	# committed event is there, or the deadline passes.
	my $msgs = $kafka->consume(topics => [$topic], timeout_ms => 4000, until => sub {
		my %got;
		for my $m (@{ $_[0] }) {
			my ($id) = map { $_->[1] } grep { $_->[0] eq 'outbox-id' } @{ $m->{headers} };
			$got{$id} = 1 if defined $id;
		}
		return !grep { !$got{$_} } keys %committed;
	});
	$kafka->command_ok('rtt all 5');

	my (%copies, %first, %partitions, @stray);
	my $rolled_back = 0;
	for my $m (sort { $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} } @$msgs) {
		my ($id) = map { $_->[1] } grep { $_->[0] eq 'outbox-id' } @{ $m->{headers} };
		$rolled_back++ if defined $m->{value} && $m->{value} =~ /rolled_back/;
		if (!defined $id || !exists $committed{$id}) {
			push @stray, $id // '(no outbox-id)';
			next;
		}
		my $key = $committed{$id};
		if ($key ne '') {
			$partitions{$key}{ $m->{partition} } = 1;
			push @{ $first{$key} }, { id => $id, partition => $m->{partition}, offset => $m->{offset},
				value => $m->{value} } unless $copies{$id};
		}
		$copies{$id}++;
	}

	my @missing = grep { !$copies{$_} } sort keys %committed;
	my $dups = 0;
	$dups += $_ - 1 for values %copies;
	my $keyless = grep { $committed{$_} eq '' } keys %committed;
	note(sprintf('%s: %d committed events (%d keyless, %d keys), %d messages, %d duplicates',
		$label, scalar(keys %committed), $keyless, scalar(keys %emit_order), scalar(@$msgs), $dups));

	is(scalar @missing, 0, "$label: every committed event arrived")
	  or diag(scalar(@missing) . ' missing, e.g. '
		  . join(', ', map { "$_ (key '$committed{$_}')" } @missing[ 0 .. ($#missing < 9 ? $#missing : 9) ]));
	is(scalar @stray, 0, "$label: nothing arrived that was not committed")
	  or diag('e.g. ' . join(', ', @stray[ 0 .. ($#stray < 9 ? $#stray : 9) ]));
	is($rolled_back, 0, "$label: no event of a rolled-back transaction arrived");

	my @split = grep { keys %{ $partitions{$_} } > 1 } sort keys %partitions;
	is(scalar @split, 0, "$label: each key's messages share one partition")
	  or diag("keys on several partitions: @split[0 .. ($#split < 9 ? $#split : 9)]");

	# Per key, the first delivery of each event follows emit order.
	my @out_of_order;
	for my $key (sort keys %emit_order) {
		my @want = @{ $emit_order{$key} };
		my @got = map { $_->{id} } @{ $first{$key} || [] };
		my @got_present = grep { $copies{$_} } @want;    # missing events are reported above
		next if "@got" eq "@got_present";
		my $at = 0;
		$at++ while $at < @got && $at < @got_present && $got[$at] eq $got_present[$at];
		push @out_of_order, { key => $key, at => $at, got => $first{$key}, want => \@got_present };
	}
	is(scalar @out_of_order, 0, "$label: per key, events arrive in emit order")
	  or do {
		diag(scalar(@out_of_order) . ' keys out of order');
		for my $bad (@out_of_order[ 0 .. ($#out_of_order < 4 ? $#out_of_order : 4) ]) {
			my $from = $bad->{at} > 2 ? $bad->{at} - 2 : 0;
			my @around = grep { defined } @{ $bad->{got} }[ $from .. $bad->{at} + 3 ];
			diag("key $bad->{key}: first deliveries from position $from: "
				  . join('; ', map { "p$_->{partition}\@$_->{offset} $_->{value} $_->{id}" } @around)
				  . "; expected next: $bad->{want}[$bad->{at}]");
			# The expected event and its neighbours as the database has them.
			diag($node->safe_psql('postgres', qq{
				SELECT string_agg(format('%s seq %s published_at %s attempts %s', e.id, e.payload->>'seq',
				                         e.published_at, e.attempts), E'\\n' ORDER BY (e.payload->>'seq')::int)
				  FROM outbox.events e,
				       (SELECT (payload->>'seq')::int AS seq FROM outbox.events
				         WHERE topic = '$topic' AND id = '$bad->{want}[$bad->{at}]') w
				 WHERE e.topic = '$topic' AND e.key = '$bad->{key}'
				   AND abs((e.payload->>'seq')::int - w.seq) <= 3}));
		}
	  };

	if ($exactly_once) {
		is($dups, 0, "$label: no event arrived twice (never claimed by two publishers)")
		  or do {
			my @twice = grep { $copies{$_} > 1 } sort keys %copies;
			diag('e.g. ' . join(', ', map { "$_ (key '$committed{$_}', $copies{$_} copies)" }
				  @twice[ 0 .. ($#twice < 9 ? $#twice : 9) ]));
		  };
	}
	else {
		note("$label: $dups duplicate deliveries (allowed: at least once across faults)");
	}
	return { committed => scalar(keys %committed), messages => scalar(@$msgs), dups => $dups };
}

# --- 4 publishers share the key slots ----------------------------------------

# The publishers start one after the other (the launcher starts the others
# once the first found the extension), and each hands slots over between its
# transactions: all slots owned, each publisher some, is also a state on the
# way (the last to start has taken what one of the others released, the
# others have not released theirs yet), which a loaded machine makes last.
# So wait for the balance itself, and fail with the last state seen if it
# never comes.
sub balanced { return !(grep { $_->{key_slots} < 128 || $_->{key_slots} > 512 } @{ $_[0] }) }
my $w;
my $took = wait_until(sub { $w = publishers(); settled($w, $PUBLISHERS) && balanced($w) });
ok(defined $took && settled($w, $PUBLISHERS),
	"$PUBLISHERS publishers run for the database and own all $SLOTS key slots")
  or diag('outbox.workers: ' . describe($w));
ok(defined $took && balanced($w), 'the key slots are roughly balanced (each publisher owns 128..512)')
  or diag('outbox.workers: ' . describe($w));
note('publishers: ' . describe($w));
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM key_seq WHERE outbox.key_slot(key) <> (hashtext(key) & 1023)
	                                OR outbox.key_slot(key) NOT BETWEEN 0 AND 1023}),
	'0', 'outbox.key_slot(key) is hashtext(key) & 1023');
my @phase_a_pids = map { $_->{pid} } @$w;

# --- Phase A: no fault -------------------------------------------------------

my $t = time();
start_emitters('par_a', 0);
my @failed = finish_emitters();
is(scalar @failed, 0, 'phase A: the emitting sessions committed their load')
  or diag("failed sessions: @failed; see $log_dir/emitter_par_a_*");
note(sprintf('phase A: emitted in %.1f s', time() - $t));
ok(defined wait_until(sub { (pending() // -1) eq '0' }), 'phase A: the publishers drain the backlog');
note(sprintf('phase A: emitted and published in %.1f s', time() - $t));

$w = publishers();
is(join(' ', map { $_->{pid} } @$w), join(' ', @phase_a_pids),
	'phase A: the same publishers ran throughout')
  or diag('outbox.workers: ' . describe($w));
ok(@$w == $PUBLISHERS && !(grep { $_->{published} <= 0 } @$w),
	'phase A: every publisher published some events')
  or diag('outbox.workers: ' . describe($w));
my $published_sum = 0;
$published_sum += $_->{published} for @$w;
note('phase A publishers: ' . describe($w));
my $phase_a = reconcile('par_a', 'phase A', 1);
is($published_sum, $phase_a->{committed},
	"phase A: the publishers' published counters add up to the events (none published twice)");

# --- Phase B: SIGTERM and SIGKILL while the load goes on ---------------------

my $b_total = $SESSIONS * $TX{par_b};
$t = time();
start_emitters('par_b', 10);

# Terminate one publisher once a fifth of the load is in.
ok(defined wait_until(sub { (progress('par_b') // 0) >= $b_total / 5 }), 'phase B: the load is running');
$w = publishers();
my $victim = $w && @$w ? $w->[0]{pid} : die 'no publisher to terminate';
note(sprintf('phase B: at %.1f s, pg_terminate_backend(%d); %s', time() - $t, $victim, describe($w)));

# While it is gone the survivors own every slot; then the launcher restarts
# it, about a second later. The state in between is watched from inside the
# server, from the moment of the signal on, a sample every few ms: a psql per
# sample (and one for the signal) can take longer than that state lasts on a
# loaded machine. Returns whether the signal was sent; as seconds after it,
# when the survivors owned every slot (with what outbox.workers showed then),
# when a new publisher showed, and when all settled again (empty: not seen
# within the timeout); and the last sample.
$node->safe_psql('postgres', <<'EOF');
CREATE FUNCTION terminate_and_watch(victim int, before int[], timeout_s float8) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz := clock_timestamp();
  terminated boolean;
  n int;
  slots bigint;
  each_owns boolean;
  victim_there boolean;
  newcomer boolean;
  seen text;
  survivors text;
  new_pid text;
  settled text;
BEGIN
  terminated := pg_terminate_backend(victim);
  LOOP
    SELECT count(*), coalesce(sum(key_slots), 0), coalesce(bool_and(key_slots > 0), false),
           coalesce(bool_or(pid = victim), false), coalesce(bool_or(pid <> ALL (before)), false),
           string_agg(format('pid %s: %s slots, %s published', pid, key_slots, published), ', ' ORDER BY pid)
      INTO n, slots, each_owns, victim_there, newcomer, seen
      FROM outbox.workers WHERE database = 'postgres';
    IF NOT victim_there THEN
      IF survivors IS NULL AND n = 3 AND slots = 1024 AND each_owns THEN
        survivors := format('%s s after SIGTERM: %s', round(extract(epoch FROM clock_timestamp() - t0), 2), seen);
      END IF;
      IF new_pid IS NULL AND newcomer THEN
        new_pid := round(extract(epoch FROM clock_timestamp() - t0), 2)::text;
      END IF;
      IF n = 4 AND slots = 1024 AND each_owns THEN
        settled := round(extract(epoch FROM clock_timestamp() - t0), 2)::text;
        EXIT;
      END IF;
    END IF;
    EXIT WHEN clock_timestamp() - t0 > make_interval(secs => timeout_s);
    PERFORM pg_sleep(0.005);
  END LOOP;
  RETURN format('%s|%s|%s|%s|%s', terminated, survivors, new_pid, settled, seen);
END $$;
EOF
my ($terminated, $saw_survivors, $new_pid_at, $restarted, $last_seen) = split /\|/,
  $node->safe_psql('postgres', "SELECT terminate_and_watch($victim, ARRAY["
	  . join(',', map { $_->{pid} } @$w) . "], $PostgreSQL::Test::Utils::timeout_default)");
is($terminated, 't', 'phase B: pg_terminate_backend stops a publisher');
ok($saw_survivors ne '', 'phase B: while a publisher is down, the survivors own all key slots')
  or diag("last seen: $last_seen");
note("survivors: $saw_survivors") if $saw_survivors ne '';
ok($restarted ne '', 'phase B: the launcher restarts the terminated publisher and it takes key slots again')
  or diag("last seen: $last_seen");
$w = publishers();
note(sprintf('phase B: a new publisher showed %s s after SIGTERM, all settled after %s s: %s',
	$new_pid_at || '-', $restarted || '-', describe($w)));
my $restarted_at = time();
my %before_restart = map { $_ => 1 } @phase_a_pids;
my ($replacement) = map { $_->{pid} } grep { !$before_restart{ $_->{pid} } } @$w;

# SIGKILL another publisher once more than half of the load is in and the
# restarted one has worked for a second: the postmaster reinitializes and
# every process, the emitting sessions too, starts over.
ok(defined wait_until(sub {
	time() - $restarted_at >= 1 && (progress('par_b') // 0) >= $b_total / 2 }),
	'phase B: the load goes on');
my $progress_at_kill = progress('par_b');
$w = publishers() // $w;
my ($killed) = ((map { $_->{pid} } grep { !defined $replacement || $_->{pid} != $replacement } @$w),
	map { $_->{pid} } @$w);
# (kill with pid 0 would hit this test's own process group)
die 'no publisher to kill: ' . describe($w) unless defined $killed && $killed =~ /^[1-9]\d*$/;
my %before_kill = map { $_->{pid} => 1 } @$w;
my $log_offset = -s $node->logfile;
note(sprintf('phase B: at %.1f s (%d of %d transactions), kill -9 %d; %s',
	time() - $t, $progress_at_kill, $b_total, $killed, describe($w)));
ok(kill('KILL', $killed), 'phase B: SIGKILL a publisher');
my $kill_at = time();
ok(eval { $node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset) },
	'phase B: the server goes through crash recovery');
ok(defined wait_until(sub { (psql_tolerant($node, 'postgres', 'SELECT 1'))[1] eq '1' }),
	'phase B: the server is back');
$restarted = wait_until(sub {
	$w = publishers() or return 0;
	return settled($w, $PUBLISHERS) && !(grep { $before_kill{ $_->{pid} } } @$w);
});
ok(defined $restarted, "phase B: after crash recovery $PUBLISHERS publishers own all key slots again")
  or diag('last seen: ' . describe($w));
note(sprintf('phase B: publishers back %.1f s after kill -9: %s', time() - $kill_at, describe($w)));

# The emitting sessions died with the server: resume them where they stopped.
my @died = finish_emitters();
note('phase B: emitting sessions interrupted by the crash: ' . (join(' ', @died) || 'none'));
start_emitters('par_b', 10, @died) if @died;
@failed = finish_emitters();
is(scalar @failed, 0, 'phase B: the emitting sessions committed their load')
  or diag("failed sessions: @failed; see $log_dir/emitter_par_b_*");
is(progress('par_b'), $b_total, 'phase B: every planned transaction committed');
note(sprintf('phase B: emitted in %.1f s', time() - $t));
ok(defined wait_until(sub { (pending() // -1) eq '0' }), 'phase B: the publishers drain the backlog');
note(sprintf('phase B: emitted and published in %.1f s', time() - $t));
note('phase B publishers: ' . describe(publishers()));

my $phase_b = reconcile('par_b', 'phase B', 0);
cmp_ok($phase_a->{committed} + $phase_b->{committed}, '>=', 50_000, 'at least 50,000 events in all');

# --- Phase C: a backlog drained with batches in flight -----------------------

# The largest cycle any publisher reports (outbox.workers.last_batch_size) until
# the backlog is gone: above outbox.batch_size only when one transaction had
# several batches at the broker at once.
$node->safe_psql('postgres', q{
CREATE FUNCTION largest_cycle_until_drained() RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  largest int := 0;
  seen_backlog boolean := false;
  left_over bigint;
BEGIN
  FOR i IN 1 .. 12000 LOOP
    SELECT greatest(largest, coalesce(max(last_batch_size), 0)) INTO largest FROM outbox.workers;
    SELECT count(*) INTO left_over FROM outbox.events WHERE topic = 'par_c' AND status = 'pending';
    seen_backlog := seen_backlog OR left_over > 0;
    EXIT WHEN seen_backlog AND left_over = 0;
    PERFORM pg_sleep(0.005);
  END LOOP;
  RETURN largest;
END $$});
my $sampler_out = '';
my $sampler = IPC::Run::start(
	[ $node->installed_command('psql'), '-X', '-A', '-t', '-d', $node->connstr('postgres'),
	  OutboxNode::app_session_args(),    # one statement that must see the drain
	  '-c', 'SELECT largest_cycle_until_drained()' ],
	'<', \undef, '>', \$sampler_out, '2>&1');
$t = time();
$node->safe_psql('postgres', q{
BEGIN;
SELECT count(outbox.emit('par_c', jsonb_build_object('k', k, 'seq', n), k))
  FROM (SELECT format('key-%s', lpad((i % 500)::text, 3, '0')) AS k, i / 500 + 1 AS n
          FROM generate_series(0, 11999) i ORDER BY i) s;
SELECT pg_sleep(1.2);  -- the ids fall below the claims' safe bound (now - 1 s)
COMMIT;
});
ok(defined wait_until(sub { (pending() // -1) eq '0' }), 'phase C: the publishers drain the backlog');
note(sprintf('phase C: drained %.1f s after the emitting transaction began', time() - $t));
$sampler->finish;
chomp $sampler_out;
# The last line: app_session_args' SET may print its command tag before it.
cmp_ok($sampler_out =~ /^(\d+)\z/m ? $1 : 0, '>', 200,
	'phase C: publishers had more than one batch (outbox.batch_size = 200) in flight at once')
  or diag("largest cycle seen: $sampler_out");
note("phase C: largest cycle $sampler_out events");
reconcile('par_c', 'phase C', 1);

# The running counts behind outbox.stats are written by every publisher (each
# in its own shard): their sums match the events.
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT topic, pending, published, dead FROM outbox.stats
	                      EXCEPT
	                      SELECT topic, count(*) FILTER (WHERE status = 'pending'),
	                             count(*) FILTER (WHERE status = 'published'),
	                             count(*) FILTER (WHERE status = 'dead')
	                        FROM outbox.events GROUP BY topic) differing}),
	'0', 'outbox.stats matches the events after four publishers shared them');

note(sprintf('total %.1f s', time() - $T0));
$node->stop;
$kafka->stop;
done_testing();
