# Events whose topic no route takes wait where emit() put them: the
# publisher neither claims nor updates them (their rows are never locked,
# xmax stays 0, next_attempt_at stays NULL), full scans included, and they
# flow once a route takes them, in emit order per key. The same for a paused
# route until it is resumed. outbox.stats and outbox.route_lag count them as
# pending meanwhile. Each such event used to be claimed and parked with an
# UPDATE, one by one, which cost a running publisher more CPU than the
# application's own inserts.
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
my $node = outbox_node('unrouted');
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
my $port = $redis->port;
# c.*: the test's own markers (see below).
$node->safe_psql('postgres', qq{
	SELECT outbox.create_sink('redis', 'redis', '{"port": $port}');
	SELECT outbox.add_route('r.*', 'redis', 'routed');
	SELECT outbox.add_route('c.*', 'redis', 'markers');});

sub sql { return $node->safe_psql('postgres', $_[0]) }

# Stream entries as [key, n] in stream order.
sub stream_entries {
	my ($stream) = @_;
	my @lines = split /\n/, $redis->cli('XRANGE', $stream, '-', '+');
	my @entries;
	my $i = 0;
	while ($i < @lines) {
		my %f;
		$i++;  # the entry id
		while ($i < @lines && $lines[$i] !~ /^\d+-\d+$/) {
			my ($k, $v) = @lines[ $i, $i + 1 ];
			$f{$k} = $v;
			$i += 2;
		}
		my ($n) = $f{payload} =~ /"n":\s*(\d+)/;
		push @entries, [ $f{key}, $n ];
	}
	return @entries;
}

# Per key, n must rise along the stream.
sub in_order_per_key {
	my %last;
	for my $e (@_) {
		my ($key, $n) = @$e;
		return "key $key: $n after $last{$key}" if defined $last{$key} && $n <= $last{$key};
		$last{$key} = $n;
	}
	return '';
}

sub untouched {
	my ($where) = @_;
	return sql("SELECT count(*) FILTER (WHERE xmax::text <> '0' OR next_attempt_at IS NOT NULL"
		  . " OR attempts <> 0 OR status <> 'pending') || '/' || count(*)"
		  . " FROM outbox.events WHERE $where");
}

# 3000 events no route takes, 10 keys, in 30 transactions; and routed ones.
sql(q{
	DO $$
	BEGIN
		FOR t IN 0 .. 29 LOOP
			PERFORM outbox.emit('u.orders', jsonb_build_object('n', t * 100 + i), 'k' || (i % 10))
			  FROM generate_series(0, 99) AS i;
			COMMIT;
		END LOOP;
	END $$;});
sql(q{SELECT outbox.emit('r.x', jsonb_build_object('n', i), 'k' || (i % 3)) FROM generate_series(1, 100) i});
ok(defined wait_until(sub { pending_count($node, 'postgres', "topic = 'r.x'") eq '0' }),
	'routed events are published beside them');

# A full scan (every 10 s) and many cycles since: a row INSERTed without
# emit() whose id is the smallest lies below every claim's floor, and only a
# claim from the beginning, a full scan, reaches it. Once it is published, a
# full scan has walked past the events.
my $canary = '00000000-0000-7000-8000-000000000001';
sql("INSERT INTO outbox.events (id, topic, payload) VALUES ('$canary', 'c.canary', '{}')");
ok(defined wait_until(sub { sql("SELECT status FROM outbox.events WHERE id = '$canary'") eq 'published' }),
	'a full scan ran since (it published a row only a full scan reaches)');
is(untouched("topic = 'u.orders'"), '0/3000',
	'no event without a route was claimed or updated, full scans included');
is(sql(q{SELECT pending FROM outbox.stats WHERE topic = 'u.orders'}), '3000',
	'outbox.stats counts them as pending');
is(sql(q{SELECT topics || ' ' || pending FROM outbox.route_lag WHERE pattern IS NULL}), '1 3000',
	'outbox.route_lag shows them with no route');

# A paused route: its events wait untouched too.
sql(q{SELECT outbox.pause('r.*')});
sql(q{SELECT outbox.emit('r.x', jsonb_build_object('n', 1000 + i), 'k' || (i % 3)) FROM generate_series(1, 50) i});
# Cycles ran since: an event emitted after them is published.
sql(q{SELECT outbox.emit('c.after_pause', '{}')});
ok(defined wait_until(sub { pending_count($node, 'postgres', "topic = 'c.after_pause'") eq '0' }),
	'an event of another route emitted after them is published');
is(untouched("topic = 'r.x' AND status = 'pending'"), '0/50',
	'events of a paused route wait untouched');

# A route appears: every waiting event flows, in emit order per key.
sql(q{SELECT outbox.add_route('u.*', 'redis', 'unrouted')});
ok(defined wait_until(sub { pending_count($node, 'postgres', "topic = 'u.orders'") eq '0' }),
	'they are published once a route takes them');
my @unrouted = stream_entries('unrouted');
is(scalar @unrouted, 3000, 'each arrived');
is(in_order_per_key(@unrouted), '', 'in emit order per key');

sql(q{SELECT outbox.resume('r.*')});
ok(defined wait_until(sub { pending_count($node, 'postgres') eq '0' }),
	'the paused route\'s events flow once it is resumed');
my @routed = stream_entries('routed');
is(scalar @routed, 150, 'every routed event arrived');
is(in_order_per_key(@routed), '', 'in emit order per key, across the pause');
is(sql(q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}), '0', 'all published');

$node->stop;
done_testing();
