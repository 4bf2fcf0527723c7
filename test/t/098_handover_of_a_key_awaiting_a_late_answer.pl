# A key whose event awaits a late answer costs its new owner at most that
# answer plus a cycle when the publisher that sent it goes (a restart, or a
# slot handed to another publisher). The events were parked until the sink
# must have settled them (message.timeout.ms plus a margin, 62 s here), and
# the publisher that took the key over waited all of it: the answer died
# with the old one. Proves, with two publishers and a broker answering
# 1 s late (outbox.ack_wait 200 ms): after both publishers are terminated
# while the answers are awaited, every parked event is published within
# 20 s of the new publishers running (the parking had 60 s left), nothing is lost,
# and per key the events arrive in emit order (first arrivals: at least
# once).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use OutboxNode qw(outbox_node wait_until kafka_sink_sql);
use OutboxKafka;

my $kafka = OutboxKafka->start(topics => ['handover:4']);
my $node = outbox_node('handover', "outbox.workers = 2\noutbox.ack_wait = '200ms'\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres',
	kafka_sink_sql('kafka', $kafka->bootstrap, 'message.timeout.ms' => '60000'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('handover.*', 'kafka', 'handover')});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.workers WHERE pid IS NOT NULL}) eq '2' }),
	'two publishers run');

$kafka->command_ok('rtt all 1000');
$node->safe_psql('postgres',
	q{SELECT outbox.emit('handover.e', jsonb_build_object('n', i), 'k' || (i % 8)) FROM generate_series(1, 8) i});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
		WHERE last_error LIKE 'waiting for sink % to answer%'}) eq '8' }),
	'the eight events are parked until their late answers come')
  or diag $node->safe_psql('postgres', q{SELECT key, status, next_attempt_at, last_error FROM outbox.events});
my $parked_for = $node->safe_psql('postgres',
	q{SELECT round(extract(epoch FROM min(next_attempt_at) - now())) FROM outbox.events});
note "parked for another $parked_for s";

# Both publishers go while the answers are awaited; the launcher starts
# them again, and they share the key slots anew.
my $old_pids = $node->safe_psql('postgres',
	q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM outbox.workers WHERE pid IS NOT NULL});
$node->safe_psql('postgres',
	q{SELECT pg_terminate_backend(pid) FROM outbox.workers WHERE pid IS NOT NULL});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', qq{SELECT count(*) FROM outbox.workers WHERE pid IS NOT NULL
		AND pid <> ALL ('{$old_pids}'::int[])}) eq '2' }),
	'two new publishers run');
my $back = time();
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '8' }),
	'every event is published');
my $took = time() - $back;
note sprintf('published %.1f s after the new publishers were running', $took);
# The new owners' producers need a few round trips of 1 s to connect
# before the one that sends again; the parking would have lasted a minute.
cmp_ok($took, '<', 20, 'within the answers of a new producer and a cycle, not after the sink\'s whole timeout');
$kafka->command_ok('rtt all 0');

# Per key, in emit order (each key has one event here, more follow).
$node->safe_psql('postgres',
	q{SELECT outbox.emit('handover.e', jsonb_build_object('n', i), 'k' || (i % 8)) FROM generate_series(9, 24) i});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '24' }),
	'the later events are published too');
# A consumer de-duplicates on the event id (at least once: an event sent by
# a publisher that was terminated may arrive as well as its second sending):
# the order that counts is that of each event's first arrival.
sub distinct {
	my %n = map { ($_->{value} =~ /"n":\s*(\d+)/)[0] => 1 } @{ $_[0] };
	return scalar(keys %n);
}
my $msgs = $kafka->consume(topics => ['handover'], until => sub { distinct($_[0]) >= 24 });
my (%last, $disorder, %seen);
for my $m (@$msgs) {
	my ($n) = $m->{value} =~ /"n":\s*(\d+)/;
	next if $seen{$n}++;
	$disorder++ if defined $last{ $m->{key} } && $n < $last{ $m->{key} };
	$last{ $m->{key} } = $n;
}
is(scalar(keys %seen), 24, 'all 24 events arrived');
ok(!$disorder, 'per key, in emit order');

$node->stop;
$kafka->stop;
done_testing();
