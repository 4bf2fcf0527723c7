# Updating from each released version, as an operator does: the server runs
# the real library of that release (built from its commit,
# test/lib/releases.sh), the new build is installed over it, the server
# restarts, and ALTER EXTENSION outbox UPDATE runs, all while an application
# emits. Proves, from 0.1.0 and from 0.2.0:
# - between the restart and the update, the new library publishes with the
#   old schema, and a route of format debezium sends what the old library
#   sent: from 0.1.0, the payload as JSON on Kafka and Debezium Server's
#   default entry on Redis (a field named after the key holding the payload);
# - the update reaches the running publisher within a second: a route 0.1.0
#   called debezium becomes debezium-expanded, and from then on Redis gets
#   the extended entry (key, value, ID), while Kafka's records keep their
#   shape;
# - no event emitted under any library is lost, each is published, and per
#   key they arrive in emit order.
# The new library used to keep a stale idea of the routes after the update
# (the payload went out as a JSON string until some route function was
# called, still 55 s later).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;
use POSIX ();
use Time::HiRes qw(time usleep);
use OutboxNode qw(wait_until);
use OutboxKafka;
use OutboxRedis;
use OutboxRelease qw(release_tree install_release release_node releases_available
  RELEASE_0_1_0 RELEASE_0_2_0);

# test/run_all.sh stages them (test/lib/releases.sh) when the checkout has
# its history, and then requires them.
if (!releases_available()) {
	if ($ENV{OUTBOX_RELEASES_REQUIRED}) {
		fail('the earlier releases are staged (OUTBOX_RELEASES_DIR)');
		done_testing();
		exit;
	}
	plan skip_all => 'the earlier releases are not staged (OUTBOX_RELEASES_DIR: test/run_all.sh '
	  . 'builds them with test/lib/releases.sh)';
}

my $kafka = OutboxKafka->start(topics => ['deb1:3', 'deb2:3']);
my $redis = OutboxRedis->start();
my $json = JSON::PP->new->canonical;

# The application: emits one event at a time, each in its own transaction,
# numbered per run; keys k0..k3 in turn. Runs as a child process so that it
# goes on while the test restarts the server (its failed transactions are
# not counted: only events whose emit() returned an id were committed).
# An emitter whose test is gone (it died) stops by itself: an orphan kept
# prove waiting on its output for the rest of the run's time.
my $test_pid = $$;
sub start_emitter {
	my ($node, $file, $topics) = @_;
	my $pid = fork() // die "fork: $!";
	return $pid if $pid;
	my $n = 0;
	my @conn = ('-h', $node->host, '-p', $node->port, '-d', 'postgres', '-X', '-A', '-t', '-q');
	open my $out, '>>', $file or die $!;
	$out->autoflush(1);
	while (getppid() == $test_pid) {
		$n++;
		my $topic = $topics->[ $n % @$topics ];
		my $key = 'k' . ($n % 4);
		my $id = `psql @conn -c "SELECT outbox.emit('$topic', '{\\"n\\": $n}', '$key')" 2>/dev/null`;
		chomp $id;
		print $out "$n $topic $key $id\n" if $id =~ /^[0-9a-f-]{36}$/;
		usleep(20_000);
	}
	POSIX::_exit(0);    # not exit: the test's END blocks are not the emitter's
}

sub stop_emitter {
	my ($pid) = @_;
	kill 'TERM', $pid;
	waitpid($pid, 0);
	return;
}

sub emitted {
	my ($file) = @_;
	my @rows;
	open my $in, '<', $file or return;
	while (<$in>) {
		chomp;
		my ($n, $topic, $key, $id) = split / /;
		push @rows, { n => $n, topic => $topic, key => $key, id => $id };
	}
	return @rows;
}

sub count_emitted {
	my @rows = emitted($_[0]);
	return scalar(@rows);
}

# The Redis entries of a stream: [ { field => value, ... } in order ].
sub stream_entries {
	my ($stream) = @_;
	my @entries;
	my @lines = split /\n/, $redis->cli('XRANGE', $stream, '-', '+');
	# --raw prints: entry id, then field, value, field, value... per entry.
	# Entry ids look like 1234567890123-0.
	my $cur;
	for my $line (@lines) {
		if ($line =~ /^\d{13}-\d+$/) {
			$cur = {};
			push @entries, $cur;
			$cur->{_fields} = [];
			next;
		}
		push @{ $cur->{_fields} }, $line;
	}
	for my $e (@entries) {
		my @f = @{ delete $e->{_fields} };
		while (@f) { my ($k, $v) = splice(@f, 0, 2); $e->{$k} = $v; }
	}
	return @entries;
}

# Whether a Kafka message carries header id = $id (the Debezium formats).
sub has_id {
	my ($msg, $id) = @_;
	return scalar grep { $_->[0] eq 'id' && ($_->[1] // '') eq $id } @{ $msg->{headers} // [] };
}

# Topic deb<case> up to the event $id: the application keeps producing to
# it, so a read asks for as many messages as were published by then (a read
# that waits for the stream to fall idle would never end).
sub read_deb {
	my ($node, $case, $id) = @_;
	my $published = $node->safe_psql('postgres',
		"SELECT count(*) FROM outbox.events WHERE topic = 'deb$case.k' AND status = 'published'");
	return $kafka->consume(topics => ["deb$case"], count => $published,
		until => sub { grep { has_id($_, $id) } @{ $_[0] } });
}

# The library upgraded to: this checkout's build, or (to show what this test
# catches) a release's, named by its commit.
my $new_release = $ENV{OUTBOX_TEST_NEW_RELEASE} // 'current';

my $case = 0;
for my $release (RELEASE_0_1_0, RELEASE_0_2_0) {
	$case++;
	my $from = $release eq RELEASE_0_1_0 ? '0.1.0' : '0.2.0';
	my $tree = release_tree("from_$case");
	install_release($tree, $release);
	my $node = release_node("from_$case", $tree);
	$node->start;
	my $bootstrap = $kafka->bootstrap;
	my $rport = $redis->port;
	my $deb_stream = "deb$case";
	my $plain_stream = "plain$case";
	$node->safe_psql('postgres', qq{
		CREATE EXTENSION outbox;
		SELECT outbox.create_sink('kafka', 'kafka', '{"bootstrap.servers": "$bootstrap", "message.timeout.ms": "10000"}');
		SELECT outbox.create_sink('redis', 'redis', '{"port": $rport}');
		SELECT outbox.add_route('deb$case.k', 'kafka', 'deb$case', format => 'debezium');
		SELECT outbox.add_route('deb$case.r', 'redis', '$deb_stream', format => 'debezium');
		SELECT outbox.add_route('plain$case', 'redis', '$plain_stream');});
	is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}),
		$from, "from $from: the release's library installs version $from");

	my $file = "${PostgreSQL::Test::Utils::tmp_check}/emitted_$case";
	my $emitter = start_emitter($node, $file, [ "deb$case.k", "deb$case.r", "plain$case" ]);
	ok(defined wait_until(sub { count_emitted($file) >= 30 }),
		"from $from: the application emits under the $from library");

	# The upgrade: the new build over the old one, a restart under load.
	$node->stop('fast');
	install_release($tree, $new_release);
	$node->start;
	my $restarted = count_emitted($file);
	ok(defined wait_until(sub { count_emitted($file) >= $restarted + 30 }),
		"from $from: the application emits again after the restart onto the new library");
	is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}),
		$from, "from $from: before the update the schema is still ${from}'s");
	# The sinks 0.3.0 adds need its catalog: refused, saying what to run.
	for my $kind ('amqp', 'nats') {
		my ($rc, $out, $err) = $node->psql('postgres',
			"SELECT outbox.create_sink('new_$kind', '$kind', '{}')");
		like($err, qr/sinks of kind $kind need extension outbox at version 0\.3\.0.*ALTER EXTENSION outbox UPDATE/s,
			"from $from: before the update, a $kind sink is refused with what to do");
	}

	# Before the update: the new library sends what the old one did.
	my @after_restart = @{ [ emitted($file) ] }[ $restarted .. $restarted + 29 ];
	my ($before_k) = grep { $_->{topic} eq "deb$case.k" } @after_restart;
	my ($before_r) = grep { $_->{topic} eq "deb$case.r" } @after_restart;
	ok(defined wait_until(sub {
		$node->safe_psql('postgres',
			"SELECT count(*) FROM outbox.events WHERE id IN ('$before_k->{id}', '$before_r->{id}') AND status = 'published'") eq '2' }),
		"from $from: events of the debezium routes emitted before the update are published");
	my $msgs = read_deb($node, $case, $before_k->{id});
	my ($bk) = grep { has_id($_, $before_k->{id}) } @$msgs;
	if ($from eq '0.1.0') {
		like($bk->{value} // '', qr/^\{/,
			'from 0.1.0: before the update, Kafka gets the payload as JSON, as 0.1.0 sent it');
		my ($entry) = grep { defined $_->{ $before_r->{key} } } stream_entries($deb_stream);
		ok($entry && !defined $entry->{ID} && $entry->{ $before_r->{key} } =~ /"n":\s*\d+/,
			"from 0.1.0: before the update, Redis gets 0.1.0's layout (a field named after the key)")
		  or diag explain [ stream_entries($deb_stream) ];
	} else {
		like($bk->{value} // '', qr/^"/,
			'from 0.2.0: before the update, Kafka gets the payload as a string, as 0.2.0 sent it');
		my ($entry) = grep { ($_->{ID} // '') eq $before_r->{id} } stream_entries($deb_stream);
		ok($entry, "from 0.2.0: before the update, Redis gets the extended entry (key, value, ID)")
		  or diag explain [ stream_entries($deb_stream) ];
	}

	# A DBA's lock_timeout while a transaction holds outbox.counts (as a
	# publisher's counting trigger does mid-cycle): the update's first
	# statement waits for that lock, times out with 55P03 and leaves nothing
	# changed or held; the application's emits go on meanwhile and after.
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN; LOCK TABLE outbox.counts IN ROW EXCLUSIVE MODE');
	my $owner_before = $node->safe_psql('postgres',
		q{SELECT relowner::regrole FROM pg_class WHERE oid = 'outbox.events'::regclass});
	my ($lrc, $lout, $lerr) = $node->psql('postgres',
		q{SET lock_timeout = '300ms'; ALTER EXTENSION outbox UPDATE},
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($lerr, qr/55P03/, "from $from: under lock_timeout, a held lock makes the update fail with 55P03");
	is($node->safe_psql('postgres', q{SELECT extversion || ' ' || (SELECT relowner::regrole::text
		FROM pg_class WHERE oid = 'outbox.events'::regclass) FROM pg_extension WHERE extname = 'outbox'}),
		"$from $owner_before", "from $from: the update that timed out changed neither the version nor an owner");
	$holder->quit;
	my $after_timeout = count_emitted($file);
	ok(defined wait_until(sub { count_emitted($file) >= $after_timeout + 10 }),
		"from $from: the application emits on after the update timed out");

	# The update, under load. Markers emitted right after it commits must go
	# out the updated way: the publisher has taken the update in before it
	# decides them (what "within a second" asks, without a clock).
	$node->safe_psql('postgres', 'ALTER EXTENSION outbox UPDATE');
	my $default = $node->safe_psql('postgres',
		q{SELECT default_version FROM pg_available_extensions WHERE name = 'outbox'});
	is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}),
		$default, "from $from: ALTER EXTENSION outbox UPDATE reaches $default under load");
	my $expect_format = $from eq '0.1.0' ? 'debezium-expanded' : 'debezium';
	is($node->safe_psql('postgres', "SELECT format FROM outbox.routes WHERE pattern = 'deb$case.k'"),
		$expect_format, "from $from: the debezium routes read $expect_format after the update");
	# The update gives every table, partition, view and function to
	# outbox_writer, and the running publisher acts as it from its next
	# statement, without a restart: a trigger a superuser puts on
	# outbox.events now records who runs the publisher's outcome updates.
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_class
		WHERE relnamespace = 'outbox'::regnamespace AND relkind IN ('r', 'p', 'v')
		  AND relowner <> 'outbox_writer'::regrole}) . '/'
		  . $node->safe_psql('postgres', q{SELECT count(*) FROM pg_proc
		WHERE pronamespace = 'outbox'::regnamespace AND proowner <> 'outbox_writer'::regrole}),
		'0/0', "from $from: outbox's tables, partitions, views and functions are outbox_writer's");
	# The update's catalog takes the new kinds of sink.
	$node->safe_psql('postgres', q{
		SELECT outbox.create_sink('new_amqp', 'amqp', '{}');
		SELECT outbox.create_sink('new_nats', 'nats', '{}');});
	is($node->safe_psql('postgres', q{
		SELECT string_agg(kind, ',' ORDER BY kind) FROM outbox.sinks WHERE name LIKE 'new\_%';}),
		'amqp,nats', "from $from: after the update, sinks of the new kinds can be created");
	$node->safe_psql('postgres', q{SELECT outbox.drop_sink(name) FROM outbox.sinks WHERE name LIKE 'new\_%';});
	$node->safe_psql('postgres', q{
CREATE TABLE public.outcome_runs (who text);
GRANT INSERT ON public.outcome_runs TO outbox_writer;
CREATE FUNCTION public.note_outcome() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN INSERT INTO public.outcome_runs VALUES (current_user); RETURN NULL; END $$;
CREATE TRIGGER note_outcome AFTER UPDATE ON outbox.events
  FOR EACH ROW EXECUTE FUNCTION public.note_outcome();});
	# A marker emitted right after the update goes out the updated way.
	my $marker_k = $node->safe_psql('postgres',
		"SELECT outbox.emit('deb$case.k', '{\"marker\": $case}', 'marker')");
	my $marker_r = $node->safe_psql('postgres',
		"SELECT outbox.emit('deb$case.r', '{\"marker\": $case}', 'marker')");
	ok(defined wait_until(sub {
		$node->safe_psql('postgres',
			"SELECT count(*) FROM outbox.events WHERE id IN ('$marker_k', '$marker_r') AND status = 'published'") eq '2' }),
		"from $from: the markers emitted after the update are published");
	is($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT who, ',') FROM public.outcome_runs}),
		'outbox_writer', "from $from: the publisher, not restarted, now runs as outbox_writer");
	$msgs = read_deb($node, $case, $marker_k);
	my ($km) = grep { has_id($_, $marker_k) } @$msgs;
	if ($from eq '0.1.0') {
		like($km->{value} // '', qr/^\{/, 'from 0.1.0: after the update Kafka still gets the payload as JSON');
	} else {
		like($km->{value} // '', qr/^"/, 'from 0.2.0: after the update Kafka gets the payload as a string, as 0.2.0 sent it');
	}
	my ($rm) = grep { ($_->{ID} // '') eq $marker_r } stream_entries($deb_stream);
	ok($rm && $rm->{key} eq 'marker', "from $from: after the update Redis gets the extended entry (key, value, ID)")
	  or diag explain [ stream_entries($deb_stream) ];

	# Every event published, none lost, per key in emit order.
	my $more = count_emitted($file);
	ok(defined wait_until(sub { count_emitted($file) >= $more + 30 }),
		"from $from: the application keeps emitting after the update");
	stop_emitter($emitter);
	my @rows = emitted($file);
	ok(defined wait_until(sub {
		$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}) eq '0' }),
		"from $from: every event is published")
	  or diag $node->safe_psql('postgres', q{SELECT topic, key, status, next_attempt_at, last_error
		FROM outbox.events WHERE status <> 'published' ORDER BY id LIMIT 20});
	my %published = map { $_ => 1 } split /\n/,
	  $node->safe_psql('postgres', q{SELECT id FROM outbox.events WHERE status = 'published'});
	my @lost = grep { !$published{ $_->{id} } } @rows;
	is(scalar(@lost), 0, "from $from: none of the " . scalar(@rows) . " committed events is lost");

	# Order per key on the plain Redis route: the n of each key ascend.
	my %last;
	my $out_of_order = 0;
	for my $e (stream_entries($plain_stream)) {
		my $n = $json->decode($e->{payload})->{n};
		$out_of_order++ if defined $last{ $e->{key} } && $n <= $last{ $e->{key} };
		$last{ $e->{key} } = $n;
	}
	is($out_of_order, 0, "from $from: per key, events arrive in emit order across the restart and the update");
	$node->stop;
}

$kafka->stop;
done_testing();
