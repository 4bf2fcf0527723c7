# The fault suite for the Kafka sink: while a steady emit load runs (three
# sessions of small transactions with keyed and keyless events, some rolled
# back on purpose, see OutboxFaults.pm), inject one fault after another, and
# after each one reconcile what arrived at the broker against what committed:
# every committed event arrives (duplicates are allowed and counted), nothing
# of a rolled-back transaction arrives, and per key the first deliveries keep
# emit order. Two publishers (outbox.workers = 2) share the events by key.
#
# Each scenario has its own Kafka topic (4 partitions), so each is reconciled
# on its own; the load pauses once the fault is over and its backlog is gone,
# and resumes on the next topic when the next fault starts. One row per fault goes to reliability.tsv (see
# OutboxFaults::record_result), with recovery_s = seconds from the end of the
# fault until no event emitted before that moment is pending:
#
#   down_up       all brokers down 3 s, up 1.5 s, 3 times
#   retriable     Produce requests failing with NOT_ENOUGH_REPLICAS and
#                 REQUEST_TIMED_OUT (8 bursts of 60 over 4 s)
#   non_retriable Produce requests refused (MSG_SIZE_TOO_LARGE, then
#                 TOPIC_AUTHORIZATION_FAILED) with outbox.max_attempts = 2: the
#                 events refused twice go dead, and outbox.retry_dead() delivers them
#                 (recovery counted from retry_dead; a dead event stops
#                 holding back its key, so those are exempt from the order check)
#   leaderless    partition 0 without a leader for 4 s
#   latency       every broker answering 300 ms late for 4 s
#   sigkill       a publisher killed with SIGKILL at 10 random moments (each a
#                 crash restart of the server; the load resumes each time)
#   immediate     pg_ctl stop -m immediate while a batch is at the broker, then
#                 start (recovery counted from the start)
#   long_xact     a transaction holding the xmin horizon and one that emitted,
#                 open 6 s: delivery goes on, the backlog stays low
#   long_outage   all brokers down 20 s: emit() keeps working, the partitions
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
use OutboxKafka;
use OutboxNode qw(kafka_sink_sql);
use OutboxFaults qw(fault_node new_load backlog wait_backlog_cleared);

my @SCENARIOS = qw(down_up retriable non_retriable leaderless latency sigkill immediate long_xact long_outage);
my $kafka = OutboxKafka->start(topics => [ map { "fk.$_:4" } @SCENARIOS, 'tail' ]);
my $node = fault_node('faults_kafka');
# One Produce request in flight per connection, because scenarios inject Produce
# errors: see test/kafka/kafka_broker.cpp on the test broker's unchecked sequence numbers.
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap,
	'max.in.flight.requests.per.connection' => '1'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('fk.*', 'kafka')});

my $load = new_load(node => $node, sessions => 3, keys => 30, per_tx => 3, sleep_ms => 20,
	topic => "fk.$SCENARIOS[0]");
my $suite = OutboxFaults::new_suite(node => $node, load => $load, sink => 'kafka', prefix => 'fk',
	publishers => 2, scenarios => \@SCENARIOS, fetch => \&fetch);
$suite->start;

# What arrived on a topic, by outbox-id. A read ends once nothing came for a
# while (its start included): reconcile() reads again, ever more patiently
# ($patient 1 .. 3), while events seem lost.
sub fetch {
	my ($topic, $patient) = @_;
	my $msgs = $kafka->consume(topics => [$topic], timeout_ms => (1500, 6000, 15000, 30000)[$patient // 0]);
	return [ map {
		my $m = $_;
		my ($id) = map { $_->[1] } grep { $_->[0] eq 'outbox-id' } @{ $m->{headers} || [] };
		{ id => $id, value => $m->{value}, lane => $m->{partition}, pos => $m->{offset} }
	} @$msgs ];
}

# The largest backlog seen while $secs seconds pass.
sub max_backlog_for {
	my ($secs) = @_;
	my ($max, $t) = (0, time());
	while (time() - $t < $secs) {
		my $b = backlog($node) // 0;
		$max = $b if $b > $max;
		usleep(100_000);
	}
	return $max;
}

$suite->run('down_up',
	fault => 'brokers down 3 s and up, 3 times',
	lose_nothing => 'nothing is lost when the brokers go down and up 3 times',
	inject => sub {
		return $suite->down_up(down => sub { $kafka->command_ok('down all') },
			up => sub { $kafka->command_ok('up all') });
	});

$suite->run('retriable',
	fault => 'Produce fails with retriable errors',
	lose_nothing => 'nothing is lost when Produce requests fail with retriable errors',
	inject => sub {
		my $queued = 0;
		for my $i (1 .. 8) {
			$kafka->command_ok('produce_errors 60 ' . ($i % 2 ? 'NOT_ENOUGH_REPLICAS' : 'REQUEST_TIMED_OUT'));
			$queued += 60;
			usleep(500_000);
		}
		$kafka->command_ok('clear_errors Produce');
		my $end = time();
		my $attempts = $node->safe_psql('postgres',
			q{SELECT count(*) FILTER (WHERE attempts > 0) || ' events with failed attempts, at most ' || coalesce(max(attempts), 0)
			    FROM outbox.events WHERE topic = 'fk.retriable'});
		return { injections => $queued, end => $end,
			detail => "$queued NOT_ENOUGH_REPLICAS/REQUEST_TIMED_OUT responses queued over 4 s; $attempts" };
	});

$suite->run('non_retriable',
	fault => 'Produce refused (non-retriable), dead events retried',
	lose_nothing => 'nothing is lost when Produce requests are refused: the dead events are delivered after retry_dead()',
	inject => sub {
		my ($topic) = @_;
		$node->safe_psql('postgres', 'ALTER SYSTEM SET outbox.max_attempts = 2');
		$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
		# The postmaster has passed the reload on once a new session shows it.
		OutboxNode::wait_until(sub { $node->safe_psql('postgres', 'SHOW outbox.max_attempts') eq '2' })
		  or die 'outbox.max_attempts did not become 2';
		usleep(300_000);
		my $dead_by = sub {
			my ($error) = @_;
			return $node->safe_psql('postgres', "SELECT count(*) FROM outbox.events WHERE topic = '$topic' "
				  . "AND status = 'dead' AND last_error LIKE '$error%'");
		};
		# Requests refused for the size of a message, then for authorisation,
		# each until some event died of it (or a minute: far longer than it
		# takes, even on a loaded machine).
		$kafka->command_ok('produce_errors 100 MSG_SIZE_TOO_LARGE');
		my $t = time();
		usleep(100_000) while time() - $t < 60 && $dead_by->('MSG_SIZE_TOO_LARGE') == 0;
		$kafka->command_ok('clear_errors Produce');
		$kafka->command_ok('produce_errors 5 TOPIC_AUTHORIZATION_FAILED');
		$t = time();
		usleep(100_000) while time() - $t < 60 && $dead_by->('TOPIC_AUTHORIZATION_FAILED') == 0;
		$kafka->command_ok('clear_errors Produce');
		my $cleared = time();
		$node->safe_psql('postgres', 'ALTER SYSTEM RESET outbox.max_attempts');
		$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
		# Every event emitted before the errors stopped is published or dead.
		ok(defined wait_backlog_cleared($node, $cleared), 'non-retriable: the refused events settle');
		my %dead = map { $_ => 1 } split /\n/, $node->safe_psql('postgres',
			"SELECT id FROM outbox.events WHERE topic = '$topic' AND status = 'dead'");
		my $dead = keys %dead;
		my $why = $node->safe_psql('postgres', "SELECT string_agg(e || ' ' || n, ', ') FROM "
			  . "(SELECT split_part(last_error, ':', 1) e, count(*) n FROM outbox.events WHERE topic = '$topic' "
			  . "AND status = 'dead' GROUP BY 1 ORDER BY 1) s");
		my $failed = $node->safe_psql('postgres',
			"SELECT count(*) FROM outbox.events WHERE topic = '$topic' AND attempts > 0");
		cmp_ok($dead, '>', 0, "refused events go dead after outbox.max_attempts = 2 ($why)");
		my $retried = $node->safe_psql('postgres', "SELECT outbox.retry_dead('$topic')");
		is($retried, $dead, 'retry_dead() puts every dead event back to pending');
		return { injections => 105, end => time(), order_exempt => \%dead,
			detail => "100 MSG_SIZE_TOO_LARGE then 5 TOPIC_AUTHORIZATION_FAILED responses queued; "
			  . "$failed events counted a failed attempt, $dead went dead after 2 ($why) and were delivered "
			  . "after retry_dead() (exempt from the order check); recovery from retry_dead()" };
	});

$suite->run('leaderless',
	fault => 'a partition without a leader',
	lose_nothing => 'nothing is lost when a partition has no leader for a while',
	inject => sub {
		my ($topic) = @_;
		$kafka->command_ok("leader $topic 0 -1");
		usleep(4_000_000);
		$kafka->command_ok("leader $topic 0 1");
		my $end = time();
		my $attempts = $node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE attempts > 0) FROM outbox.events WHERE topic = '$topic'");
		return { injections => 1, end => $end,
			detail => "partition 0 leaderless 4 s; $attempts events counted a failed attempt" };
	});

$suite->run('latency',
	fault => 'broker latency 300 ms',
	lose_nothing => 'nothing is lost when every broker answers 300 ms late',
	inject => sub {
		$kafka->command_ok('rtt all 300');
		my $max = max_backlog_for(4);
		$kafka->command_ok('rtt all 0');
		return { injections => 1, end => time(), detail => "rtt 300 ms for 4 s; max backlog $max" };
	});

$suite->run('sigkill',
	fault => 'publisher killed with SIGKILL',
	lose_nothing => 'nothing is lost when a publisher is killed with SIGKILL 10 times at random moments',
	recovery_timeout => 120,
	inject => sub {
		my ($topic) = @_;
		$kafka->command_ok('rtt all 10');    # batches spend a while at the broker
		my $f = $suite->sigkill_publishers($topic, times => 10);
		$kafka->command_ok('rtt all 0');
		return $f;
	});

$suite->run('immediate',
	fault => 'server crash (pg_ctl stop -m immediate) mid-batch',
	lose_nothing => 'nothing is lost when the server stops with -m immediate while a batch is at the broker',
	inject => sub {
		my ($topic) = @_;
		return $suite->immediate_stop($topic,
			slow => sub { $kafka->command_ok('rtt all ' . ($_[0] ? 200 : 0)) });
	});

$suite->run('long_xact',
	fault => 'long transaction holding the xmin horizon',
	lose_nothing => 'nothing is lost while a long transaction holds the xmin horizon',
	inject => sub { return $suite->long_transaction($_[0], hold => 6) });

$suite->run('long_outage',
	fault => 'sink down for a long time (20 s)',
	lose_nothing => 'nothing is lost when the brokers are down for 20 s while emit() goes on',
	inject => sub {
		return $suite->long_outage($_[0], secs => 20,
			down => sub { $kafka->command_ok('down all') },
			up => sub { $kafka->command_ok('up all') });
	});

$suite->finish;

$node->stop;
$kafka->stop;
done_testing();
