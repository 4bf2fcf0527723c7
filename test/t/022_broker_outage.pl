# All brokers down for a while, then back: every event arrives, emit() is
# as fast as before, and the publisher waits politely (a line when the sink
# goes down and one when it is back, no flood, no busy loop).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql pending_count);

my $kafka = OutboxKafka->start();
$kafka->command('create_topic outage 3');
my $node = outbox_node('outage');
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap,
	'message.timeout.ms' => '1500'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('outage.*', 'kafka', 'outage')});
$node->safe_psql('postgres', q{
	CREATE PROCEDURE emit_many(first int, n int) LANGUAGE plpgsql AS $$
	BEGIN
		FOR i IN first .. first + n - 1 LOOP
			PERFORM outbox.emit('outage.test', jsonb_build_object('n', i), 'k' || (i % 5));
			COMMIT;
		END LOOP;
	END $$;});

# Seconds the emits take by the server's clock, in one session (psql's
# start-up, long and uneven on a loaded machine, is no part of it).
sub timed_emits {
	my ($first, $n) = @_;
	my $out = $node->safe_psql('postgres', "SELECT clock_timestamp() AS t0 \\gset\n"
		  . "CALL emit_many($first, $n);\n"
		  . "SELECT extract(epoch FROM clock_timestamp() - :'t0'::timestamptz);");
	return (split /\n/, $out)[-1];
}

my $before = timed_emits(1, 200);
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'flowing before the outage');

my $log_offset = -s $node->logfile;
$kafka->command('down all');
my $during = timed_emits(201, 200);
# The first batch to meet the outage waits for the sink's timeout: shown as a
# wait, not as work.
ok(defined wait_until(sub {
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity
		   WHERE backend_type LIKE 'outbox publisher%' AND wait_event_type = 'Extension'}) eq '1' }),
	'while waiting for brokers the publisher shows wait_event_type Extension');
cmp_ok($during, '<', 3 * $before + 0.5,
	sprintf('emit() is not slowed by the outage (%.2fs before, %.2fs during)', $before, $during));
# The publisher finds the sink down (after message.timeout.ms), then the
# outage lasts while it retries.
ok(defined wait_until(sub { slurp_file($node->logfile, $log_offset) =~ /sink "kafka" is unavailable/ }),
	'the publisher finds the sink unavailable');
sleep 6;
is(pending_count($node), '200', 'events wait while the brokers are down');
my $log = slurp_file($node->logfile, $log_offset);
my $down_lines = () = $log =~ /sink "kafka" is unavailable/g;
cmp_ok($down_lines, '>=', 1, 'the outage is logged');
cmp_ok($down_lines, '<=', 2, "the outage is logged once, not per retry ($down_lines lines)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'dead'}), '0',
	'an outage kills no event');
is($node->safe_psql('postgres', q{SELECT max(attempts) FROM outbox.events}), '0',
	'an outage counts no attempt against the events');

$kafka->command('up all');
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'everything is published once the brokers are back');
$log = slurp_file($node->logfile, $log_offset);
like($log, qr/sink "kafka" is available again/, 'the recovery is logged');

# Read again (a read ends once nothing came for a while) until all are there.
my $all_there = sub { my %v = map { $_->{value} => 1 } @{ $_[0] }; !grep { !$v{qq({"n":$_})} } 1 .. 400 };
my $got = $kafka->consume(topics => ['outage'], timeout_ms => 5000, until => $all_there);
my %values = map { $_->{value} => 1 } @$got;
is(scalar(grep { $values{qq({"n":$_})} } 1 .. 400), 400, 'all 400 events arrived');

# Per key, arrival order is emit order (across the parking and retries).
my (%last, %seen);
my $in_order = 1;
for my $m (sort { $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} } @$got) {
	next if $seen{ $m->{value} }++;  # an at-least-once duplicate is not a reordering
	my ($n) = $m->{value} =~ /(\d+)/;
	$in_order = 0 if defined $last{ $m->{key} } && $n <= $last{ $m->{key} };
	$last{ $m->{key} } = $n;
}
ok($in_order, 'per key, events arrived in emit order');

$node->stop;
$kafka->stop;
done_testing();
