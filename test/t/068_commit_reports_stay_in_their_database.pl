# A passed transaction's commit report reaches only the publishers of its own
# database (a mailbox per publisher, shmem.hpp). Once, reports went into one
# ring of 64 for the whole server, and a publisher that found more than 64
# since it last looked, of any database, looked back to the beginning: a
# role granted only emit() in database "postgres", committing prepared
# transactions that emitted more than a second before at ~150/s, made the
# publisher of database "victim" walk its 1,000,000 parked events 37 times in
# 25 s and delayed its application's events by up to 10 s. Here "victim"
# holds RT_PARKED (100,000) events of a topic no route takes (left in place,
# below the floor: free while nobody looks back to the beginning) and
# publishes one routed event every 2 s; counted are its publisher's full
# scans (tuples read through the ready index / parked events) and its
# application's latency, with the flood and without.
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

my $PARKED = $ENV{RT_PARKED} // 100_000;
my $ITER = $ENV{RT_ITER} // 3000;
my $LAG = $ENV{RT_LAG} // 250;
my $SLEEP = $ENV{RT_SLEEP} // '0.003';
my $redis = OutboxRedis->start();
my $node = outbox_node('ring', <<"EOC");
max_prepared_transactions = 400
outbox.poll_interval = '1s'
log_min_messages = debug1
log_statement = none
EOC
sub sql { return $node->safe_psql($_[1] // 'postgres', $_[0]) }
sql('CREATE DATABASE victim');
for my $db ('postgres', 'victim') {
	sql('CREATE EXTENSION outbox', $db);
	sql("SELECT outbox.create_sink('r', 'redis', '{\"port\": " . $redis->port . ", \"mode\": \"list\"}')", $db);
	sql(q{SELECT outbox.add_route('legit', 'r', 'k')}, $db);
}
sql(q{SELECT outbox.add_route('junk', 'r', 'j')});
sql(q{CREATE ROLE app LOGIN; GRANT USAGE ON SCHEMA outbox TO app;
	GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO app;});
sql("SELECT count(outbox.emit('parked', '{}', (i % 100)::text)) FROM generate_series(1, $PARKED) i", 'victim');
sql('VACUUM ANALYZE outbox.events', 'victim');

sub legit {
	my ($n) = @_;
	return sql(qq{SELECT outbox.emit('legit', '{"n": $n}', 'L')}, 'victim');
}
sub ready_reads {
	return sql(q{SELECT coalesce(sum(s.idx_tup_read), 0) FROM pg_stat_user_indexes s
		JOIN pg_inherits i ON i.inhrelid = s.indexrelid
		WHERE i.inhparent = 'outbox.events_ready_idx'::regclass}, 'victim');
}
my $first = legit(0);
ok(defined wait_until(sub { sql("SELECT status FROM outbox.events WHERE id = '$first'", 'victim') eq 'published' }, 60),
	'victim: first event published');
sleep 2;

# $secs of the victim's application, with or without the flood in "postgres".
sub phase {
	my ($name, $secs, $flood) = @_;
	my $h;
	if ($flood) {
		my $file = "$PostgreSQL::Test::Utils::tmp_check/flood.sql";
		open my $fh, '>', $file or die;
		for my $i (1 .. $ITER) {
			print $fh "BEGIN; SELECT outbox.emit('junk', '{}'); PREPARE TRANSACTION 'h$i';\n";
			print $fh "COMMIT PREPARED 'h" . ($i - $LAG) . "';\n" if $i > $LAG;
			print $fh "SELECT pg_sleep($SLEEP);\n";
		}
		for my $i ($ITER - $LAG + 1 .. $ITER) { print $fh "COMMIT PREPARED 'h$i';\n" if $i > 0 }
		close $fh;
		$h = IPC::Run::start(
			[ 'psql', '-X', '-q', '-o', '/dev/null', '-d', $node->connstr('postgres') . ' user=app', '-f', $file ],
			'>', \my $out, '2>', \my $err);
	}
	my $reads0 = ready_reads();
	my $start = time();
	my $n = 0;
	my @ids;
	while (time() - $start < $secs) {
		push @ids, legit(1000 * $name . $n++);
		usleep(1_000_000 * ($ENV{RT_EVERY} // 2));
		$h->pump_nb if $h && $h->pumpable;
	}
	sleep 1;
	my $reads = ready_reads() - $reads0;
	$h->finish if $h;
	my $in = join(',', map { "'$_'" } @ids);
	ok(defined wait_until(sub { sql("SELECT count(*) FROM outbox.events WHERE id IN ($in) AND status <> 'published'", 'victim') eq '0' }, 180),
		"phase $name: victim's events published in the end");
	my $lat = sql("SELECT string_agg(round(extract(epoch FROM published_at - created_at)::numeric, 2)::text, ' ' ORDER BY id)
		FROM outbox.events WHERE id IN ($in)", 'victim');
	my $max = sql("SELECT max(extract(epoch FROM published_at - created_at)) FROM outbox.events WHERE id IN ($in)", 'victim');
	note(sprintf('phase %s (flood %s): ready-index tuples read %d = %.1f full scans of the parked events; latencies: %s',
		$name, $flood ? 'on' : 'off', $reads, $reads / $PARKED, $lat));
	return ($reads / $PARKED, $max);
}
my ($scans0, $max0) = phase(1, 15, 0);
my ($scans1, $max1) = phase(2, 15, 1);
my $log = slurp_file($node->logfile);
note('victim batches abandoned/claimed again: ' . scalar(() = $log =~ /its batch waits for the next cycle/g)
	. ' / ' . scalar(() = $log =~ /claiming again from its first emit/g));
ok($scans1 <= 2 * $scans0 + 2, "flood in another database: victim's full scans $scans1 vs $scans0 without");
ok($max1 < 5, "flood in another database: victim's events within 5 s (max $max1 s, $max0 s without)");
is(sql('SELECT coalesce(sum(failures), 0) FROM outbox.workers'), '0', 'no publisher raised an error');
$node->stop;
$redis->stop;
done_testing();
