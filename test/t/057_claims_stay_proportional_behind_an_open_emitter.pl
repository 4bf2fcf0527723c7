# A transaction that emitted and stays open (an emit role that leaves it
# idle, or prepares it) holds the xmin horizon back: the index entries of
# every event published since stay, and a claim that started from its first
# emit would walk all of them, so each claim cost more than the last
# (draining 50,000 events went from 0.8 s to 3.2 s over 300,000 events on
# 0.2.0). The claims' floor now passes such a transaction once it has been
# open a second, and looks back to its first emit once when it commits
# (claim.cpp, "The ready claim's starting point"; emit_horizon.cpp,
# "Passing").
#
# For each kind of holder (open, then prepared), 300,000 events are emitted
# and published in chunks of 50,000 while the holder stays; each chunk's
# drain is timed by the server's clock (the span of its published_at, so the
# test's own polling is no part of it). The last chunk must drain within
# 1.5 times the first. On a loaded machine one chunk may be slow by chance:
# when the last is over, one more chunk is drained and the better of the two
# counts (a drain that grows with every event published before it is slow
# in both). Then the holder commits: its own event, far below the floor by
# then, is published at once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until wait_while_progressing);

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

# Emit one chunk under $topic (100 keys), wait until it is published, and
# return the seconds its drain took (first to last published_at).
sub drain_chunk {
	my ($topic) = @_;
	sql(qq{SELECT count(outbox.emit('$topic', '{"n": 1}', (i % 100)::text))
		FROM generate_series(1, $CHUNK) AS i});
	my $took = wait_while_progressing(
		sub { sql(qq{SELECT count(*) FROM outbox.events WHERE topic = '$topic' AND status = 'pending'}) },
		sub { $_[0] eq '0' });
	die "chunk $topic was not drained" unless defined $took;
	$redis->cli('DEL', 'drain');
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
	my @took = map { drain_chunk("$kind.$_") } 1 .. $CHUNKS;
	note("$kind: chunk drains " . join(', ', map { sprintf('%.3f', $_) } @took) . ' s');
	my ($first, $last) = ($took[0], $took[-1]);
	if ($last > 1.5 * $first) {
		my $again = drain_chunk("$kind.again");
		note(sprintf('%s: one more chunk: %.3f s', $kind, $again));
		$last = $again if $again < $last;
	}
	ok($last <= 1.5 * $first,
		sprintf('%s: with the holder open, the last 50,000 of %d events drain within 1.5x the '
			  . 'first 50,000 (%.3f s against %.3f s)', $kind, $CHUNKS * $CHUNK, $last, $first));
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
