# An operator's transaction at REPEATABLE READ or SERIALIZABLE (the
# server's default_transaction_isolation, or its own BEGIN) that changes
# events (retry_dead(), replay(), an UPDATE) must not fail because the
# publisher counted a change of the same day and topic after its snapshot,
# and a prepared transaction that changed events must not hold up the next
# session that does. outbox.counts keeps one row per (day, topic, shard),
# and an upsert meeting a row changed after the snapshot fails with
# "could not serialize access due to concurrent update".
# - The shard was pg_backend_pid() % 64: an operator whose pid matched the
#   publisher's modulo 64 failed (it did, in CI, on retry_dead()).
# - Then it was the process's slot in the proc array: a prepared
#   transaction kept its slot's row locked, and the next session, which
#   gets the same slot, waited for COMMIT PREPARED.
# Publishers now write their slot's shard and everyone else one of 1024
# negative shards picked per transaction (src/catalog/event_counts.cpp).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node wait_until pending_count);
use OutboxRedis;

my $redis = OutboxRedis->start();
my $node = outbox_node('counted_rr', "max_prepared_transactions = 10");
sub sql { return $node->safe_psql('postgres', $_[0]) }
sql('CREATE EXTENSION outbox');
my $port = $redis->port;
sql(qq{SELECT outbox.create_sink('r', 'redis', '{"port": $port, "mode": "stream"}');
	SELECT outbox.add_route('rr.*', 'r', 'rr');});
sql(q{SELECT outbox.emit('rr.topic', '{"warm": true}')});
ok(defined wait_until(sub { $redis->cli('XLEN', 'rr') == 1 }), 'the publisher publishes');
my $publisher_pid = sql(q{SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'outbox publisher%'});

# Dead events of the publisher's topic and day, for the operators to revive.
my ($rounds, $operators) = (60, 1);
my $dead = $rounds * $operators + 40;
sql(qq{SELECT outbox.emit('dead.topic', pg_catalog.jsonb_build_object('n', n)) FROM generate_series(1, $dead) n;
	UPDATE outbox.events SET topic = 'rr.topic', status = 'dead', attempts = 1, next_attempt_at = now()
	 WHERE topic = 'dead.topic';});
my @ids = split /\n/, sql(q{SELECT id FROM outbox.events WHERE status = 'dead' ORDER BY id});
is(scalar @ids, $dead, 'the dead events exist');

# The operator's session: its pid equals the publisher's modulo 64 (the old
# rule's shared shard). Forked no-op processes shift the pids. One operator:
# two operators' transactions that overlap pick one shard with a chance of 1
# in 1024, and then the later one fails at REPEATABLE READ, by design.
my @sessions;
for my $try (1 .. 400) {
	my $s = $node->background_psql('postgres');
	if ($s->query_safe('SELECT pg_backend_pid()') % 64 == $publisher_pid % 64) {
		unshift @sessions, $s;
		last;
	}
	$s->quit;
	system('true') for 1 .. ($try % 3);
}
ok(@sessions == 1, 'an operator session shares the publisher\'s pid modulo 64');
push @sessions, $node->background_psql('postgres') while @sessions < $operators;

# Each round: the operator takes its snapshot (REPEATABLE READ and
# SERIALIZABLE in turn), the publisher publishes an event of the topic and
# commits, then the operator revives a dead event of the same day and topic
# and commits.
my ($failures, $first_error) = (0, '');
my $published = 1;
for my $round (0 .. $rounds - 1) {
	for my $i (0 .. $#sessions) {
		my $level = $round % 2 ? 'SERIALIZABLE' : 'REPEATABLE READ';
		$sessions[$i]->query_safe("BEGIN ISOLATION LEVEL $level");
		$sessions[$i]->query_safe('SELECT 1');    # takes the snapshot
	}
	my $before = $redis->cli('XLEN', 'rr');
	sql("SELECT outbox.emit('rr.topic', '{\"round\": $round}')");
	wait_until(sub { $redis->cli('XLEN', 'rr') > $before }) or $published = 0;
	for my $i (0 .. $#sessions) {
		my $id = shift @ids;
		# The error, if any, comes back on stdout (psql's stderr may lag).
		my $error = $sessions[$i]->query_safe(qq{
			DO \$\$BEGIN
				UPDATE outbox.events SET status = 'pending', next_attempt_at = now() WHERE id = '$id';
			EXCEPTION WHEN OTHERS THEN
				PERFORM pg_catalog.set_config('rr.error', SQLSTATE || ': ' || SQLERRM, true);
			END\$\$;
			SELECT pg_catalog.current_setting('rr.error', true);
		});
		$sessions[$i]->query_safe('COMMIT');
		if ($error ne '') {
			$failures++;
			$first_error ||= $error;
		}
	}
}
$_->quit for @sessions;
ok($published, 'the publisher published an event of the topic in every round');
is($failures, 0, 'no operator\'s counted change failed at REPEATABLE READ or SERIALIZABLE')
  or diag($first_error);

# A prepared transaction that revived an event, its session gone, then the
# next session revives another: it must not wait for COMMIT PREPARED (a
# chance of 1 in 1024 that the two pick one shard: at most one of ten).
# READ COMMITTED whatever the server's default: this is about row locks (two
# SERIALIZABLE transactions, one prepared, conflict through SSI anyway).
# lock_timeout, not statement_timeout: only a wait for a lock counts (a wait
# for COMMIT PREPARED would last until it comes), not how long a loaded
# machine takes to run the statement.
my $blocked = 0;
for my $i (1 .. 10) {
	my $id = shift @ids;
	sql(qq{BEGIN ISOLATION LEVEL READ COMMITTED;
		UPDATE outbox.events SET status = 'pending', next_attempt_at = now() WHERE id = '$id';
		PREPARE TRANSACTION 'counted_$i';});
	$id = shift @ids;
	my ($ret, $out, $err) = $node->psql('postgres', qq{SET lock_timeout = '5s';
		SET default_transaction_isolation = 'read committed';
		UPDATE outbox.events SET status = 'pending', next_attempt_at = now() WHERE id = '$id';});
	$blocked++ if $ret != 0;
	note("round $i: $err") if $ret != 0;
	sql("COMMIT PREPARED 'counted_$i'");
}
cmp_ok($blocked, '<=', 1, "the next session's counted change did not wait for a prepared one ($blocked of 10)");

# Everything revived is published, and the counts add up to the events.
ok(defined wait_until(sub { pending_count($node, 'postgres', "topic = 'rr.topic'") eq '0' }),
	'every revived event is published');
my $stats = q{SELECT pending, published, dead FROM outbox.stats WHERE topic = 'rr.topic'};
my $counted = sql($stats);
sql('SELECT outbox.recount()');
is($counted, sql($stats), 'the running counts equal a recount');

$node->stop;
done_testing();
