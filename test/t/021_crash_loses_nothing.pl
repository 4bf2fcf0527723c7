# At-least-once across crashes: kill -9 of the publisher mid-batch, and an
# immediate shutdown mid-batch, lose no committed event. Broker latency makes
# batches slow enough to be caught in flight; duplicates are allowed and
# carry the same outbox-id.
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
$kafka->command('create_topic crash 3');
my $node = outbox_node('crash', "outbox.batch_size = 50\nrestart_after_crash = on");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('postgres', q{SELECT outbox.add_route('crash.*', 'kafka', 'crash')});
$kafka->command('rtt all 150');  # every produce round trip is slow

sub emit_batch {
	my ($from, $to) = @_;
	$node->safe_psql('postgres', qq{
		SELECT outbox.emit('crash.test', jsonb_build_object('n', n), 'k' || (n % 7))
		  FROM generate_series($from, $to) AS n;});
}

sub publisher_pid {
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox publisher'");
}

emit_batch(1, 400);
ok(defined wait_until(sub { publisher_pid() ne '' }), 'publisher running');
ok(defined wait_until(sub { pending_count($node) < 400 }), 'publishing has begun');

# kill -9 mid-batch: the postmaster restarts every process (crash recovery),
# the claim transaction is gone, its events are pending again.
my $pid = publisher_pid();
kill 'KILL', $pid;
ok(defined wait_until(sub {
	my $p = eval { publisher_pid() } // '';
	$p ne '' && $p ne $pid }), 'a new publisher runs after kill -9');

emit_batch(401, 800);
ok(defined wait_until(sub { pending_count($node) < 800 - 400 }), 'publishing resumed');

# Immediate shutdown mid-batch, then start again.
$node->stop('immediate');
$node->start;
emit_batch(801, 1000);

ok(defined wait_until(sub { pending_count($node) eq '0' }), 'every event is published in the end');
$kafka->command('rtt all 0');

my %committed = map { $_ => 1 } split /\n/,
  $node->safe_psql('postgres', q{SELECT id FROM outbox.events WHERE topic = 'crash.test'});
is(scalar keys %committed, 1000, '1000 committed events');

sub ids_of {
	my ($msgs) = @_;
	my %seen;
	for my $m (@$msgs) {
		my ($id) = map { $_->[1] } grep { $_->[0] eq 'outbox-id' } @{ $m->{headers} };
		$seen{$id}++;
	}
	return \%seen;
}
# Read again (a read ends once nothing came for a while) until every
# committed event is there, or the deadline passes.
my $got = $kafka->consume(topics => ['crash'], timeout_ms => 5000,
	until => sub { my $seen = ids_of($_[0]); !grep { !$seen->{$_} } keys %committed });
my %seen = %{ ids_of($got) };
my @missing = grep { !$seen{$_} } keys %committed;
is(scalar @missing, 0, 'no committed event is lost') or diag("missing: @missing[0..9]");
my $dups = scalar(@$got) - scalar(keys %seen);
note("messages: " . scalar(@$got) . ", duplicates: $dups");
ok(!(grep { !$committed{$_} } keys %seen), 'nothing arrived that was not committed');

$node->stop;
$kafka->stop;
done_testing();
