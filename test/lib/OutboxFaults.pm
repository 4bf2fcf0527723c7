# Shared code of the fault suite (t/070_faults_lose_nothing_kafka.pl,
# t/071_faults_lose_nothing_redis.pl): a steady emit load, a reconciliation of
# what a broker received against what committed, the scenarios both sinks
# share (publisher killed, server crash, long transaction, long outage), and
# the reliability table: one TSV row per fault.
#
# The load (OutboxFaults::Load): a few psql sessions, each running the
# procedure fault_load() in a loop of small transactions until told to stop.
# Each committed transaction emits $per_tx keyed events, with per key a
# sequence number kept in the same transaction (table fault_key_seq; each
# session has keys of its own), and every other transaction a keyless event.
# Every 10th transaction is rolled back on purpose after emitting, and every
# 10th commits after rolling back a subtransaction that emitted: what they
# emitted says "rolled_back" and must never arrive. The topic comes from
# fault_load_ctl at each transaction, so the load moves from one scenario's
# topic to the next without restarting; between scenarios it pauses (the
# sessions stay connected and emit nothing), so that what a scenario emits is
# bounded by how long its fault lasts, not by how long the previous topic took
# to reconcile on a loaded machine. After a crash the sessions are simply
# started again (their state is in tables, committed with their events).
#
# The reconciliation (reconcile): the committed events of one topic as
# outbox.events has them, against the deliveries a callback fetched from the
# broker (Kafka: kafka_consume, by the outbox-id header; Redis: XRANGE, field
# id). It returns
#   committed             events of the topic in outbox.events
#   delivered_distinct    committed events that arrived at least once
#   lost                  committed events that never arrived (must be 0)
#   duplicates            deliveries beyond the first of an event
#   rolled_back_delivered deliveries of events from rolled-back (sub)transactions
#   stray                 other deliveries whose id did not commit on this topic
#   order_violations      per key, first deliveries that came after the first
#                         delivery of a later event of the key (keys in one
#                         Kafka partition or one stream; a key spread over
#                         several partitions counts in split_keys)
# The completeness of outbox.events itself (no committed event vanished from
# the table) is checked by table_complete from the load's own bookkeeping.
#
# The scenario driver (OutboxFaults::Suite, new_suite): scenario() moves the
# load to the scenario's own topic, runs the fault, measures the recovery,
# pauses the load, waits until the topic is drained, reconciles it, records
# the row and runs the checks every fault shares. The faults both sinks share
# are here too: sigkill_publishers, immediate_stop, long_transaction and
# long_outage (with the retention check).
#
# record_result appends one row per fault to reliability.tsv (in
# $OUTBOX_RELIABILITY_DIR if set, else in PostgreSQL::Test::Utils' tmp_check)
# and note()s it. Columns: sink, fault, injections, committed, lost,
# duplicates, rolled_back_delivered, order_violations, recovery_s (seconds
# from the end of the fault until no event emitted before that moment is
# pending), detail (free text: what else the scenario measured).
package OutboxFaults;

use strict;
use warnings;
use Carp;
use Exporter 'import';
use Fcntl qw(:flock);
use File::Basename qw(dirname);
use File::Path qw(make_path);
use IPC::Run ();
use OutboxNode ();
use PostgreSQL::Test::Utils ();
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT_OK = qw(fault_node new_load reconcile record_result reliability_file
  backlog wait_backlog_cleared wait_topic_drained table_complete
  publishers wait_publishers server_answers wait_server fmt_s);

# --- small helpers ------------------------------------------------------------

sub fmt_s { return defined $_[0] ? sprintf('%.2f', $_[0]) : 'NA' }

# How long to wait for something that must happen (a drain, a restart):
# PostgreSQL::Test::Utils' timeout_default, generous for a loaded machine.
sub patience { return $PostgreSQL::Test::Utils::timeout_default }

# A query's output, or undef while the server does not answer (crash, restart).
sub _try {
	my ($node, $sql, $db) = @_;
	my ($ret, $out) = OutboxNode::psql_tolerant($node, $db // 'postgres', $sql);
	return $ret == 0 ? $out : undef;
}

sub server_answers { return (_try($_[0], 'SELECT 1') // '') eq '1' }

# Waits until the server answers queries; returns the seconds waited or undef.
sub wait_server {
	my ($node, $timeout) = @_;
	return _poll(sub { server_answers($node) }, $timeout // patience(), 0.1);
}

sub _poll {
	my ($check, $timeout, $step) = @_;
	my $start = time();
	while (1) {
		return time() - $start if $check->();
		return undef if time() - $start >= $timeout;
		usleep(int(($step // 0.05) * 1e6));
	}
}

# Pending events (of $topic, or all), only those emitted at or before the Unix
# time $until when given; undef while the server does not answer.
sub backlog {
	my ($node, %o) = @_;
	my @where = ("status = 'pending'");
	push @where, "topic = '$o{topic}'" if defined $o{topic};
	push @where, sprintf('created_at <= to_timestamp(%.6f)', $o{until}) if defined $o{until};
	return _try($node, 'SELECT count(*) FROM outbox.events WHERE ' . join(' AND ', @where));
}

# Recovery time: seconds from $end (a Unix time) until no event emitted up to
# $end is pending any more; undef when that takes longer than $timeout
# (default: patience()).
sub wait_backlog_cleared {
	my ($node, $end, $timeout) = @_;
	my $left = _poll(sub { (backlog($node, until => $end) // -1) eq '0' }, $timeout // patience(), 0.05);
	return defined $left ? time() - $end : undef;
}

# Every event of $topic is published (nothing pending, nothing dead). A
# loaded machine stretches a drain of tens of thousands of events past any
# fixed bound: this gives up only when the count of events not published has
# not moved for $timeout seconds (default: patience()), or after four times
# that in all. Returns the seconds waited, or undef.
sub wait_topic_drained {
	my ($node, $topic, $timeout) = @_;
	$timeout //= patience();
	my $start = time();
	my ($last, $since) = (undef, $start);
	while (1) {
		my $left = _try($node,
			"SELECT count(*) FROM outbox.events WHERE topic = '$topic' AND status <> 'published'") // -1;
		return time() - $start if $left eq '0';
		($last, $since) = ($left, time()) if !defined $last || $left ne $last;
		return undef if time() - $since >= $timeout || time() - $start >= 4 * $timeout;
		usleep(100_000);
	}
}

# The database's publishers as [ { pid, key_slots } ], by pid; undef while the
# server does not answer.
sub publishers {
	my ($node, $db) = @_;
	my $out = _try($node, "SELECT pid, key_slots FROM outbox.workers WHERE database = '"
		  . ($db // 'postgres') . "' ORDER BY pid");
	return undef unless defined $out;
	return [ map { my ($p, $s) = split /\|/; { pid => $p, key_slots => $s } } grep { length } split /\n/, $out ];
}

# Waits for $n publishers owning all 1024 key slots, none of them one of the
# pids in @$old; returns them, or undef after $timeout seconds (default:
# patience()).
sub wait_publishers {
	my ($node, $n, $old, $timeout) = @_;
	my %old = map { $_ => 1 } @{ $old || [] };
	my $w;
	my $ok = _poll(sub {
		$w = publishers($node) or return 0;
		my $slots = 0;
		$slots += $_->{key_slots} for @$w;
		return @$w == $n && $slots == 1024 && !(grep { $old{ $_->{pid} } } @$w);
	}, $timeout // patience(), 0.1);
	return defined $ok ? $w : undef;
}

# --- the load -------------------------------------------------------------------

sub new_load { return OutboxFaults::Load->new(@_) }

# Whether outbox.events still holds every event the load committed: per key
# every sequence number from 1 to the key's counter, per session the keyless
# event of every even transaction. Returns (missing keyed, missing keyless).
sub table_complete {
	my ($node) = @_;
	# One statement, one snapshot: the counters and the events agree.
	my $out = $node->safe_psql('postgres', q{
		WITH ev AS (SELECT key, payload FROM outbox.events
		             WHERE payload ? 's' AND NOT payload ? 'rolled_back')
		SELECT (SELECT count(*) FROM fault_key_seq k, generate_series(1, k.seq) s
		         WHERE NOT EXISTS (SELECT 1 FROM ev WHERE ev.key = k.key AND (ev.payload->>'seq')::int = s)),
		       (SELECT count(*) FROM fault_load_progress p, generate_series(0, p.tx - 1, 2) d
		         WHERE NOT EXISTS (SELECT 1 FROM ev WHERE ev.key IS NULL
		                              AND (ev.payload->>'s')::int = p.session AND (ev.payload->>'tx')::int = d))});
	return split /\|/, $out;
}

# --- reconciliation ---------------------------------------------------------------

# reconcile(node => $node, topic => $topic, fetch => sub { my ($patient) = @_; ... },
#           order_exempt => { id => 1, ... })
# fetch returns the deliveries as [ { id, value, lane, pos } ] (lane: Kafka
# partition or stream; pos: offset or index). When events seem lost, fetch is
# called again with $patient 1, 2, 3 (ever longer reads: a Kafka read ends
# once nothing came for a while, its start on a loaded machine included)
# before concluding.
sub reconcile {
	my (%o) = @_;
	my $node = $o{node};
	my $topic = $o{topic};
	my %committed;    # id => { key, seq, status }
	for my $row (split /\n/, $node->safe_psql('postgres', qq{
			SELECT id, coalesce(key, ''), coalesce(payload->>'seq', ''), status
			  FROM outbox.events WHERE topic = '$topic'})) {
		my ($id, $key, $seq, $status) = split /\|/, $row;
		$committed{$id} = { key => $key, seq => $seq, status => $status };
	}
	my $r;
	for my $patient (0 .. 3) {
		$r = _reconcile_deliveries(\%committed, $o{fetch}->($patient), $o{order_exempt} || {});
		last if $r->{lost} == 0;
	}
	$r->{committed} = scalar keys %committed;
	$r->{not_published} = grep { $_->{status} ne 'published' } values %committed;
	note(sprintf('%s: %d committed (%d keyless), %d deliveries, %d distinct, %d lost, %d duplicates, '
		  . '%d rolled back delivered, %d stray, %d order violations, %d keys split over partitions',
		$topic, $r->{committed}, scalar(grep { $_->{key} eq '' } values %committed), $r->{deliveries},
		$r->{delivered_distinct}, $r->{lost}, $r->{duplicates}, $r->{rolled_back_delivered},
		$r->{stray}, $r->{order_violations}, $r->{split_keys}));
	if ($r->{lost}) {
		my @ids = @{ $r->{lost_ids} }[ 0 .. ($r->{lost} > 10 ? 9 : $r->{lost} - 1) ];
		diag("$topic: lost events, e.g.:\n" . $node->safe_psql('postgres',
			q{SELECT id, key, payload->>'seq', status, attempts, published_at, last_error
			    FROM outbox.events WHERE id IN (} . join(', ', map { "'$_'" } @ids) . ')'));
	}
	diag("$topic: stray deliveries, e.g. @{$r->{stray_ids}}[0 .. ($r->{stray} > 5 ? 4 : $r->{stray} - 1)]")
	  if $r->{stray};
	if ($r->{order_violations}) {
		diag("$topic: out of order, e.g. " . join('; ', @{ $r->{order_examples} }));
		# What the database says of the late ones: a refusal in their history
		# tells the README's Limits case (a split Produce request) from a bug.
		diag($node->safe_psql('postgres',
			q{SELECT id, key, payload->>'seq', status, attempts, last_error
			    FROM outbox.events WHERE id IN (} . join(', ', map { "'$_'" } @{ $r->{order_ids} }) . ')'));
	}
	return $r;
}

sub _reconcile_deliveries {
	my ($committed, $deliveries, $exempt) = @_;
	my (%copies, %lanes, %max_seq, @stray, @order_examples, @order_ids);
	my ($rolled_back, $violations) = (0, 0);
	for my $d (sort { $a->{lane} cmp $b->{lane} || $a->{pos} <=> $b->{pos} } @$deliveries) {
		my $id = $d->{id};
		if (defined $d->{value} && $d->{value} =~ /"rolled_back"/) {
			$rolled_back++;
			next;
		}
		my $c = defined $id ? $committed->{$id} : undef;
		if (!$c) {
			push @stray, $id // '(no id)';
			next;
		}
		next if $copies{$id}++;    # only first deliveries count for order
		next if $c->{key} eq '' || $c->{seq} eq '' || $exempt->{$id};
		$lanes{ $c->{key} }{ $d->{lane} } = 1;
		my $max = $max_seq{ $c->{key} };
		if (defined $max && $c->{seq} < $max) {
			$violations++;
			if (@order_examples < 5) {
				push @order_examples, "key $c->{key}: seq $c->{seq} ($id) after seq $max";
				push @order_ids, $id;
			}
		}
		$max_seq{ $c->{key} } = $c->{seq} if !defined $max || $c->{seq} > $max;
	}
	my @lost = sort grep { !$copies{$_} } keys %$committed;
	my $dups = 0;
	$dups += $_ - 1 for values %copies;
	return {
		deliveries => scalar @$deliveries,
		delivered_distinct => scalar keys %copies,
		lost => scalar @lost,
		lost_ids => \@lost,
		duplicates => $dups,
		rolled_back_delivered => $rolled_back,
		stray => scalar @stray,
		stray_ids => \@stray,
		order_violations => $violations,
		order_examples => \@order_examples,
		order_ids => \@order_ids,
		split_keys => scalar(grep { keys %{ $lanes{$_} } > 1 } keys %lanes),
	};
}

# The events the publishers logged, from byte $offset of the server log on,
# as arriving after a later event of their key because the broker refused
# them while it took that later one (Dispatcher::NoteOvertaken).
sub split_request_late_ids {
	my ($node, $offset) = @_;
	my @ids;
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
	while ($log =~ /will arrive after a later event of their key[^:\n]*: ([0-9a-f, .-]+)/g) {
		push @ids, grep { /^[0-9a-f-]{36}$/ } split /,\s*/, $1;
	}
	return @ids;
}

# --- the reliability table ----------------------------------------------------------

my @COLUMNS = qw(sink fault injections committed lost duplicates rolled_back_delivered
  order_violations recovery_s detail);

sub reliability_file {
	no warnings 'once';
	my $dir = $ENV{OUTBOX_RELIABILITY_DIR} || $PostgreSQL::Test::Utils::tmp_check;
	return "$dir/reliability.tsv";
}

# record_result(sink => 'kafka', fault => '...', injections => N, result => $reconciled,
#               recovery_s => S, detail => '...')
sub record_result {
	my (%o) = @_;
	my $r = $o{result} || {};
	my %row = (
		sink => $o{sink},
		fault => $o{fault},
		injections => $o{injections},
		committed => $r->{committed},
		lost => $r->{lost},
		duplicates => $r->{duplicates},
		rolled_back_delivered => $r->{rolled_back_delivered},
		order_violations => $r->{order_violations},
		recovery_s => fmt_s($o{recovery_s}),
		detail => $o{detail} // '');
	my $line = join("\t", map { my $v = $row{$_} // 'NA'; $v =~ s/[\t\n]/ /g; $v } @COLUMNS);
	my $file = reliability_file();
	make_path(dirname($file));
	open(my $fh, '>>', $file) or croak "cannot open $file: $!";
	flock($fh, LOCK_EX) or croak "cannot lock $file: $!";
	seek($fh, 0, 2);
	print $fh join("\t", @COLUMNS), "\n" if tell($fh) == 0;
	print $fh "$line\n";
	close($fh) or croak "cannot write $file: $!";
	note("reliability: $line");
	return;
}

# --- the steady emit load --------------------------------------------------------------

package OutboxFaults::Load;

use strict;
use warnings;
use Carp;
use IPC::Run ();
use Test::More;
use Time::HiRes qw(time usleep);

# new(node => $node, sessions => 3, keys => 30 (per session), per_tx => 3,
#     sleep_ms => 20, topic => 'first.topic')
sub new {
	my ($class, %o) = @_;
	my $self = bless {
		node => $o{node},
		sessions => $o{sessions} // 3,
		keys => $o{keys} // 30,
		per_tx => $o{per_tx} // 3,
		sleep_ms => $o{sleep_ms} // 20,
		topic => $o{topic} // 'faults.load',
		h => {},
		runs => 0,
		owner_pid => $$,
	}, $class;
	my ($s, $k, $t) = ($self->{sessions}, $self->{keys}, $self->{topic});
	$self->{node}->safe_psql('postgres', <<"EOF");
CREATE TABLE fault_load_ctl (one boolean PRIMARY KEY DEFAULT true CHECK (one),
                             topic text NOT NULL, stop boolean NOT NULL DEFAULT false,
                             pause boolean NOT NULL DEFAULT false);
INSERT INTO fault_load_ctl (topic) VALUES ('$t');
CREATE TABLE fault_key_seq (key text PRIMARY KEY, seq int NOT NULL DEFAULT 0);
INSERT INTO fault_key_seq
  SELECT format('k%s-%s', s, lpad(i::text, 3, '0')) FROM generate_series(0, $s - 1) s, generate_series(0, $k - 1) i;
CREATE TABLE fault_load_progress (session int PRIMARY KEY, tx int NOT NULL DEFAULT 0, topic text);
INSERT INTO fault_load_progress (session) SELECT generate_series(0, $s - 1);
CREATE PROCEDURE fault_load(p_session int, p_keys int, p_per_tx int, p_sleep_ms int)
LANGUAGE plpgsql AS \$\$
DECLARE
  t text;
  halt boolean;
  paused boolean;
  d int;
  k text;
  n int;
BEGIN
  LOOP
    SELECT topic, stop, pause INTO t, halt, paused FROM fault_load_ctl;
    EXIT WHEN halt;
    IF paused THEN
      -- Said once, in a transaction of its own: after it this session emits
      -- nothing until the pause ends (its next snapshot sees the change).
      UPDATE fault_load_progress SET topic = NULL WHERE session = p_session AND topic IS NOT NULL;
      COMMIT;
      PERFORM pg_sleep(0.05);
      CONTINUE;
    END IF;
    SELECT tx INTO d FROM fault_load_progress WHERE session = p_session;
    IF d % 10 = 4 THEN
      -- A transaction that rolls back (its sequence number too): none of its
      -- events may ever arrive.
      k := format('k%s-%s', p_session, lpad(floor(random() * p_keys)::int::text, 3, '0'));
      UPDATE fault_key_seq SET seq = seq + 1 WHERE key = k RETURNING seq INTO n;
      PERFORM outbox.emit(t, jsonb_build_object('k', k, 'seq', n, 'rolled_back', true), k);
      PERFORM outbox.emit(t, jsonb_build_object('s', p_session, 'rolled_back', true));
      ROLLBACK;
    END IF;
    UPDATE fault_load_progress SET tx = tx + 1, topic = t WHERE session = p_session;
    FOR j IN 1 .. p_per_tx LOOP
      k := format('k%s-%s', p_session, lpad(floor(random() * p_keys)::int::text, 3, '0'));
      UPDATE fault_key_seq SET seq = seq + 1 WHERE key = k RETURNING seq INTO n;
      PERFORM outbox.emit(t, jsonb_build_object('k', k, 'seq', n, 's', p_session), k);
    END LOOP;
    IF d % 2 = 0 THEN
      PERFORM outbox.emit(t, jsonb_build_object('s', p_session, 'tx', d));
    END IF;
    IF d % 10 = 7 THEN
      -- A subtransaction that emits and rolls back inside a committing one.
      BEGIN
        k := format('k%s-%s', p_session, lpad(floor(random() * p_keys)::int::text, 3, '0'));
        UPDATE fault_key_seq SET seq = seq + 1 WHERE key = k RETURNING seq INTO n;
        PERFORM outbox.emit(t, jsonb_build_object('k', k, 'seq', n, 'rolled_back', 'subtransaction'), k);
        RAISE EXCEPTION 'roll back the subtransaction';
      EXCEPTION WHEN raise_exception THEN
        NULL;
      END;
    END IF;
    COMMIT;
    IF p_sleep_ms > 0 THEN
      PERFORM pg_sleep(p_sleep_ms / 1000.0);
    END IF;
  END LOOP;
END
\$\$;
EOF
	return $self;
}

sub topic { return $_[0]{topic} }

# Starts the sessions that are not running (all by default).
sub start {
	my ($self) = @_;
	my $node = $self->{node};
	my $log_dir = $PostgreSQL::Test::Utils::log_path;
	for my $s (0 .. $self->{sessions} - 1) {
		next if $self->{h}{$s};
		$self->{runs}++;
		my $timer = IPC::Run::timeout(3600);
		my $h = IPC::Run::start(
			[ $node->installed_command('psql'), '-X', '-q', '-v', 'ON_ERROR_STOP=1',
			  '-d', $node->connstr('postgres') . " application_name=fault_load_$s",
			  OutboxNode::app_session_args(),
			  '-c', "CALL fault_load($s, $self->{keys}, $self->{per_tx}, $self->{sleep_ms})" ],
			'<', \undef, '>', "$log_dir/fault_load_${s}_$self->{runs}.log", '2>&1', $timer);
		$self->{h}{$s} = { h => $h, timer => $timer };
	}
	return;
}

# Reaps every session (after a crash they have all exited); returns the
# sessions whose psql failed.
sub reap {
	my ($self, $timeout) = @_;
	my @failed;
	for my $s (sort keys %{ $self->{h} }) {
		my $e = delete $self->{h}{$s};
		$e->{timer}->start($timeout // OutboxFaults::patience());
		my $ok = eval { $e->{h}->finish };
		if (!$ok) {
			push @failed, $s;
			eval { $e->{h}->kill_kill(grace => 2) };
		}
	}
	return @failed;
}

# After a server crash or restart: start every session again; they go on
# from their committed state.
sub restart {
	my ($self) = @_;
	my @died = $self->reap;
	$self->start;
	return scalar @died;
}

# Sessions connected and running the load.
sub alive {
	my ($self) = @_;
	my ($ret, $out) = OutboxNode::psql_tolerant($self->{node}, 'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'fault\_load\_%' AND state <> 'idle'});
	return $ret == 0 ? $out : 0;
}

# Committed transactions of all sessions; undef while the server does not answer.
sub progress {
	my ($self) = @_;
	my ($ret, $out) = OutboxNode::psql_tolerant($self->{node}, 'postgres', 'SELECT sum(tx) FROM fault_load_progress');
	return $ret == 0 ? $out : undef;
}

# Moves the load to $topic (ending a pause) and waits until every running
# session has committed a transaction on it (after that nothing more goes to
# the old one).
sub set_topic {
	my ($self, $topic) = @_;
	$self->{node}->safe_psql('postgres', "UPDATE fault_load_ctl SET topic = '$topic', pause = false");
	$self->{topic} = $topic;
	$self->{paused} = 0;
	return $self->_wait_sessions("topic = '$topic'", "move to $topic");
}

# Pauses the load and waits until every running session has seen it (after
# that no session emits until set_topic).
sub pause {
	my ($self) = @_;
	$self->{node}->safe_psql('postgres', 'UPDATE fault_load_ctl SET pause = true');
	$self->{paused} = 1;
	return $self->_wait_sessions('topic IS NULL', 'pause');
}

sub paused { return $_[0]{paused} }

sub _wait_sessions {
	my ($self, $cond, $what) = @_;
	my $n = $self->{sessions};
	my $start = time();
	my $patience = OutboxFaults::patience();
	while (time() - $start < $patience) {
		return 1 if $self->{node}->safe_psql('postgres',
			"SELECT count(*) FROM fault_load_progress WHERE $cond") == $n;
		usleep(20_000);
	}
	croak "the load did not $what within $patience s";
}

# Stops every session; returns the sessions whose psql failed.
sub stop {
	my ($self) = @_;
	$self->{node}->safe_psql('postgres', 'UPDATE fault_load_ctl SET stop = true');
	my @failed = $self->reap;
	$self->{node}->safe_psql('postgres', 'UPDATE fault_load_ctl SET stop = false');
	return @failed;
}

sub DESTROY {
	my ($self) = @_;
	local ($@, $!, $?);
	# Only the process that started the sessions may stop them (not a fork).
	return unless defined $self->{owner_pid} && $self->{owner_pid} == $$;
	for my $e (values %{ $self->{h} || {} }) {
		eval { $e->{h}->kill_kill(grace => 1) };
	}
	return;
}

package OutboxFaults;

# --- scenarios both sinks share -----------------------------------------------------------

# The node both fault suites run: preloaded (OutboxNode), two publishers,
# small batches so a fault catches several, crash restarts on, the extension
# created.
# Options: fault_injection => 1 (the test build, see OutboxNode), extra
# postgresql.conf lines in conf.
sub fault_node {
	my ($name, %o) = @_;
	my $node = OutboxNode::outbox_node($name, <<'EOF' . ($o{conf} // ''), fault_injection => $o{fault_injection});
outbox.workers = 2
outbox.batch_size = 200
max_worker_processes = 16
restart_after_crash = on
EOF
	$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
	return $node;
}

# A suite: the node, the load, how to read a topic back from the broker, how
# many publishers run, and its scenarios in the order they run (each on topic
# <prefix>.<name>; the load pauses between them, and after the last runs
# without a fault on <prefix>.tail). new_suite(node, load, sink => 'kafka', prefix => 'fk',
# publishers => 2, scenarios => [...], fetch => sub { my ($topic, $patient) = @_; ... })
# Seeds Perl's random numbers (printed; OUTBOX_FAULT_SEED repeats a run).
sub new_suite {
	my (%o) = @_;
	my $t0 = time();
	my $seed = $ENV{OUTBOX_FAULT_SEED} // (int($t0) ^ $$);
	srand($seed);
	note("random seed $seed (set OUTBOX_FAULT_SEED to repeat)");
	return bless { %o, t0 => $t0, today => `date -u +%F` }, 'OutboxFaults::Suite';
}

package OutboxFaults::Suite;

use strict;
use warnings;
use Carp;
use IPC::Run ();
use PostgreSQL::Test::Utils qw(slurp_file);
use Test::More;
use Time::HiRes qw(time usleep);

# Once the publishers own the key slots: start the load and let it settle.
sub start {
	my ($self) = @_;
	ok(defined OutboxFaults::wait_publishers($self->{node}, $self->{publishers}, []),
		"$self->{publishers} publishers share the key slots");
	$self->{load}->start;
	usleep(1_000_000);
}

# scenario() for the named one of the suite's scenarios.
sub run {
	my ($self, $name, %o) = @_;
	my @names = @{ $self->{scenarios} };
	my ($at) = grep { $names[$_] eq $name } 0 .. $#names;
	croak "unknown scenario $name" unless defined $at;
	return $self->scenario(name => $name, %o);
}

# How often the server log matches $re from byte $offset on.
sub log_count {
	my ($self, $re, $offset) = @_;
	my $n = () = slurp_file($self->{node}->logfile, $offset) =~ /$re/g;
	return $n;
}

# scenario(name => 'down_up', fault => 'brokers down and up 3 times',
#          lose_nothing => 'nothing is lost when the brokers go down and up 3 times',
#          inject => sub { my ($topic) = @_; ...; return { injections => N, end => time(),
#                         detail => '...', order_exempt => {...} } })
# The load runs on the scenario's topic from before the fault until it has
# recovered; then the load pauses and the topic is drained and reconciled.
sub scenario {
	my ($self, %o) = @_;
	my ($node, $load) = ($self->{node}, $self->{load});
	my $topic = "$self->{prefix}.$o{name}";
	my $t = time();
	$load->set_topic($topic) if $load->topic ne $topic || $load->paused;
	note("--- $self->{sink}: $o{fault} (topic $topic) at " . sprintf('%.1f s', $t - $self->{t0}));
	my $log_offset = -s $node->logfile;
	my $f = $o{inject}->($topic);
	# recovery_timeout: a longer wait than patience() for a scenario that needs it.
	my $wait = $o{recovery_timeout} // 0;
	$wait = OutboxFaults::patience() if $wait < OutboxFaults::patience();
	my $recovery = OutboxFaults::wait_backlog_cleared($node, $f->{end}, $wait);
	ok(defined $recovery, "$o{fault}: the backlog drains after the fault")
	  or diag('pending: ' . (OutboxFaults::backlog($node) // 'no answer'));
	$load->pause;
	ok(defined OutboxFaults::wait_topic_drained($node, $topic),
		"$o{fault}: every event of the scenario is published in the end")
	  or diag($node->safe_psql('postgres',
		"SELECT status, count(*), max(attempts), min(last_error) FROM outbox.events WHERE topic = '$topic' GROUP BY 1"));
	# Events the publisher logged as overtaken by a later event of their key
	# (a Produce request split by librdkafka, the first refused: README,
	# Limits) arrive late by that known limit; any other break of order fails.
	my %exempt = %{ $f->{order_exempt} || {} };
	my @split = OutboxFaults::split_request_late_ids($node, $log_offset);
	$exempt{$_} = 1 for @split;
	my $r = OutboxFaults::reconcile(node => $node, topic => $topic,
		fetch => sub { $self->{fetch}->($topic, $_[0]) }, order_exempt => \%exempt);
	my $detail = $f->{detail};
	$detail .= '; ' . scalar(@split) . ' events logged as overtaken in a split Produce request (exempt from the order check)'
	  if @split;
	OutboxFaults::record_result(sink => $self->{sink}, fault => $o{fault}, injections => $f->{injections},
		result => $r, recovery_s => $recovery, detail => $detail);
	is($r->{lost}, 0, $o{lose_nothing});
	is($r->{rolled_back_delivered}, 0, "$o{fault}: no event of a rolled-back transaction arrives");
	is($r->{stray}, 0, "$o{fault}: nothing arrives that was not committed");
	is($r->{order_violations} + $r->{split_keys}, 0, "$o{fault}: per key, events arrive in emit order");
	note(sprintf('%s took %.1f s', $o{name}, time() - $t));
	return $r;
}

# The load on $topic for a few seconds without a fault, then paused.
sub run_tail {
	my ($self, $topic) = @_;
	$self->{load}->set_topic($topic);
	usleep(3_000_000);
	$self->{load}->pause;
	return;
}

# After the last scenario: run the load a few seconds more without a fault,
# stop it, reconcile what it emitted then, and check that outbox.events kept
# every event, that nothing is left pending or dead, and that no server
# process crashed on its own.
sub finish {
	my ($self) = @_;
	my ($node, $load) = ($self->{node}, $self->{load});
	my $topic = "$self->{prefix}.tail";
	$self->run_tail($topic);
	my @failed = $load->stop;
	is(scalar @failed, 0, 'the emitting sessions stop cleanly') or diag("failed sessions: @failed");
	ok(defined OutboxFaults::wait_topic_drained($node, $topic), 'the last events are published');
	my $tail = OutboxFaults::reconcile(node => $node, topic => $topic,
		fetch => sub { $self->{fetch}->($topic, $_[0]) });
	OutboxFaults::record_result(sink => $self->{sink}, fault => 'none (after the faults)', injections => 0,
		result => $tail, detail => 'the load between the last fault and its stop');
	is($tail->{lost} + $tail->{stray} + $tail->{rolled_back_delivered}, 0,
		'without a fault, every committed event arrives');

	# outbox.events itself lost nothing: every sequence number the load
	# committed is there (retention could only have taken a whole earlier day,
	# hence the date check).
	if (`date -u +%F` eq $self->{today}) {
		my ($keyed, $keyless) = OutboxFaults::table_complete($node);
		is("$keyed/$keyless", '0/0', 'outbox.events holds every event the load committed');
	}
	else {
		note('the UTC day changed during the test: the completeness of outbox.events is not checked');
	}
	is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}), '0',
		'nothing is left pending or dead');
	my $crashes = () = slurp_file($node->logfile) =~ /was terminated by signal (?!9:)\d+/g;
	is($crashes, 0, 'no server process crashed on its own (only the SIGKILLs we sent)');
	note(sprintf('load: %d transactions committed; total %.1f s; results in %s',
		$node->safe_psql('postgres', 'SELECT sum(tx) FROM fault_load_progress'), time() - $self->{t0},
		OutboxFaults::reliability_file()));
}

# Kills one publisher (at random) with SIGKILL $times times at random moments
# while the load runs: each time the postmaster reinitializes, and we wait
# for the server and all publishers to be back and restart the load.
sub sigkill_publishers {
	my ($self, $topic, %o) = @_;
	my ($node, $load) = ($self->{node}, $self->{load});
	my $times = $o{times} // 10;
	my ($kills, $mid_batch, $max_back, $end) = (0, 0, 0, undef);
	for my $i (1 .. $times) {
		# A random moment: 0.2 .. 1.5 s into the load's run.
		usleep(int((0.2 + rand(1.3)) * 1e6));
		my $w = OutboxFaults::publishers($node);
		if (!$w || !@$w) {
			fail("kill $i: no publisher to kill");
			last;
		}
		my $victim = $w->[ int(rand(@$w)) ]{pid};
		die "bad pid '$victim'" unless $victim =~ /^[1-9]\d*$/;
		my $busy = $node->safe_psql('postgres',
			"SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $victim");
		my $offset = -s $node->logfile;
		kill('KILL', $victim) or last;
		$end = time();
		$kills++;
		$mid_batch++ if $busy eq 'Extension';
		my $seen = OutboxFaults::_poll(sub {
			$node->log_contains(qr/all server processes terminated; reinitializing/, $offset) },
			OutboxFaults::patience(), 0.05);
		my $up = defined $seen ? OutboxFaults::wait_server($node) : undef;
		my $back = defined $up
		  ? OutboxFaults::wait_publishers($node, $self->{publishers}, [ map { $_->{pid} } @$w ])
		  : undef;
		if (!$back) {
			fail("kill $i: the server and its publishers come back after SIGKILL of publisher $victim");
			last;
		}
		my $took = time() - $end;
		$max_back = $took if $took > $max_back;
		$load->restart;
		note(sprintf('kill %d: publisher %d (%s), server and publishers back in %.2f s', $i, $victim,
			$busy eq 'Extension' ? 'waiting for the broker' : 'busy with the database or idle', $took));
	}
	is($kills, $times, "the publisher was killed with SIGKILL $times times and the server came back each time");
	return { injections => $kills, end => $end,
		detail => sprintf('%d kills while waiting for the broker; back within %.1f s each', $mid_batch, $max_back) };
}

# pg_ctl stop -m immediate while a publisher has a batch at the broker, then
# start. $slow->(1) makes the broker slow (so a batch is in flight), $slow->(0)
# undoes it.
sub immediate_stop {
	my ($self, $topic, %o) = @_;
	my ($node, $load) = ($self->{node}, $self->{load});
	$o{slow}->(1) if $o{slow};
	my $in_flight = OutboxFaults::_poll(sub {
		$node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
			WHERE backend_type = 'outbox publisher' AND wait_event_type = 'Extension'}) > 0 },
		OutboxFaults::patience(), 0.01);
	my $pending = OutboxFaults::backlog($node, topic => $topic);
	ok(defined $in_flight, 'immediate stop: caught a publisher with a batch at the broker');
	$node->stop('immediate');
	$o{slow}->(0) if $o{slow};
	$node->start;
	my $end = time();
	$load->restart;
	ok(defined OutboxFaults::wait_publishers($node, $self->{publishers}, []), 'the publishers run again after the restart');
	return { injections => 1, end => $end,
		detail => "stopped with $pending pending on the topic; recovery counted from the start" };
}

# A transaction holding the xmin horizon back (BEGIN; SELECT pg_current_xact_id()),
# and another that emitted, both open for $hold seconds while the load runs:
# delivery goes on and the backlog stays low.
sub long_transaction {
	my ($self, $topic, %o) = @_;
	my $node = $self->{node};
	my $hold = $o{hold} // 6;
	my $log_dir = $PostgreSQL::Test::Utils::log_path;
	# The steady state first: the largest backlog in 2 s without the holders.
	my $before = 0;
	my $t = time();
	while (time() - $t < 2) {
		my $b = OutboxFaults::backlog($node) // 0;
		$before = $b if $b > $before;
		usleep(100_000);
	}
	my $published_sql = "SELECT count(*) FROM outbox.events WHERE topic = '$topic' AND status = 'published'";
	my $emitted_sql = "SELECT count(*) FROM outbox.events WHERE topic = '$topic'";
	my ($pub0, $emit0) = map { $node->safe_psql('postgres', $_) } $published_sql, $emitted_sql;
	my @holders;
	for my $sql ('SELECT pg_current_xact_id()',
		"SELECT outbox.emit('$topic', '{\"long\": \"transaction\"}', 'long-transaction')") {
		push @holders, IPC::Run::start(
			[ $node->installed_command('psql'), '-X', '-q', '-v', 'ON_ERROR_STOP=1',
			  '-d', $node->connstr('postgres') . ' application_name=xmin_holder',
			  '-c', 'BEGIN', '-c', $sql, '-c', "SELECT pg_sleep($hold)", '-c', 'COMMIT' ],
			'<', \undef, '>', "$log_dir/xmin_holder_" . scalar(@holders) . '.log', '2>&1');
	}
	my $held = OutboxFaults::_poll(sub {
		$node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'xmin_holder' AND backend_xid IS NOT NULL}) == 2 },
		OutboxFaults::patience(), 0.02);
	ok(defined $held, 'long transaction: two transactions with an xid stay open');
	my $held_at = time();
	my $max = 0;
	my $horizon_age = 0;
	while (time() - $held_at < $hold - 0.5) {
		my $b = OutboxFaults::backlog($node) // 0;
		$max = $b if $b > $max;
		usleep(100_000);
	}
	$horizon_age = $node->safe_psql('postgres',
		q{SELECT max(age(backend_xid)) FROM pg_stat_activity WHERE application_name = 'xmin_holder'});
	my ($pub1, $emit1) = map { $node->safe_psql('postgres', $_) } $published_sql, $emitted_sql;
	my $ok = 1;
	for my $h (@holders) { $ok = 0 unless eval { $h->finish } }
	my $end = time();
	ok($ok, 'long transaction: both transactions commit');
	my ($emitted, $published) = ($emit1 - $emit0, $pub1 - $pub0);
	cmp_ok($published, '>=', 0.5 * $emitted,
		"while a transaction holds the xmin horizon for ${hold} s, delivery goes on ($published of $emitted events emitted meanwhile published)");
	cmp_ok($max, '<=', $o{max_backlog} // 1500,
		"while a transaction holds the xmin horizon, the backlog stays low (at most $max pending; $before without it)");
	return { injections => 1, end => $end,
		detail => "held ${hold} s (the holders' xids $horizon_age transactions old at the end): max backlog $max (steady state $before); "
		  . "$published published of $emitted emitted meanwhile" };
}

# The sink down 3 s and up again, 3 times (1.5 s up before each outage):
# $down->() and $up->() switch it; $what (optional) opens the detail. The
# publishers' "unavailable" log lines for the suite's sink are counted.
sub down_up {
	my ($self, %o) = @_;
	my $offset = -s $self->{node}->logfile;
	for (1 .. 3) {
		usleep(1_500_000);
		$o{down}->();
		usleep(3_000_000);
		$o{up}->();
	}
	my $end = time();
	my $down = $self->log_count(qr/sink "\Q$self->{sink}\E" is unavailable/, $offset);
	my $what = defined $o{what} ? "$o{what}; " : '';
	return { injections => 3, end => $end,
		detail => "${what}the publishers logged the sink unavailable $down times" };
}

# The sink down for $secs seconds while the load goes on: emit() keeps
# working, the events' partitions grow (measured per 1000 events), and
# maintenance with outbox.retention = 0 as if 3 days later keeps every
# partition holding unpublished events. $down->() and $up->() switch the sink.
sub long_outage {
	my ($self, $topic, %o) = @_;
	my ($node, $load) = ($self->{node}, $self->{load});
	my $secs = $o{secs} // 20;
	my $size_sql = q{SELECT sum(pg_total_relation_size(format('outbox.%I', name)::regclass)) || '|' ||
		(SELECT count(*) FROM outbox.events) FROM outbox.partitions};
	my ($size0, $events0) = split /\|/, $node->safe_psql('postgres', $size_sql);
	my $p0 = $load->progress;
	$o{down}->();
	my $t = time();
	my ($stalls, $samples, $last, $retention) = (0, 0, $p0, undef);
	while (time() - $t < $secs) {
		usleep(1_000_000);
		my $p = $load->progress // $last;
		$samples++;
		$stalls++ if $p <= $last;
		$last = $p;
		if (!$retention && time() - $t >= $secs / 2) {
			$retention = $self->_retention_keeps_unpublished($topic);
		}
	}
	my ($size1, $events1) = split /\|/, $node->safe_psql('postgres', $size_sql);
	my $waiting = OutboxFaults::backlog($node, topic => $topic);
	my $alive = $load->alive;
	$o{up}->();
	my $end = time();
	is($stalls, 0, "emit() keeps succeeding while the sink is down for $secs s (committed transactions grew every second)");
	is($alive, $load->{sessions}, 'every emitting session is still running at the end of the outage');
	cmp_ok($waiting, '>', 0, "events wait while the sink is down ($waiting pending)");
	my $per_1000 = $events1 > $events0 ? ($size1 - $size0) / ($events1 - $events0) * 1000 : 0;
	my $detail = sprintf('%d s down: %d events emitted meanwhile (%d pending at the end), partitions grew %.1f MB '
		  . '= %.0f kB per 1000 events; %s', $secs, $events1 - $events0, $waiting,
		($size1 - $size0) / 1048576, $per_1000 / 1024, $retention // 'retention not checked');
	note($detail);
	return { injections => 1, end => $end, detail => $detail };
}

# Maintenance as if 3 days later with retention 0: every partition holding
# unpublished events stays, with a WARNING; returns a summary.
sub _retention_keeps_unpublished {
	my ($self, $topic) = @_;
	my $node = $self->{node};
	my $parts_sql = q{SELECT name || ':' || unpublished FROM outbox.partitions ORDER BY name};
	my %before = map { split /:/ } split /\n/, $node->safe_psql('postgres', $parts_sql);
	my $pending0 = OutboxFaults::backlog($node, topic => $topic);
	my ($ret, $out, $err) = $node->psql('postgres',
		q{SET outbox.retention = '0'; SELECT outbox.maintain(now() + interval '3 days')});
	my %after = map { split /:/ } split /\n/, $node->safe_psql('postgres', $parts_sql);
	my $pending1 = OutboxFaults::backlog($node, topic => $topic);
	my @holding = grep { $before{$_} > 0 } sort keys %before;
	my @gone = grep { !exists $after{$_} } @holding;
	my @dropped = grep { !exists $after{$_} } sort keys %before;
	is($ret, 0, 'maintenance as if 3 days later with outbox.retention = 0 runs') or diag($err);
	ok(@holding > 0 && !@gone,
		'retention keeps the partitions that hold unpublished events (' . join(', ', map { "$_: $before{$_}" } @holding) . ')')
	  or diag('dropped: ' . join(', ', @gone));
	like($err, qr/past outbox\.retention but holds \d+ pending or dead events; kept/,
		'maintenance says which partition it keeps and why');
	cmp_ok($pending1, '>=', $pending0, 'no pending event disappears with the maintenance');
	return sprintf('retention 0 at now()+3 days kept %s, dropped %s', join(' ', @holding) || 'none',
		join(' ', @dropped) || 'none');
}

1;
