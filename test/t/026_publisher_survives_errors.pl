# A publisher that hits an ERROR logs why, backs off and carries on: it does
# not exit, does not crash-loop the server, and delivers once the cause is
# gone. A fast shutdown ends a delivery stuck on unreachable brokers within
# seconds, leaving its events pending.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql pending_count);

my $kafka = OutboxKafka->start();
$kafka->command('create_topic errors 1');
my $node = outbox_node('errors');
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap,
	'message.timeout.ms' => '30000'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('errors.*', 'kafka', 'errors')});

sub publisher_pid {
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox publisher'");
}
ok(defined wait_until(sub { publisher_pid() ne '' }), 'publisher running');
my $pid = publisher_pid();

# Every attempt to record an outcome fails with an ERROR.
$node->safe_psql('postgres', q{
	CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN RAISE EXCEPTION 'injected failure'; END $$;
	CREATE TRIGGER refuse BEFORE UPDATE ON outbox.events
	  FOR EACH ROW EXECUTE FUNCTION public.refuse();});
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', q{SELECT outbox.emit('errors.test', '{"n": 1}', 'k')});
ok(defined wait_until(sub { slurp_file($node->logfile, $log_offset) =~ /ERROR:  injected failure/ }),
	'the error is logged');
# Then 5 s more: the backoff doubles from 100 ms, about 6 errors in 5 s from
# the first; a loop would log hundreds. (A busy machine only makes it fewer.)
sleep 5;
my $log = slurp_file($node->logfile, $log_offset);
my $errors = () = $log =~ /ERROR:  injected failure/g;
cmp_ok($errors, '<=', 8, "with backoff, not in a loop ($errors times in the 5 s after the first)");
unlike($log, qr/terminated by signal|server process .* exited with exit code/,
	'no process crashed');
is(publisher_pid(), $pid, 'the same publisher carries on');
is(pending_count($node), '1', 'the event is still pending');

is($node->safe_psql('postgres', q{
	SELECT last_error || ' | ' || (failures >= 1) || ' | ' || (now() - last_error_at < interval '1 minute')
	  FROM outbox.workers}),
	'injected failure | true | true', 'outbox.workers shows the last error and when');
$node->safe_psql('postgres', 'DROP TRIGGER refuse ON outbox.events');
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'delivered once the cause is gone');

# Shutdown while a delivery waits for unreachable brokers (message.timeout.ms
# 30 s: a shutdown that waited for it would take that long).
$kafka->command('down all');
$node->safe_psql('postgres', q{SELECT outbox.emit('errors.test', '{"n": 2}', 'k')});
sleep 1;
my $start = time();
$node->stop('fast');
my $took = time() - $start;
cmp_ok($took, '<', 15, sprintf('fast shutdown with a delivery in flight took %.1f s', $took));
$kafka->command('up all');
$node->start;
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'the abandoned event is delivered after restart');

$node->stop;
$kafka->stop;
done_testing();
