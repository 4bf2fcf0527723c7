# Per-key order on a route without a target, whose events each go to their
# own topic: a key's events on two topics arrive in emit order, across a
# failure. Redis streams per topic; the first topic's key is a string at
# first (Redis refuses XADD with WRONGTYPE), so the key's first event fails
# and is retried. Its second event, on a healthy topic, must wait for it:
# a sink sends a key's events per target, so without the dispatcher's rule
# (one topic per key and pass over a batch) the second was delivered in the
# first cycle and the first a retry later. Redis stamps stream entries with
# its own clock, so the entries' ids say which arrived first.
#
# Also: the second key, on the healthy topic only, is not held; an event of
# the first key emitted after the failure is held too, and all arrive once
# the first topic takes writes.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until);

my $redis = OutboxRedis->start();
my $node = outbox_node('two_topics', <<"EOF");
outbox.max_attempts = 1000
outbox.backoff_min = 100
outbox.backoff_max = 500
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', "SELECT outbox.create_sink('r', 'redis', '{\"port\": "
	  . $redis->port . ", \"mode\": \"stream\"}')");
$node->safe_psql('postgres', q{SELECT outbox.add_route('ord.*', 'r')});  # no target: the topic

$redis->cli('SET', 'ord.created', 'not a stream');
# One transaction, so that one claim takes them together: k1 on both topics,
# k2 on the healthy one only.
$node->safe_psql('postgres', q{BEGIN;
SELECT outbox.emit('ord.created', '{"n": 1}', 'k1');
SELECT outbox.emit('ord.paid', '{"n": 2}', 'k1');
SELECT outbox.emit('ord.paid', '{"n": 3}', 'k2');
COMMIT;});

my $status = sub {
	my ($n) = @_;
	return $node->safe_psql('postgres',
		"SELECT status || ':' || attempts FROM outbox.events WHERE payload->>'n' = '$n'");
};
ok(defined wait_until(sub { $status->(3) =~ /^published/ }), 'k2 on the healthy topic is published');
ok(defined wait_until(sub { $status->(1) =~ /^pending:[1-9]/ }),
	'k1 on the refused topic fails and is retried')
  or diag $status->(1);
like($node->safe_psql('postgres', q{SELECT last_error FROM outbox.events WHERE payload->>'n' = '1'}),
	qr/WRONGTYPE/, 'the refusal is named');
# Several retries of event 1 (backoff at most 500 ms) while event 2 waits.
ok(defined wait_until(sub { ($status->(1) =~ /:(\d+)$/)[0] >= 3 }), 'k1 is retried again and again');
$node->safe_psql('postgres', q{SELECT outbox.emit('ord.paid', '{"n": 4}', 'k1')});
sleep 1;
like($status->(2), qr/^pending/, "k1's event on the healthy topic waits for its earlier one");
like($status->(4), qr/^pending/, "and so does k1's next one");
is($redis->cli('XLEN', 'ord.paid'), '1', 'the healthy topic holds only k2 so far');

$redis->cli('DEL', 'ord.created');
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '4' }),
	'all four are published once the topic takes writes');

# Entry ids are "<ms>-<seq>" by Redis's clock: compare them as pairs.
my $entry = sub {
	my ($stream, $n) = @_;
	my @lines = split /\n/, $redis->cli('XRANGE', $stream, '-', '+');
	my $id;
	for my $l (@lines) {
		$id = $l if $l =~ /^\d+-\d+$/;
		return $id if $l =~ /"n": ?$n\b/;
	}
	return undef;
};
my @created = split /-/, ($entry->('ord.created', 1) // '0-0');
my @paid = split /-/, ($entry->('ord.paid', 2) // '0-0');
ok($created[0] > 0 && $paid[0] > 0, 'both of k1 arrived');
# Two streams number their entries apart: within one millisecond both may
# be "<ms>-0", so only the milliseconds compare across them (an overtaking
# event would have gone while ord.created was refused, a second or more
# before it).
ok($created[0] <= $paid[0], "k1's events arrived in emit order across the two topics")
  or diag "ord.created entry @created, ord.paid entry @paid";
my @next = split /-/, ($entry->('ord.paid', 4) // '0-0');
ok($next[0] > $paid[0] || ($next[0] == $paid[0] && $next[1] > $paid[1]), "and k1's third after its second");

$node->stop;
$redis->stop;
done_testing();
