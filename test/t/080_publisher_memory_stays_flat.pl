# The publisher's memory stays flat: over 1,000,000 published events its
# private memory (RssAnon: heap, librdkafka's buffers; shared buffers are not
# counted) does not grow, and a broker outage with a large backlog costs disk
# in the database, not memory in the publisher: events wait in outbox.events,
# not in librdkafka's queue, which never holds more than the batches in flight
# (outbox.batches_in_flight x outbox.batch_size messages).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until wait_while_progressing kafka_sink_sql pending_count);

my $ROUND = 100_000;    # events per round
my $ROUNDS = 10;        # 1,000,000 events in all
my $OUTAGE_EVENTS = 300_000;
my $MB = 1024;          # RssAnon is in kB

my $kafka = OutboxKafka->start(topics => ['mem:6']);
my $node = outbox_node('memory', "outbox.workers = 1\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('postgres', q{SELECT outbox.add_route('mem', 'kafka')});

my $pid;
ok(defined wait_until(sub {
	$pid = $node->safe_psql('postgres', q{SELECT pid FROM outbox.workers WHERE database = 'postgres'});
	$pid =~ /^\d+$/ }), 'a publisher runs');

# The publisher's private resident memory, in kB.
# The idle publisher gives freed heap back to the system (idle_wait.cpp,
# ReturnFreedMemory, looked at once a second): a sample taken 1.5 s after the
# work is done sees its steady size, not what glibc kept of a busy spell.
sub rss_anon {
	sleep 1.5;
	open(my $fh, '<', "/proc/$pid/status") or return undef;
	while (<$fh>) { return $1 if /^RssAnon:\s+(\d+)\s+kB/; }
	return undef;
}

# About 200 bytes of payload per event, 1000 keys. With $age_s, the emitting
# transaction waits that long before it commits.
sub emit_round {
	my ($n, $age_s) = @_;
	my $wait = $age_s ? "SELECT pg_sleep($age_s);" : '';
	$node->safe_psql('postgres', qq{
		BEGIN;
		SELECT count(outbox.emit('mem', jsonb_build_object('n', i, 'pad', repeat('x', 160)), 'k' || (i % 1000)))
		  FROM generate_series(1, $n) i;
		$wait
		COMMIT;});
}

# Nothing pending any more: waited for as long as the backlog keeps shrinking
# (a round takes seconds on an idle machine, far longer on a loaded one).
sub drained {
	return defined wait_while_progressing(sub { pending_count($node) }, sub { $_[0] eq '0' });
}

# A warm-up round first (producer buffers, plans, caches, malloc arenas),
# which must reach the publisher's working size: its largest cycle, with
# outbox.batches_in_flight full batches at the brokers at once. Batches after
# the first of a cycle take only events older than about a second (the
# claims' safe bound), so whether a round of fresh events ever fills a whole
# window depends on timing: CI runs reached that size in round 1, round 2 or
# round 8 (12.6 MB before, about 30 MB after, flat from then on). The
# warm-up's events are 1.5 s old when they commit, so its cycles fill their
# windows. The baseline is taken after it.
emit_round($ROUND, 1.5);
ok(drained(), "warm-up: $ROUND events published");
my $base = rss_anon();
my @series;
my $t = time();
for my $round (1 .. $ROUNDS) {
	emit_round($ROUND);
	ok(drained(), "round $round: $ROUND events published") or last;
	push @series, rss_anon();
}
note(sprintf('%d events emitted and published in %.1f s', $ROUND * $ROUNDS, time() - $t));
note(sprintf('publisher RssAnon after the warm-up %.1f MB, after each round (MB): ', $base / $MB)
	  . join(' ', map { sprintf('%.1f', ($_ // 0) / $MB) } @series));
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}),
	$ROUND * ($ROUNDS + 1), 'every event was published');
is($node->safe_psql('postgres', q{SELECT pid FROM outbox.workers}), $pid,
	'the same publisher process did it all');

my ($max) = sort { $b <=> $a } @series;
cmp_ok($max - $base, '<', 16 * $MB,
	'over 1,000,000 events after warm-up the publisher grows by less than 16 MB');
# Per-event leak: the second half's peak against the first half's. Peaks, not
# the last and middle samples: RssAnon also falls and rises again as malloc
# returns freed memory to the system (seen: 25.5 16.5 22.1 16.5 17.7 20.6
# 26.1 MB), which says nothing about a leak; a leak raises the peak.
my $half = int(@series / 2);
my ($first_peak) = sort { $b <=> $a } @series[ 0 .. $half - 1 ];
my ($second_peak) = sort { $b <=> $a } @series[ $half .. $#series ];
cmp_ok($second_peak - $first_peak, '<', 4 * $MB,
	'and the second half of the run adds less than 4 MB (no leak per event)');

# Outage: the brokers refuse connections while a large backlog builds up.
my $before_outage = rss_anon();
my $size_before = $node->safe_psql('postgres',
	q{SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	   WHERE i.inhparent = 'outbox.events'::regclass});
my $log_offset = -s $node->logfile;
$kafka->command_ok('down all');
$t = time();
emit_round($OUTAGE_EVENTS);
# The publisher tries, finds the sink down, and parks the backlog.
ok(defined wait_until(sub { slurp_file($node->logfile, $log_offset) =~ /sink "kafka" is unavailable/ }),
	'the publisher finds the sink down');
sleep 3;
# Ten samples half a second apart: a cycle that claims a batch while it
# retries the sink holds that batch for a moment (a spike to 14 MB was seen
# in one sample; a CI run on a loaded machine caught cycles in all of five
# samples a second apart, the lowest at 15.9 MB); a backlog held in memory
# would show in every sample.
my @during = map { my $r = rss_anon(); sleep 0.5; $r } 1 .. 10;
my $size_during = $node->safe_psql('postgres',
	q{SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	   WHERE i.inhparent = 'outbox.events'::regclass});
# The pending rows' own bytes: the tables' growth alone can be small, since
# the new rows fill space that vacuum freed from the published ones (a CI run
# saw 1.1 MB of growth for the whole backlog).
my $backlog_bytes = $node->safe_psql('postgres',
	q{SELECT coalesce(sum(pg_column_size(e.*)), 0) FROM outbox.events e WHERE e.status = 'pending'});
my $pending = pending_count($node);
note(sprintf('outage: %d pending (%.1f MB of rows), publisher RssAnon %.1f MB before, %s MB during; '
	  . 'the events tables grew by %.1f MB',
	$pending, $backlog_bytes / 1024 / 1024, $before_outage / $MB, join(' ', map { sprintf('%.1f', $_ / $MB) } @during),
	($size_during - $size_before) / 1024 / 1024));
cmp_ok($pending, '>', $OUTAGE_EVENTS * 0.9, 'during the outage the backlog waits in the database');
# Between cycles the publisher holds no batch: the lowest sample is what the
# backlog costs it. The median may catch cycles holding their batches (under
# load a cycle lasts longer, so more samples do: a busy run saw 9.6 31.0 11.1
# 16.8 16.9 MB against 6.8 before), still far below the backlog's own size.
my @sorted = sort { $a <=> $b } @during;
cmp_ok($sorted[0] - $before_outage, '<', 8 * $MB,
	"a $OUTAGE_EVENTS-event backlog during an outage costs the publisher less than 8 MB between cycles");
cmp_ok($sorted[ $#sorted / 2 ] - $before_outage, '<', 32 * $MB,
	'and less than 32 MB in the median sample, against the backlog\'s '
	  . sprintf('%.0f MB', $backlog_bytes / $MB));
cmp_ok($backlog_bytes, '>', $OUTAGE_EVENTS * 100, 'the backlog is held in the database instead');

$kafka->command_ok('up all');
ok(drained(), 'after the outage the backlog is published');
note(sprintf('outage backlog published %.1f s after the outage began', time() - $t));
my $after = rss_anon();
cmp_ok($after - $before_outage, '<', 16 * $MB, 'and the publisher is back near its size before');

# The publisher reports its table statistics while it runs (not only when it
# exits): autovacuum sees the dead rows its UPDATEs leave.
my $updates;
ok(defined wait_until(sub {
	$updates = $node->safe_psql('postgres', q{
		SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables s
		  JOIN pg_inherits i ON i.inhrelid = s.relid
		 WHERE i.inhparent = 'outbox.events'::regclass});
	$updates >= $ROUND * ($ROUNDS + 1) + $OUTAGE_EVENTS }),
	"the running publisher's updates show in pg_stat_user_tables (autovacuum sees them)")
  or diag("n_tup_upd: $updates");
is($node->safe_psql('postgres', q{SELECT pid FROM outbox.workers}), $pid, 'from the same publisher process');

$node->stop;
$kafka->stop;
done_testing();
