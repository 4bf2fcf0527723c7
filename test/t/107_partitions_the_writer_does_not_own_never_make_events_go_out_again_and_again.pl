# Partitions of outbox.events that outbox_writer does not own (a restore
# with --no-owner makes them the restoring role's; a superuser may make a
# day by hand, or partition one further) refuse the publisher's outcome
# updates, which name them: the events were sent, their outcomes could not
# be written, and the next cycle sent them again, and again, until the
# minute's maintenance gave the partitions to the writer (5 pending events
# reached the broker 55 times in the review that found it; the leaves of a
# day partitioned further were never given over, and their events went out
# forever). Now a cycle that fails for want of a privilege makes the
# publisher give every partition, at every level, to the owner of
# outbox.events before its next cycle.
#
# Proves: with today's partition made the superuser's while the publisher
# runs, five events reach Redis once each (at most once more: the first
# cycle's), within seconds; today's partition and both levels of a day
# partitioned further belong to outbox_writer afterwards. The same when a
# superuser revokes UPDATE on today's partition from outbox_writer: the
# publisher grants it back.
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
my $port = $redis->port;
my $node = outbox_node('owners_of_partitions', '');
$node->safe_psql('postgres', qq{
CREATE EXTENSION outbox;
SELECT outbox.create_sink('r', 'redis', '{"port": $port}');
SELECT outbox.add_route('ev.*', 'r', 'ev');
SELECT outbox.emit('ev.first', '{}');});
ok(defined wait_until(sub { $redis->cli('XLEN', 'ev') eq '1' }), 'the publisher publishes');

my $today = $node->safe_psql('postgres', q{SELECT name FROM outbox.partitions
	WHERE range_start <= now() AND now() < range_end});
my $user = $node->safe_psql('postgres', 'SELECT current_user');
$node->safe_psql('postgres', qq{
ALTER TABLE outbox.$today OWNER TO $user;
CREATE TABLE outbox.events_p20310110 PARTITION OF outbox.events
    FOR VALUES FROM ('2031-01-10 00:00+00') TO ('2031-01-11 00:00+00') PARTITION BY RANGE (created_at);
CREATE TABLE outbox.events_p20310110_all PARTITION OF outbox.events_p20310110
    FOR VALUES FROM ('2031-01-10 00:00+00') TO ('2031-01-11 00:00+00');});
$node->safe_psql('postgres', q{SELECT outbox.emit('ev.e', pg_catalog.jsonb_build_object('n', n), 'k' || n)
	FROM generate_series(1, 5) n});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '6' }, 30),
	'the five events are marked published');
sleep 3;    # time for any more copies to go out
my $copies = $redis->cli('XLEN', 'ev') - 1;
cmp_ok($copies, '>=', 5, 'each reached Redis');
cmp_ok($copies, '<=', 10, "no event went out again and again ($copies copies of 5)");
is($node->safe_psql('postgres', qq{SELECT string_agg(c.relname || '=' || pg_catalog.pg_get_userbyid(c.relowner), ',' ORDER BY c.relname)
	FROM pg_class c WHERE c.relname IN ('$today', 'events_p20310110', 'events_p20310110_all')}),
	join(',', map { "$_=outbox_writer" } sort ($today, 'events_p20310110', 'events_p20310110_all')),
	'the partitions, both levels of the one partitioned further, belong to outbox_writer');

# UPDATE revoked from the owner itself.
$node->safe_psql('postgres', qq{REVOKE UPDATE ON outbox.$today FROM outbox_writer});
my $before = $redis->cli('XLEN', 'ev');
$node->safe_psql('postgres', q{SELECT outbox.emit('ev.r', pg_catalog.jsonb_build_object('n', n), 'r' || n)
	FROM generate_series(1, 5) n});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '11' }, 30),
	'with UPDATE revoked from the writer, the five events are marked published');
sleep 3;
$copies = $redis->cli('XLEN', 'ev') - $before;
cmp_ok($copies, '<=', 10, "... none went out again and again ($copies copies of 5)");
is($node->safe_psql('postgres', qq{SELECT has_table_privilege('outbox_writer', 'outbox.$today', 'UPDATE')}), 't',
	'outbox_writer has UPDATE on its partition again');

$node->stop;
$redis->stop;
done_testing();
