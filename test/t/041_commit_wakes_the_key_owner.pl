# With several publishers, a commit that emitted wakes the publisher that owns
# the event's key slot (and one publisher for a keyless event) rather than all
# of them: each event is still published right after its commit. The safety
# poll is set to 60 s here, so an event whose owner was not woken would wait
# up to that long and fail the check. The check allows 10 s, which a loaded
# machine's scheduling does not reach, while of 30 events whose wake-ups
# were missed some would wait longer for the poll.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql pending_count);

my $WOKEN = 10;    # s: published by a wake-up, not by the 60 s poll
my $kafka = OutboxKafka->start(topics => ['wake:4']);
my $node = outbox_node('wake', <<'EOF');
outbox.workers = 4
outbox.poll_interval = '60s'
max_worker_processes = 16
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('postgres', q{SELECT outbox.add_route('wake', 'kafka')});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) = 4 AND sum(key_slots) = 1024 FROM outbox.workers}) eq 't'
}), '4 publishers own the key slots');

# Warm up: the sink connects on its first event (each publisher has its own).
$node->safe_psql('postgres',
	q{SELECT count(outbox.emit('wake', '{}', 'warm-' || i)) FROM generate_series(1, 200) i});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'warm-up events published');

# Seconds from emit() (its transaction commits right after) to publication
# (published_at, after the broker acknowledged) of the events of topic
# 'wake' whose payload matches $where: by the server's clock, so how long
# the test takes to look is no part of it. An event whose owner was not
# woken would take up to the 60 s poll: waited for up to 70 s.
sub latency {
	my ($where) = @_;
	wait_until(sub { pending_count($node) eq '0' }, 70);
	return $node->safe_psql('postgres', "SELECT coalesce(max(extract(epoch FROM"
		  . " coalesce(published_at, clock_timestamp()) - created_at)), 999) FROM outbox.events WHERE $where");
}

my @slow;
my $worst = 0;
for my $i (1 .. 30) {
	my $key = $i % 6 == 0 ? undef : "key-$i";
	my $sql_key = defined $key ? "'$key'" : 'NULL';
	$node->safe_psql('postgres', "SELECT outbox.emit('wake', '{\"n\": $i}', $sql_key)");
	my $elapsed = latency("payload->>'n' = '$i'");
	$worst = $elapsed if $elapsed > $worst;
	push @slow, sprintf('%s (%.2f s)', $key // 'keyless', $elapsed) if $elapsed > $WOKEN;
}
is(scalar @slow, 0, "every event, keyed or keyless, is published within $WOKEN s of its commit (poll: 60 s)")
  or diag('slow: ' . join(', ', @slow));
note(sprintf('slowest: %.3f s', $worst));

# A transaction with events for many keys wakes them all.
$node->safe_psql('postgres',
	q{SELECT count(outbox.emit('wake', '{}', 'many-' || i)) FROM generate_series(1, 100) i});
my $many = latency("key LIKE 'many-%'");
cmp_ok($many, '<', $WOKEN, "a transaction with events for 100 keys is published within $WOKEN s");
note(sprintf('100 keys published in %.3f s', $many));

$node->stop;
$kafka->stop;
done_testing();
