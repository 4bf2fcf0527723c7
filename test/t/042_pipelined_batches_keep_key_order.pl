# Pipelined batches keep per-key order at the brokers.
#
# With outbox.batches_in_flight > 1 a publisher begins up to that many claimed
# batches in one transaction (a window) before it finishes the first. Before
# the fix every batch of a window was sent before any failure of an earlier
# batch was known, so a later event of a key reached the broker while an
# earlier one waited for a retry (the consumer saw 0, 2, 1). Now a batch begun
# while an earlier batch in flight carries the same route and key defers that
# key's events until the earlier batch is settled, and a failure there parks
# them behind it.
#
# Each scenario emits the events 0..N-1 of one key in one transaction that
# becomes visible 1.3 s after emitting, so that every id lies below the
# claims' safe bound (now - 1 s) and the first window takes 4 small batches
# of the key (outbox.batch_size = 1 or 2, outbox.batches_in_flight = 4). The
# transaction is prepared, then committed with COMMIT PREPARED: a plain
# COMMIT wakes the publisher before the committing backend clears its
# emit-horizon entry (the wake-up's transaction callback runs first), and a
# publisher that reads the stale entry takes a single batch in that window
# (15-20% of plain commits on the test machine); COMMIT PREPARED wakes it
# after the prepared transaction is gone. The 10 s safety poll keeps idle
# cycles from straddling the moment the events become visible.
#
# The first batch then fails, while the later ones would succeed:
#   (a1) Kafka refuses the first Produce request (INVALID_RECORD),
#        batch_size 1: the first batch's event 0 gets a retry;
#   (a2) Kafka refuses the first three Produce requests (MSG_SIZE_TOO_LARGE),
#        batch_size 2: the first batch's two messages and the solo retry of
#        its event 0. The sink sends one message per Produce request
#        (batch.num.messages=1), so the refusals hit exactly the first batch;
#        and one request in flight per connection, as in TAP 023 (the test
#        broker does not check idempotent sequence numbers);
#   (b)  all Kafka brokers down while the first batch is begun; its event
#        times out (message.timeout.ms = 500); the brokers are up again
#        before the later batches are begun (fault injection build: stalls
#        hold the publisher between the first and the second batch, and a
#        probe message shows the brokers serving before the stall ends);
#   (c)  Redis (stream mode) down for the first batch, started again during
#        a stall right after it was begun.
#
# For each scenario it proves:
# - pipelining happened: one publisher transaction wrote the outcomes of the
#   window's 4 batches of the key (events 0..3, or 0..7 with batch_size 2).
#   A test table filled by an AFTER UPDATE trigger on outbox.events records
#   each outcome the publisher writes with its transaction id;
# - the fault hit the first batch (event 0's first outcome is a failure) and
#   the key's events of the later batches of that window were held back, not
#   delivered (pending, attempts 0: deferred, then parked behind event 0);
# - nothing is lost: every event is published and arrives at the broker;
# - the broker's first delivery of each event follows emit order
#   (duplicates allowed: at least once). Kafka: offset order in the key's
#   partition; Redis: XRANGE order of the stream.
#
# The build before the fix (34385b2) fails (a1) and (a2): the later batches'
# events are published in the window that failed event 0 and arrive before
# it (arrivals 1 2 3 0 4 5, and 3 4 5 6 7 0 1 2 8 9). (b) and (c) need the
# fault injection build (OUTBOX_FI_LIBDIR) and are skipped without it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxKafka;
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql set_faults fault_injection_available);

my $T0 = time();
my $IN_FLIGHT = 4;
my $TRIES = 3;    # of a scenario whose timing the test brings about (b, c)
my $CONF = <<"EOF";
outbox.poll_interval = '10s'
max_prepared_transactions = 5
outbox.batch_size = 1
outbox.batches_in_flight = $IN_FLIGHT
outbox.max_attempts = 100
EOF

my $kafka = OutboxKafka->start(topics => [ 'ord_a1:3', 'ord_a2:3', 'ord_b:3' ]);

# The extension, and the record of the outcomes the publisher writes: one row
# per UPDATE of an event, with the writing transaction's id.
sub setup_node {
	my ($node) = @_;
	$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
	$node->safe_psql('postgres', q{
CREATE TABLE outcome_log (
    n bigserial PRIMARY KEY,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    topic text, key text, seq int, status text, attempts int, last_error text,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION log_outcome() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public AS $$
BEGIN
  INSERT INTO public.outcome_log (topic, key, seq, status, attempts, last_error)
  VALUES (NEW.topic, NEW.key, (NEW.payload->>'seq')::int, NEW.status, NEW.attempts, NEW.last_error);
  RETURN NULL;
END $$;
CREATE TRIGGER zz_log_outcome AFTER UPDATE ON outbox.events
  FOR EACH ROW EXECUTE FUNCTION log_outcome();
-- The publisher's statements run as outbox_writer, and so does the trigger.
GRANT INSERT ON outcome_log TO outbox_writer;
GRANT USAGE ON SEQUENCE outcome_log_n_seq TO outbox_writer;});
	return;
}

sub unpublished {
	my ($node, $topic) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM outbox.events WHERE topic = '$topic' AND status <> 'published'");
}

# One event, delivered: the sink is connected and knows the topic's metadata.
sub warm_up {
	my ($node, $topic) = @_;
	$node->safe_psql('postgres', "SELECT outbox.emit('$topic', '{\"warm\": 1}', 'warm')");
	ok(defined wait_until(sub { unpublished($node, $topic) eq '0' }), "$topic: the sink delivers a warm-up event");
	return;
}

# Events 0..$n-1 of $key, emitted in this order in one transaction that
# becomes visible (COMMIT PREPARED) 1.3 s later, below the safe bound.
sub emit_window {
	my ($node, $topic, $key, $n) = @_;
	$node->safe_psql('postgres', qq{
BEGIN;
DO \$\$ BEGIN
  FOR i IN 0 .. $n - 1 LOOP
    PERFORM outbox.emit('$topic', jsonb_build_object('seq', i), '$key');
  END LOOP;
END \$\$;
PREPARE TRANSACTION 'window_$key';});
	usleep(1_300_000);
	$node->safe_psql('postgres', "COMMIT PREPARED 'window_$key'");
	return;
}

# What the database and the log of outcomes say about one scenario.
sub check_database {
	my ($node, $name, $topic, $key, $n, $window, $first_error, $held_error) = @_;
	is($node->safe_psql('postgres', "SELECT string_agg(payload->>'seq', ',' ORDER BY id)
		FROM outbox.events WHERE topic = '$topic' AND key = '$key'"),
		join(',', 0 .. $n - 1), "$name: ids (emit time) follow emit order");
	# The publisher transaction that wrote event 0's first outcome (once it
	# committed).
	ok(defined wait_until(sub { $node->safe_psql('postgres',
		"SELECT count(*) FROM outcome_log WHERE topic = '$topic' AND key = '$key' AND seq = 0") ne '0' }),
		"$name: the publisher settled event 0");
	my $first = $node->safe_psql('postgres', qq{
		SELECT string_agg(format('%s:%s:%s:%s', seq, status, attempts, coalesce(last_error, '')), E'\\n' ORDER BY seq)
		  FROM outcome_log
		 WHERE topic = '$topic' AND key = '$key'
		   AND xid = (SELECT xid FROM outcome_log WHERE topic = '$topic' AND key = '$key' AND seq = 0
		              ORDER BY n LIMIT 1)});
	my @rows = map { [ split /:/, $_, 4 ] } split /\n/, $first;
	note("$name: outcomes written by the window that carried event 0 (seq:status:attempts:error):\n$first");
	is(join(',', map { $_->[0] } @rows), join(',', 0 .. $window - 1),
		"$name: pipelined: one publisher transaction settled events 0..@{[$window - 1]} ($IN_FLIGHT batches of the key in one window)")
	  or diag("outcomes written by that transaction (seq:status:attempts:error):\n$first");
	my ($seq0) = grep { $_->[0] == 0 } @rows;
	ok($seq0 && $seq0->[1] eq 'pending' && $seq0->[3] =~ $first_error,
		"$name: the fault hit the first batch: event 0 failed there")
	  or diag("event 0's first outcome: " . ($seq0 ? join(':', @$seq0) : 'none'));
	my @later = grep { $_->[0] > 0 } @rows;
	my @delivered = grep { !($_->[1] eq 'pending' && $_->[2] == 0 && $_->[3] =~ $held_error) } @later;
	ok(@later && !@delivered,
		"$name: the key's later events of that window were held back behind event 0 (pending, not attempted)")
	  or diag("not held back (seq:status:attempts:error): " . join('; ', map { join(':', @$_) } @delivered));
	ok(defined wait_until(sub { unpublished($node, $topic) eq '0' }),
		"$name: every event is published");
	return;
}

# The broker's side: first delivery of each event, in arrival order; nothing
# lost, and emit order kept.
sub check_arrivals {
	my ($name, $n, $seqs) = @_;
	my (@first, %seen);
	my $dups = 0;
	for my $s (@$seqs) {
		if ($seen{$s}++) { $dups++; next; }
		push @first, $s;
	}
	is(join(',', sort { $a <=> $b } @first), join(',', 0 .. $n - 1),
		"$name: nothing lost: all $n events arrived");
	my $in_order = !grep { $first[$_] < $first[ $_ - 1 ] } 1 .. $#first;
	ok($in_order, "$name: first deliveries follow emit order")
	  or diag("arrival order (first deliveries): @first; all deliveries: @$seqs");
	note("$name: arrivals @$seqs ($dups duplicates)");
	return;
}

# Every delivery of $key's events, in arrival order. Read again (a read ends
# once nothing came for a while) until all $n are there, or the deadline passes.
sub kafka_arrivals {
	my ($topic, $key, $n) = @_;
	my $seqs = sub {
		my @seqs;
		for my $m (sort { $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} } @{ $_[0] }) {
			next unless defined $m->{key} && $m->{key} eq $key;
			push @seqs, $1 if $m->{value} =~ /"seq":(\d+)/;
		}
		return \@seqs;
	};
	my $msgs = $kafka->consume(topics => [$topic], timeout_ms => 2000,
		until => sub { my %seen = map { $_ => 1 } @{ $seqs->($_[0]) }; keys %seen >= $n });
	return $seqs->($msgs);
}

sub log_position { my ($node) = @_; return -s $node->logfile; }

# Wait until the server log holds $count lines matching $re after $offset;
# returns the time it was seen (undef on timeout).
sub wait_for_lines {
	my ($node, $re, $offset, $count, $timeout) = @_;
	my $t = time();
	while (time() - $t < ($timeout // $PostgreSQL::Test::Utils::timeout_default)) {
		my $n = () = slurp_file($node->logfile, $offset) =~ /$re/g;
		return time() if $n >= ($count // 1);
		usleep(20_000);
	}
	return undef;
}

# ---------------------------------------------------------------------------
# (a) Kafka refuses the first batch's Produce requests.
# Every answer is waited for within its cycle: on a loaded machine a Produce
# answer slower than outbox.ack_wait (500 ms) is recorded by a later cycle
# (late answers, another test's subject), and the window's outcomes, which
# this scenario reads, would not be written by one transaction.
my $node = outbox_node('order_a', $CONF . "outbox.ack_wait = 0\n");
setup_node($node);
# One Produce request in flight per connection: the test broker does not check
# an idempotent producer's sequence numbers (docs/reliability.md, Known limits).
# One message per Produce request: the injected refusals hit exactly the
# first batch's requests. (Otherwise librdkafka may put all the batches of a
# window that are on the wire at once into one request, refused as a whole,
# and the build before the fix could not show its reordering.)
$node->safe_psql('postgres', kafka_sink_sql('ka', $kafka->bootstrap,
	'max.in.flight.requests.per.connection' => '1',
	'batch.num.messages' => '1'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('ord_a*', 'ka')});
warm_up($node, 'ord_a1');
warm_up($node, 'ord_a2');

my $t = time();
$kafka->command_ok('produce_errors 1 INVALID_RECORD');
emit_window($node, 'ord_a1', 'ka1', 6);
check_database($node, '(a1) refusal, batch_size 1', 'ord_a1', 'ka1', 6, 4,
	qr/INVALID_RECORD|invalid/i, qr/waiting for an earlier event/);
check_arrivals('(a1) refusal, batch_size 1', 6, kafka_arrivals('ord_a1', 'ka1', 6));
$kafka->command_ok('clear_errors Produce');
note(sprintf('(a1) took %.1f s', time() - $t));

$t = time();
$node->safe_psql('postgres', 'ALTER SYSTEM SET outbox.batch_size = 2');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
# pg_reload_conf() only signals the postmaster, which on a loaded machine may
# act on it after the window is claimed (then with batches of one: a window
# of 4 events, not 8). A new session showing the setting comes after the
# postmaster passed the reload on to the publisher, whose next cycle takes it.
ok(defined wait_until(sub { $node->safe_psql('postgres', 'SHOW outbox.batch_size') eq '2' }),
	'(a2) outbox.batch_size is 2');
# Three refusals: the first batch's two requests (one message each), then
# the solo retry of its event 0.
$kafka->command_ok('produce_errors 3 MSG_SIZE_TOO_LARGE');
emit_window($node, 'ord_a2', 'ka2', 10);
check_database($node, '(a2) refusal, batch_size 2', 'ord_a2', 'ka2', 10, 8,
	qr/MSG_SIZE_TOO_LARGE|too large/i, qr/waiting for an earlier event/);
check_arrivals('(a2) refusal, batch_size 2', 10, kafka_arrivals('ord_a2', 'ka2', 10));
$kafka->command_ok('clear_errors Produce');
note(sprintf('(a2) took %.1f s', time() - $t));
$node->stop;

# ---------------------------------------------------------------------------
# (b), (c): the sink is down for the first batch and up for the later ones.
SKIP: {
	skip 'needs the fault injection build of outbox (OUTBOX_FI_LIBDIR)', 1
	  unless fault_injection_available();

	my $redis = OutboxRedis->start();
	my $fi = outbox_node('order_fi', $CONF, fault_injection => 1);
	setup_node($fi);
	$fi->safe_psql('postgres', kafka_sink_sql('kb', $kafka->bootstrap,
		'message.timeout.ms' => '500',
		'reconnect.backoff.ms' => '100',
		'reconnect.backoff.max.ms' => '500',
		'max.in.flight.requests.per.connection' => '1'));
	$fi->safe_psql('postgres', q{SELECT outbox.add_route('ord_b', 'kb')});
	$fi->safe_psql('postgres', "SELECT outbox.create_sink('rc', 'redis', '{\"port\": "
		  . $redis->port . ", \"mode\": \"stream\"}')");
	$fi->safe_psql('postgres', q{SELECT outbox.add_route('ordc.*', 'rc')});
	warm_up($fi, 'ord_b');
	warm_up($fi, 'ordc.c');

	# (b) Brokers down while the first batch is begun; its event times out
	# (message.timeout.ms 500, checked about once a second) during the stalls
	# after it (2 s after the first Begin, 2 s after the second claim); the
	# brokers come up half a second into the second stall, before the later
	# batches are begun.
	# The brokers must serve again within the second stall (2 s from its log
	# line), which the test brings about: on a loaded machine a probe (a
	# kcat process) may take longer. Such a try proves nothing either way:
	# its window is drained and the scenario runs again with another key.
	$t = time();
	my ($key, $probe_ok, $probe_at);
	for my $try (1 .. $TRIES) {
		$key = "kb$try";
		$kafka->command_ok('down all');
		set_faults($fi, 'publisher.after_begin=stall#1,publisher.after_claim=stall#2');
		my $offset = log_position($fi);
		emit_window($fi, 'ord_b', $key, 6);
		my $begun = wait_for_lines($fi, qr/fault injection: stall at publisher\.after_begin/, $offset, 1);
		my $second_claim = wait_for_lines($fi, qr/fault injection: stall at publisher\.after_claim/, $offset, 2);
		ok(defined $begun && defined $second_claim,
			"(b) try $try: the publisher stalled after the first Begin and before the second");
		usleep(500_000);
		$kafka->command_ok('up all');
		# The brokers serve again before the later batches are begun (the stall
		# ends 2 s after its log line).
		($probe_ok) = $kafka->produce(topic => 'ord_probe', key => 'p', value => 'up',
			props => { 'message.timeout.ms' => 1500 });
		$probe_at = time() - ($second_claim // 0);
		note(sprintf('(b) try %d: brokers up and a probe %s %.2f s into the 2 s stall', $try,
			$probe_ok ? 'delivered' : 'not delivered', $probe_at));
		last if $probe_ok && $probe_at < 1.95;
		set_faults($fi, '');
		ok(defined wait_until(sub { unpublished($fi, 'ord_b') eq '0' }),
			"(b) try $try came too late: its window is published before the next");
	}
	ok($probe_ok && $probe_at < 1.95,
		'(b) the brokers accepted a message before the later batches were begun')
	  or diag(sprintf('probe delivered: %s, %.2f s after the stall began', $probe_ok, $probe_at));
	check_database($fi, '(b) brokers down, then up', 'ord_b', $key, 6, 4,
		qr/timed out|MSG_TIMED_OUT/i, qr/unavailable|timed out/i);
	set_faults($fi, '');
	check_arrivals('(b) brokers down, then up', 6, kafka_arrivals('ord_b', $key, 6));
	note(sprintf('(b) took %.1f s', time() - $t));

	# (c) Redis down for the first batch, started again during the stall
	# right after it was begun (2 s).
	# Again the test must start Redis within the stall: a try that came too
	# late is drained and made again with another key.
	$t = time();
	my $up_at;
	for my $try (1 .. $TRIES) {
		$key = "kc$try";
		$redis->stop;
		set_faults($fi, 'publisher.after_begin=stall#1');
		my $offset = log_position($fi);
		emit_window($fi, 'ordc.c', $key, 6);
		my $begun = wait_for_lines($fi, qr/fault injection: stall at publisher\.after_begin/, $offset, 1);
		ok(defined $begun, "(c) try $try: the publisher stalled after the first Begin");
		$redis->restart;
		$up_at = time() - ($begun // 0);
		note(sprintf('(c) try %d: Redis answers %.2f s into the 2 s stall', $try, $up_at));
		last if $up_at < 1.95;
		set_faults($fi, '');
		ok(defined wait_until(sub { unpublished($fi, 'ordc.c') eq '0' }),
			"(c) try $try came too late: its window is published before the next");
	}
	ok($up_at < 1.95, '(c) Redis answers again before the later batches are begun')
	  or diag(sprintf('Redis up %.2f s after the stall began', $up_at));
	check_database($fi, '(c) Redis down, then up', 'ordc.c', $key, 6, 4,
		qr/cannot connect|refused/i, qr/unavailable|cannot connect/i);
	set_faults($fi, '');
	# The stream's entries: <entry id>, then the fields id, topic, key, payload, headers.
	my @lines = split /\n/, $redis->cli('XRANGE', 'ordc.c', '-', '+');
	my (@seqs, %entry);
	for my $line (@lines, '0-0') {
		if ($line =~ /^\d+-\d+$/) {
			push @seqs, $1 if ($entry{key} // '') eq $key && ($entry{payload} // '') =~ /"seq":(\d+)/;
			%entry = (_field => undef);
			next;
		}
		if (defined $entry{_field}) { $entry{ delete $entry{_field} } = $line; }
		else { $entry{_field} = $line; }
	}
	check_arrivals('(c) Redis down, then up', 6, \@seqs);
	note(sprintf('(c) took %.1f s', time() - $t));

	$fi->stop;
	$redis->stop;
}

$kafka->stop;
note(sprintf('total %.1f s', time() - $T0));
done_testing();
