# The claims' floor passes a transaction that emitted more than a second ago
# and is still open (057 shows why). Its events then lie below the floor,
# and its later events above it. When it commits while a cycle is between
# its start and its claim, that claim's snapshot sees the later events but
# starts above the earlier ones: sending what it found would put a key's
# second event before its first. The transaction reports its commit before
# its events are visible, so the check after the claim finds the report, and
# the claim is made again from the transaction's first emit (claim.cpp).
#
# Made certain with the fault injection build: the transaction emits key k's
# first event, is passed by a cycle, emits k's second event, and commits
# while the next cycle stalls before its claim (publisher.before_claim=stall,
# 2 s). Redis must receive k's events in emit order, and the log (debug1)
# shows that the claim was made again. With the check after the claim
# removed, the second event arrives first. A second part (below) holds a
# commit between its report and its visibility.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until set_faults);

my $redis = OutboxRedis->start();
my $node = outbox_node('passed', <<'EOF', fault_injection => 1, allows_streaming => 1);
outbox.poll_interval = '1h'
log_min_messages = debug1
EOF
sub sql { return $node->safe_psql('postgres', $_[0]) }
sql('CREATE EXTENSION outbox');
sql("SELECT outbox.create_sink('r', 'redis', '{\"port\": " . $redis->port . ", \"mode\": \"list\"}')");
sql(q{SELECT outbox.add_route('*', 'r', 'k')});

sub published { return sql("SELECT status FROM outbox.events WHERE id = '$_[0]'") eq 'published' }

my $s = $node->background_psql('postgres');
$s->query_safe('BEGIN');
my $first = $s->query_safe(q{SELECT outbox.emit('t', '{"n": 1}', 'k')});
sleep 2;    # open for more than a second: the next cycle passes it
my $wake = sql(q{SELECT outbox.emit('other', '{}')});
ok(defined wait_until(sub { published($wake) }), 'a cycle ran with the transaction open 2 s');
is(sql("SELECT status FROM outbox.events WHERE id = '$first'"), '', 'its first event is not visible yet');
my $second = $s->query_safe(q{SELECT outbox.emit('t', '{"n": 2}', 'k')});

# The reload starts a cycle, which stalls before its claim; the transaction
# commits meanwhile.
my $offset = -s $node->logfile;
set_faults($node, 'publisher.before_claim=stall#1');
ok(defined wait_until(sub {
	slurp_file($node->logfile, $offset) =~ /fault injection: stall at publisher\.before_claim/ }),
	'the next cycle stalls before its claim');
$s->query_safe('COMMIT');
$s->quit;

ok(defined wait_until(sub { published($first) && published($second) }), 'both events are published');
# First deliveries: on a loaded machine Redis may not answer within the
# sink's timeout, and what was in flight is sent again (at least once).
my %seen;
my @arrived = grep { !$seen{$_}++ } map { /"n":\s*(\d+)/ ? $1 : () } split /\n/,
  $redis->cli('LRANGE', 'k', '0', '-1');
is("@arrived", '1 2', "key k's events arrive in emit order");
like(slurp_file($node->logfile, $offset),
	qr/committed during a claim: claiming again from its first emit/,
	'the claim during which it committed was made again from its first emit');
set_faults($node, '');

# Second: the report comes before the commit is visible, and a commit can
# take long in between (here a synchronous standby that never answers; in
# production a slow one). Cycles that take the report while the events are
# still invisible must not move their floor past them: a committing
# transaction counts in the bound again until it has ended. The events then
# go out as soon as they are visible, not at the next full scan (every 10 s:
# a probe INSERTed without emit() at the Unix epoch, below every floor, shows
# when one ran, and the commit is let through right after one).
sql(q{ALTER SYSTEM SET log_min_messages = 'info';
	ALTER SYSTEM SET synchronous_standby_names = 'nobody';
	ALTER SYSTEM SET synchronous_commit = 'local';
	SELECT pg_reload_conf();});
ok(defined wait_until(sub { sql('SHOW synchronous_standby_names') eq 'nobody' }), 'a standby nobody is');

my $probes = 0;
sub after_full_scan {
	my $id = sprintf('00000000-0000-7000-8000-%012x', ++$probes);
	sql(qq{INSERT INTO outbox.events (id, topic, payload) VALUES ('$id', 'canary', '{}')});
	# Cycles come only when something wakes the publisher.
	return wait_until(sub { sql(q{SELECT outbox.emit('other', '{}')}); published($id) });
}

$s = $node->background_psql('postgres');
$s->query_safe('BEGIN');
my $slow = $s->query_safe(q{SELECT outbox.emit('t', '{"n": 3}', 'k2')});
my $pid = $s->query_safe('SELECT pg_backend_pid()');
sleep 2;
$wake = sql(q{SELECT outbox.emit('other', '{}')});
ok(defined wait_until(sub { published($wake) }), 'a cycle passed the transaction');
$s->query_safe('SET LOCAL synchronous_commit = on');
$s->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
ok(defined wait_until(sub { sql("SELECT wait_event FROM pg_stat_activity WHERE pid = $pid") eq 'SyncRep' }),
	'its commit waits for the standby, after its report');
# Cycles take the report; a second and more later their bound would be past
# the transaction's first emit, were it not counted.
for my $n (1 .. 3) {
	sleep 1;
	$wake = sql(q{SELECT outbox.emit('other', '{}')});
	ok(defined wait_until(sub { published($wake) }), "cycle $n ran during the commit");
}
is(sql("SELECT count(*) FROM outbox.events WHERE id = '$slow'"), '0', 'its event is not visible yet');
ok(defined after_full_scan(), 'a full scan ran');
# The commit is local: it becomes visible. From the cancel to the event's
# publication (published_at) by the server's clock: how long the test's
# psql calls take on a loaded machine is no part of it.
my $released = sql("SELECT extract(epoch FROM clock_timestamp()) FROM pg_cancel_backend($pid)");
ok(defined wait_until(sub { published($slow) }, 20), 'its event is published');
my $took = sql("SELECT extract(epoch FROM published_at) - $released FROM outbox.events WHERE id = '$slow'");
ok($took ne '' && $took < 2.5,
	sprintf('... within 2.5 s of becoming visible, not at the next full scan (%.2f s)', $took eq "" ? -1 : $took));
$s->quit;
sql(q{ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf();});

is(sql('SELECT coalesce(sum(failures), 0) FROM outbox.workers'), '0', 'the publisher raised no error');
$node->stop;
$redis->stop;
done_testing();
