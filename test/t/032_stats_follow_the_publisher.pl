# outbox.stats and outbox.route_lag stay exact while the publisher works
# (published, retried, dead, replayed, partitions dropped), the lag of a
# paused route grows and shows, and the postgres_exporter queries and alert
# rules in docs/monitoring work as shipped.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql pending_count);

# In the repository (test/t/../../docs), or in the copy run_all.sh runs (t/../docs).
my ($docs) = grep { -d } map { "$FindBin::RealBin/$_/docs/monitoring" } '..', '../..';
die 'docs/monitoring not found beside the tests' unless defined $docs;
my $kafka = OutboxKafka->start();
$kafka->command_ok("create_topic $_ 1") for qw(ok.out small.out);
my $node = outbox_node('stats', "outbox.max_attempts = 2");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
# Refuses messages over 2000 bytes: a payload above that goes dead.
$node->safe_psql('postgres',
	kafka_sink_sql('small', $kafka->bootstrap, 'message.max.bytes' => '2000'));
$node->safe_psql('postgres', q{
	SELECT outbox.add_route('ok.*', 'kafka', 'ok.out');
	SELECT outbox.add_route('small.*', 'small', 'small.out');
	SELECT outbox.add_route('held.*', 'kafka', 'ok.out');
	SELECT outbox.pause('held.*');});

# The slow, certain count that outbox.stats must equal.
my $counted = q{
	SELECT string_agg(format('%s %s/%s/%s', topic, p, u, d), ', ' ORDER BY topic) FROM (
	  SELECT topic, count(*) FILTER (WHERE status = 'pending') p,
	         count(*) FILTER (WHERE status = 'published') u,
	         count(*) FILTER (WHERE status = 'dead') d
	    FROM outbox.events GROUP BY topic) x};
my $stats = q{
	SELECT string_agg(format('%s %s/%s/%s', topic, pending, published, dead), ', ' ORDER BY topic)
	  FROM outbox.stats};

$node->safe_psql('postgres', q{
	SELECT count(outbox.emit('ok.orders', jsonb_build_object('n', n), 'k' || (n % 7)))
	  FROM generate_series(1, 500) n;
	SELECT outbox.emit('small.orders', '{"n": 1}', 'a');
	SELECT outbox.emit('small.orders', jsonb_build_object('blob', repeat('x', 5000)), 'b');
	SELECT count(outbox.emit('held.orders', '{}')) FROM generate_series(1, 5);});
ok(defined wait_until(sub {
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM outbox.events WHERE status = 'pending' AND topic NOT LIKE 'held.%'})
	  eq '0' }), 'everything but the paused route settled');
is($node->safe_psql('postgres', $stats), 'held.orders 5/0/0, ok.orders 0/500/0, small.orders 0/1/1',
	'stats: published, dead and paused events where they are');
is($node->safe_psql('postgres', $stats), $node->safe_psql('postgres', $counted),
	'stats equal a full count after the publisher worked');

# Per-route lag: the paused route's grows; the flowing one has none.
sleep 1;
is($node->safe_psql('postgres',
		q{SELECT format('%s %s %s %s', pattern, paused, pending, oldest_pending_age >= '1 second')
		    FROM outbox.route_lag WHERE pattern = 'held.*'}),
	'held.* t 5 t', 'route_lag: a paused route shows its backlog and its lag');
is($node->safe_psql('postgres',
		q{SELECT format('%s %s %s', pending, dead, oldest_pending_age IS NULL)
		    FROM outbox.route_lag WHERE pattern = 'ok.*'}),
	'0 0 t', 'route_lag: a flowing route has no lag');

# Resume, retry the dead one (dead again), replay: counts move with them.
$node->safe_psql('postgres', q{
	SELECT outbox.resume('held.*');
	SELECT outbox.retry_dead('small.orders');
	SELECT outbox.replay(now() - interval '1 hour', 'ok.orders');});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'pending'}) eq '0' }),
	'resumed, revived and replayed events settled');
is($node->safe_psql('postgres', $stats), 'held.orders 0/5/0, ok.orders 0/500/0, small.orders 0/1/1',
	'stats after resume, retry_dead and replay');
is($node->safe_psql('postgres', $stats), $node->safe_psql('postgres', $counted),
	'stats still equal a full count');

# Dropping a partition past retention takes its counts along (an operator
# settles the dead event by hand first: counted too).
$node->safe_psql('postgres', q{UPDATE outbox.events SET status = 'published' WHERE status = 'dead'});
# (A longer lock timeout: the publisher's cycles may hold the lock briefly,
# longer on a loaded machine.)
$node->safe_psql('postgres', q{SET outbox.maintenance_lock_timeout = '60s';
	SELECT outbox.maintain(now() + interval '30 days')});
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events}), '0',
	'retention dropped every partition');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.stats}), '0',
	'published events of dropped partitions leave stats');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.counts}), '0',
	'and leave no counts behind');
$node->safe_psql('postgres', q{SELECT outbox.maintain()});
$node->safe_psql('postgres', q{SELECT outbox.emit('ok.orders', '{}')});

# --- docs/monitoring: every exporter query runs, as a monitoring role.
$node->safe_psql('postgres', q{
	CREATE ROLE exporter LOGIN IN ROLE pg_monitor;
	GRANT SELECT ON outbox.stats, outbox.route_lag, outbox.workers TO pg_monitor;
	GRANT EXECUTE ON FUNCTION outbox.worker_stats() TO pg_monitor;});
open my $fh, '<', "$docs/postgres_exporter_queries.yaml" or die "queries file: $!";
my (%queries, %metrics, $name, $in_query);
while (my $line = <$fh>) {
	if ($line =~ /^([a-z_]+):\s*$/) { ($name, $in_query) = ($1, 0); next; }
	next unless defined $name;
	if ($line =~ /^  query: \|\s*$/) { $in_query = 1; next; }
	if ($in_query && $line =~ /^    (.*)$/) { $queries{$name} .= "$1\n"; next; }
	$in_query = 0;
	$metrics{"${name}_$1"} = 1 if $line =~ /^    - ([a-z_]+):/;
}
close $fh;
is_deeply([ sort keys %queries ], [qw(outbox_route outbox_topic outbox_worker outbox_workers)],
	'the queries file defines topic, route and worker metrics');
for my $q (sort keys %queries) {
	my ($ret, $out, $err) = $node->psql('postgres', $queries{$q},
		extra_params => [ '-U', 'exporter' ]);
	is($ret, 0, "exporter query $q runs as a pg_monitor member") or diag $err;
	ok(length $out, "exporter query $q returns rows");
}
is($node->safe_psql('postgres', $queries{outbox_workers}), 'postgres|1',
	'outbox_workers_running is 1 with the publisher up');

# Every metric an alert rule uses is one the queries produce.
open $fh, '<', "$docs/prometheus_alerts.yaml" or die "alerts file: $!";
my $rules = do { local $/; <$fh> };
close $fh;
my @used = $rules =~ /\b(outbox_[a-z_]+)/g;
my @unknown = grep { !$metrics{$_} } @used;
ok(scalar @used >= 6, 'the alert rules use outbox metrics');
is_deeply(\@unknown, [], 'every metric in the alert rules comes from the exporter queries');
for my $alert (qw(OutboxBacklogGrowing OutboxOldestPendingTooOld OutboxDeadEvents OutboxPublisherMissing)) {
	like($rules, qr/alert: $alert\b/, "alert rule $alert is shipped");
}

done_testing();
