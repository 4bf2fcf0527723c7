# A transaction that emitted and stays open (an emit role that leaves it
# idle, or prepares it) holds the xmin horizon back: the index entries of
# every event published since stay, and a claim that started from its first
# emit would walk all of them, so each claim cost more than the last
# (draining 50,000 events went from 0.8 s to 3.2 s over 300,000 events on
# 0.2.0). The claims' floor now passes such a transaction once it has been
# open a second, and looks back to its first emit once when it commits
# (src/core/claim_floor.hpp; emit_horizon.cpp, "Passing").
#
# For each kind of holder (open, then prepared), 300,000 events are emitted
# and published in chunks of 50,000 while the holder stays. What a chunk
# costs is counted, not timed: the shared buffers that every session read
# from outbox's partitions and their indexes while the chunk was emitted and
# published (pg_statio), per event. A claim that walks everything published
# since the holder reads more pages with every chunk; a proportional one
# reads the same. The last chunk must cost at most 1.2 times the cheapest
# chunk before it. Before the floor passed such a transaction, the last
# chunk cost 1.4 to 1.6 times the first (the pages the walks read were
# about a third of all, and the drain took three times as long); now the
# last costs the same as the cheapest, or less.
# Unlike a drain time, the count hardly depends on what else the machine is
# doing: each chunk commits at once, so the claims take full batches however
# fast they run (the drain times are noted beside the counts). Then the
# holder commits: its own event, far below the floor by then, is published
# at once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until pages_per_drained_event);

my $CHUNK = 50_000;
my $CHUNKS = 6;

my $redis = OutboxRedis->start();
my $node = outbox_node('holder', <<'EOF');
max_prepared_transactions = 5
track_commit_timestamp = on
EOF
sub sql { return $node->safe_psql('postgres', $_[0]) }
sql('CREATE EXTENSION outbox');
sql("SELECT outbox.create_sink('r', 'redis', '{\"port\": " . $redis->port . ", \"mode\": \"list\"}')");
sql(q{SELECT outbox.add_route('*', 'r', 'drain')});

# Emit one chunk under $topic (100 keys) and return the pages read per event
# once it is drained (pages_per_drained_event: by then every page the
# chunk's emits and claims read is counted). Nothing here reads a partition
# while the chunk is measured.
sub chunk_cost {
	my ($topic) = @_;
	my $pages = pages_per_drained_event($node, $CHUNK, sub {
		sql(qq{SELECT count(outbox.emit('$topic', '{"n": 1}', (i % 100)::text))
			FROM generate_series(1, $CHUNK) AS i});
	});
	$redis->cli('DEL', 'drain');
	return $pages;
}

# How long a chunk's drain took by the server's clock (first to last
# published_at): noted only, as a loaded machine stretches it.
sub drain_seconds {
	my ($topic) = @_;
	return sql(qq{SELECT extract(epoch FROM max(published_at) - min(published_at))
		FROM outbox.events WHERE topic = '$topic'});
}

# The holder's event waits below the floor; when it commits, the seconds
# from its commit to its publication (undef if not within 10 s).
sub holder_latency {
	my ($id, $xid) = @_;
	return undef unless defined wait_until(sub {
		sql("SELECT status FROM outbox.events WHERE id = '$id'") eq 'published' }, 10);
	return sql(qq{SELECT extract(epoch FROM published_at - pg_xact_commit_timestamp('$xid'::xid))
		FROM outbox.events WHERE id = '$id'});
}

sub drains_behind {
	my ($kind, $commit) = @_;
	my @cost = map { chunk_cost("$kind.$_") } 1 .. $CHUNKS;
	is(sql(qq{SELECT count(*) FROM outbox.events WHERE topic LIKE '$kind.%' AND status <> 'published'}),
		'0', "$kind: every chunk is published");
	note("$kind: pages read per event, chunk by chunk: "
		  . join(', ', map { sprintf('%.2f', $_) } @cost));
	note("$kind: chunk drains "
		  . join(', ', map { sprintf('%.3f', drain_seconds("$kind.$_")) } 1 .. $CHUNKS) . ' s');
	my $last = $cost[-1];
	my ($cheapest) = sort { $a <=> $b } @cost[0 .. $#cost - 1];
	ok($last <= 1.2 * $cheapest,
		sprintf('%s: with the holder open, the last 50,000 of %d events cost at most 1.2x the '
			  . 'pages per event of the cheapest 50,000 before them (%.2f against %.2f)',
			$kind, $CHUNKS * $CHUNK, $last, $cheapest));
	my $held = sql(q{SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL
		AND state = 'idle in transaction'}) + sql('SELECT count(*) FROM pg_prepared_xacts');
	is($held, 1, "$kind: the holder was still open and held its xid");
	return;
}

sql(q{SELECT outbox.emit('warm', '{}')});
ok(defined wait_until(sub { sql(q{SELECT count(*) FROM outbox.events WHERE status = 'pending'}) eq '0' }),
	'warm-up: events flow');

# An emitting transaction left open.
{
	my $s = $node->background_psql('postgres');
	$s->query_safe('BEGIN');
	my $id = $s->query_safe(q{SELECT outbox.emit('held.open', '{}', 'h')});
	my $xid = $s->query_safe('SELECT pg_current_xact_id()::xid');
	drains_behind('open');
	$s->query_safe('COMMIT');
	$s->quit;
	my $took = holder_latency($id, $xid);
	ok(defined $took && $took < 2.5,
		'open: at its commit the holder\'s own event, far below the floor, is published at once ('
		  . ($took // 'not within 10 s') . ' s)');
}

# A prepared transaction that emitted.
{
	my $s = $node->background_psql('postgres');
	$s->query_safe('BEGIN');
	my $id = $s->query_safe(q{SELECT outbox.emit('held.prepared', '{}', 'h')});
	my $xid = $s->query_safe('SELECT pg_current_xact_id()::xid');
	$s->query_safe(q{PREPARE TRANSACTION 'holder'});
	$s->quit;
	drains_behind('prepared');
	sql(q{COMMIT PREPARED 'holder'});
	my $took = holder_latency($id, $xid);
	ok(defined $took && $took < 2.5,
		'prepared: at COMMIT PREPARED its event, far below the floor, is published at once ('
		  . ($took // 'not within 10 s') . ' s)');
}

is(sql(q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}), '0',
	'every event is published');
is(sql('SELECT coalesce(sum(failures), 0) FROM outbox.workers'), '0', 'the publisher raised no error');
$node->stop;
$redis->stop;
done_testing();
