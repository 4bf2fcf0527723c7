# A transaction that emitted and was prepared stays prepared across a
# server restart. The publisher cannot know what it emitted (what it knew
# of prepared transactions lived in shared memory), and claims used to start
# from the beginning for as long as it stayed prepared: every claim walked
# every pending event of a topic no route takes (left in place, below the
# floor), and with many of them each claim cost a full scan.
#
# Now such a transaction is passed like any other holder: its events are
# invisible until it commits, and its COMMIT PREPARED makes the publishers
# look back to the beginning once (it counts there until it has ended, and
# their floors are reset once it committed).
#
# Proves, with 200,000 pending events of an unrouted topic: the pages the
# publisher reads per published event while the transaction stays prepared
# across the restart are at most twice those after it committed (a full scan
# per claim read three times as many), also after a COMMIT PREPARED inside
# a function was refused; the transaction's own event, far below the
# floor by then, is published within seconds of its COMMIT PREPARED; a later
# event of its key, emitted after that commit, arrives after it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until pages_per_drained_event);

my $CHUNK = 5_000;
my $UNROUTED = 200_000;

my $redis = OutboxRedis->start();
my $node = outbox_node('prepared_restart', <<'EOF');
max_prepared_transactions = 5
track_commit_timestamp = on
EOF
sub sql { return $node->safe_psql('postgres', $_[0]) }
sql('CREATE EXTENSION outbox');
sql("SELECT outbox.create_sink('r', 'redis', '{\"port\": " . $redis->port . ", \"mode\": \"list\"}')");
sql(q{SELECT outbox.add_route('app.*', 'r', 'app')});
sql(qq{SELECT count(outbox.emit('nobody.t', '{}', (i % 50)::text)) FROM generate_series(1, $UNROUTED) i});

# Emit a chunk of routed events, in small transactions so that the claims
# take many batches, and wait until the publisher has updated every one.
# Returns the pages read per event.
sub chunk_cost {
	my ($topic) = @_;
	return pages_per_drained_event($node, $CHUNK, sub {
		for my $part (1 .. 50) {
			sql(qq{SELECT count(outbox.emit('$topic', '{"n": 1}', (i % 20)::text))
				FROM generate_series(1, $CHUNK / 50) AS i});
		}
	});
}

sql(q{SELECT outbox.emit('app.warm', '{}')});
ok(defined wait_until(sub { sql(q{SELECT count(*) FROM outbox.events WHERE topic = 'app.warm'
	AND status = 'published'}) eq '1' }), 'warm-up: events flow');

sql(q{BEGIN;
SELECT outbox.emit('app.held', '{"held": true}', 'h');
PREPARE TRANSACTION 'held';});
$node->restart;
is(sql('SELECT count(*) FROM pg_prepared_xacts'), '1', 'the transaction is still prepared after the restart');

# The first chunk after the restart pays for the new publisher's first full
# scan, as any start does: the two after it are compared.
my @prepared = map { chunk_cost("app.p$_") } 1 .. 3;
note('pages per event while prepared: ' . join(', ', map { sprintf('%.2f', $_) } @prepared));
shift @prepared;
# COMMIT PREPARED inside a function is refused (PL/pgSQL refuses it before
# it runs; outbox's hook looks only at a top-level one): the transaction
# stays passed, not counted as committing (at the beginning) for as long as
# it stays prepared.
my ($rc, $out, $err) = $node->psql('postgres', q{DO $$ BEGIN EXECUTE 'COMMIT PREPARED ''held'''; END $$});
like($err, qr/EXECUTE of transaction commands is not implemented|cannot be executed from a function/,
	'COMMIT PREPARED inside a function is refused');
push @prepared, chunk_cost('app.p4');
note(sprintf('pages per event after that refusal: %.2f', $prepared[-1]));

my $xid = sql(q{SELECT transaction FROM pg_prepared_xacts WHERE gid = 'held'});
sql(q{COMMIT PREPARED 'held'});
sql(q{SELECT outbox.emit('app.held', '{"after": true}', 'h')});
ok(defined wait_until(sub { sql(q{SELECT count(*) FROM outbox.events WHERE topic = 'app.held'
	AND status = 'published'}) eq '2' }, 10), 'its event and a later one of its key are published');
my $took = sql(qq{SELECT extract(epoch FROM published_at - pg_xact_commit_timestamp('$xid'::xid))
	FROM outbox.events WHERE topic = 'app.held' AND payload ? 'held'});
note("its event was published ${took}s after COMMIT PREPARED");
ok($took < 3, 'its event went out within 3 s of COMMIT PREPARED (the claims looked back), not at a later full scan');
my @held = grep { /"topic":"app\.held"/ } split /\n/, $redis->cli('LRANGE', 'app', '0', '-1');
is(scalar(@held), 2, 'both reached Redis once');
like(join("\n", @held), qr/"held":\s*true.*\n.*"after":\s*true/, 'the later event of its key arrived after it');

my @after = map { chunk_cost("app.c$_") } 1 .. 2;
note('pages per event after it committed: ' . join(', ', map { sprintf('%.2f', $_) } @after));
my ($worst_prepared) = sort { $b <=> $a } @prepared;
my ($cheapest_after) = sort { $a <=> $b } @after;
ok($worst_prepared <= 2 * $cheapest_after,
	sprintf('while it stayed prepared across the restart, claims cost at most twice the pages per '
		  . 'event of after its commit (%.2f against %.2f): they did not walk the %d unrouted events',
		$worst_prepared, $cheapest_after, $UNROUTED));
is(sql(q{SELECT count(*) FROM outbox.events WHERE topic = 'nobody.t' AND status = 'pending'}),
	"$UNROUTED", 'the unrouted events wait, untouched');

$node->stop;
$redis->stop;
done_testing();
