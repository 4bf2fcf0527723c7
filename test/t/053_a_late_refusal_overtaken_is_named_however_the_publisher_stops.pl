# A Kafka group whose answers come after outbox.ack_wait: the broker refuses
# e1 (key K) and takes e2 (key K, the same partition, a request of its own),
# while a third event of the group waits on a partition without a leader.
# e2 is recorded published at once; e1's verdict waits for its group. Then
# the publisher's transaction fails (an ERROR from a trigger), it is
# cancelled, it is terminated, or the route goes before the group's last
# answer comes: in every case e1 reaches the consumer after e2 (if ever),
# and the WARNING that names events overtaken so must name e1. Each way
# runs on a node and a broker of its own.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql);
use OutboxKafka;

sub overtaken_is_named {
	my ($how) = @_;
	my $kafka = OutboxKafka->start(topics => [ 'x.ord:1', 'x.stuck:1', 'boom:1' ]);
	my $node = outbox_node("late_$how", "outbox.ack_wait = '50ms'\noutbox.max_attempts = 1\n");
	$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
	$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap,
		'message.timeout.ms' => '20000',
		'batch.num.messages' => '1',
		'max.in.flight.requests.per.connection' => '1'));
	$node->safe_psql('postgres', q{SELECT outbox.add_route('x.*', 'kafka'),
		outbox.add_route('boom.*', 'kafka', 'boom')});
	$node->safe_psql('postgres', q{SELECT outbox.emit('x.ord', '{"n": 0}', 'warm')});
	ok(defined wait_until(sub { $node->safe_psql('postgres',
		q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '1' }),
		"$how: the sink delivers");

	# Answers come 300 ms after each request, the first produce request is
	# refused, and x.stuck has no leader: the group of the three events
	# goes late, e1 refused, e2 taken, the x.stuck event unanswered.
	$kafka->command_ok('leader x.stuck 0 -1');
	$kafka->command_ok('rtt all 300');
	$kafka->command_ok('produce_errors 1 INVALID_RECORD');
	my $log_offset = -s $node->logfile;
	$node->safe_psql('postgres', q{SELECT outbox.pause('x.*')});
	$node->safe_psql('postgres', q{SELECT outbox.emit('x.stuck', '{"n": 100}', 'S'),
		outbox.emit('x.ord', '{"n": 1}', 'K'), outbox.emit('x.ord', '{"n": 2}', 'K')});
	my %id = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
		q{SELECT payload->>'n', id FROM outbox.events});
	$node->safe_psql('postgres', q{SELECT outbox.resume('x.*')});
	ok(defined wait_until(sub { $node->safe_psql('postgres',
		"SELECT status FROM outbox.events WHERE id = '$id{2}'") eq 'published' }, 60),
		"$how: e2 is published while e1's group awaits its last answer");

	my $pid = $node->safe_psql('postgres',
		q{SELECT pid FROM outbox.workers WHERE database = 'postgres'});
	if ($how eq 'error') {
		$node->safe_psql('postgres', q{
			CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.topic = 'boom.e' THEN RAISE EXCEPTION 'injected failure'; END IF;
			RETURN NEW; END $$;
			CREATE TRIGGER refuse BEFORE UPDATE ON outbox.events
			  FOR EACH ROW EXECUTE FUNCTION public.refuse();});
		$node->safe_psql('postgres', q{SELECT outbox.emit('boom.e', '{"n": 900}', 'B')});
		ok(defined wait_until(sub { slurp_file($node->logfile, $log_offset) =~ /injected failure/ }),
			"$how: the publisher's transaction failed");
		$node->safe_psql('postgres', 'DROP TRIGGER refuse ON outbox.events');
	} elsif ($how eq 'cancel') {
		$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
		ok(defined wait_until(sub { slurp_file($node->logfile, $log_offset) =~ /canceling statement/ }),
			"$how: the cancel reached the publisher");
	} elsif ($how eq 'terminate') {
		$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
		ok(defined wait_until(sub { $node->safe_psql('postgres',
			"SELECT count(*) FROM outbox.workers WHERE database = 'postgres' AND pid <> $pid") eq '1' }),
			"$how: a new publisher runs");
	} else {
		$node->safe_psql('postgres', q{SELECT outbox.remove_route('x.*')});
		$kafka->command_ok('rtt all 0');
		$kafka->command_ok('leader x.stuck 0 1');
		ok(defined wait_until(sub { $node->safe_psql('postgres',
			"SELECT last_error FROM outbox.events WHERE id = '$id{1}'") =~ /route changed|no route/ }, 60),
			"$how: e1 is judged without its route");
		$node->safe_psql('postgres', q{SELECT outbox.add_route('x.*', 'kafka')});
	}
	$kafka->command_ok('rtt all 0');
	$kafka->command_ok('leader x.stuck 0 1');
	ok(defined wait_until(sub { $node->safe_psql('postgres',
		q{SELECT count(*) FROM outbox.events WHERE status = 'pending'}) eq '0' }, 120),
		"$how: nothing is left pending");

	my (@first, %seen);
	for my $m (sort { $a->{offset} <=> $b->{offset} }
		@{ $kafka->consume(topics => ['x.ord'], timeout_ms => 3000) }) {
		next unless ($m->{key} // '') eq 'K';
		my ($n) = $m->{value} =~ /"n":\s*(\d+)/;
		push @first, $n unless $seen{$n}++;
	}
	my @warnings = slurp_file($node->logfile, $log_offset) =~ /(WARNING:.*will arrive after a later event of their key.*)/g;
	my $named = grep { index($_, $id{1}) >= 0 } @warnings;
	ok("@first" eq '1 2' || "@first" eq '2' || $named,
		"$how: K's events reached the consumer in order, or the WARNING names e1")
	  or diag("K at the consumer: @first; warnings: @warnings");
	$node->stop;
	$kafka->stop;
}

overtaken_is_named($_) for qw(error cancel terminate reroute);
done_testing();
