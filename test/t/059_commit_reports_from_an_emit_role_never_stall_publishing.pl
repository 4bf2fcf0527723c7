# A role granted only emit() (and, as every role, PREPARE TRANSACTION)
# commits a steady stream (~100/s) of prepared transactions that emitted
# more than a second before: the claims' floor passed each, and each reports
# its commit (emit_horizon.cpp). It emits 50 events per transaction to a
# topic no route takes, so every claim that looks back walks them. Once,
# every report made the publisher claim its first batch again, and after
# three tries give it up and start over: nothing was published for the
# length of the flood (45 s of latency in a 65 s flood). Now a report makes a
# claim look again only when its transaction's first emit lies below where
# that claim started (claim_floor.hpp, HolderCommitted): a legitimate
# application's events (topic "legit", routed, one every 0.25 s) go out
# within 5 s throughout. RT_ITER makes the flood longer.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until);

my $ITER = $ENV{RT_ITER} // 2500;
my $LAG = $ENV{RT_LAG} // 250;
my $SLEEP = $ENV{RT_SLEEP} // '0.006';
my $JUNK = $ENV{RT_JUNK} // 50;
my $ROUTE = $ENV{RT_ROUTE} // 'legit';
my $redis = OutboxRedis->start();
my $node = outbox_node('flood', <<"EOC");
max_prepared_transactions = 400
log_min_messages = debug1
log_min_error_statement = panic
EOC
sub sql { return $node->safe_psql('postgres', $_[0]) }
sql('CREATE EXTENSION outbox');
sql("SELECT outbox.create_sink('r', 'redis', '{\"port\": " . $redis->port . ", \"mode\": \"list\"}')");
sql(qq{SELECT outbox.add_route('$ROUTE', 'r', 'k')});
sql(q{CREATE ROLE app LOGIN; GRANT USAGE ON SCHEMA outbox TO app;
	GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO app;});

# Baseline: a legitimate event goes out at once.
sub legit {
	my ($n) = @_;
	return sql(qq{SELECT outbox.emit('legit', '{"n": $n}', 'L')});
}
my $b = legit(0);
ok(defined wait_until(sub { sql("SELECT status FROM outbox.events WHERE id = '$b'") eq 'published' }, 30),
	'baseline event published');

# The hostile script: prepare one emitting transaction, commit the one
# prepared $LAG steps before (by then older than a second: passed).
my $file = "$PostgreSQL::Test::Utils::tmp_check/flood.sql";
open my $fh, '>', $file or die;
for my $i (1 .. $ITER) {
	print $fh "BEGIN; SELECT count(outbox.emit('junk', '{}')) FROM generate_series(1, $JUNK); PREPARE TRANSACTION 'h$i';\n";
	print $fh "COMMIT PREPARED 'h" . ($i - $LAG) . "';\n" if $i > $LAG;
	print $fh "SELECT pg_sleep($SLEEP);\n";
}
for my $i ($ITER - $LAG + 1 .. $ITER) { print $fh "COMMIT PREPARED 'h$i';\n" if $i > 0 }
close $fh;
my $offset = -s $node->logfile;
my ($out, $err) = ('', '');
my $h = IPC::Run::start(
	[ 'psql', '-X', '-q', '-o', '/dev/null', '-d', $node->connstr('postgres') . ' user=app', '-f', $file ],
	'>', \$out, '2>', \$err);
my $start = time();
my $n = 0;
while ($h->pumpable && time() - $start < 120) {
	legit(++$n);
	usleep(250_000);
	$h->pump_nb;
}
my $attack = time() - $start;
$h->finish;
note(sprintf('hostile script ran %.1f s; stderr: %s', $attack, substr($err, 0, 300)));
my $log = slurp_file($node->logfile, $offset);
note('batches abandoned after a report: ' . scalar(() = $log =~ /its batch waits for the next cycle/g));
note('claims made again after a report: ' . scalar(() = $log =~ /claiming again from its first emit/g));
ok(defined wait_until(sub { sql(q{SELECT count(*) FROM outbox.events WHERE status <> 'published' AND topic = 'legit'}) eq '0' }, 120),
	'everything published in the end');
my $lat = sql(q{SELECT string_agg(round(extract(epoch FROM published_at - created_at)::numeric, 2)::text, ' ' ORDER BY id)
	FROM outbox.events WHERE topic = 'legit'});
note("legit latencies (s): $lat");
my $max = sql(q{SELECT max(extract(epoch FROM published_at - created_at)) FROM outbox.events WHERE topic = 'legit'});
ok($max < 5, "every legitimate event published within 5 s during the flood (max $max s)");
is(sql('SELECT coalesce(sum(failures), 0) FROM outbox.workers'), '0', 'the publisher raised no error');
$node->stop;
$redis->stop;
done_testing();
