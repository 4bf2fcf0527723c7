# More databases than worker processes: every database
# with the extension publishes while worker processes are free, and when
# none is, a WARNING names the database that waits.
#
# What the old build did: the launcher gave a shared slot (there are
# max_worker_processes of them) to every connectable database, with or
# without the extension, in pg_database order, and never gave it back; once
# they were taken, a database with the extension created later never got a
# publisher, and nothing said so. Now a database found without the extension
# gives its slot back, at most 2 databases are probed at once, and a
# database that cannot get a worker process is named in a WARNING (at most
# once a minute per database) while its events wait as pending.
#
# Setup: max_worker_processes = 6 (the outbox launcher + 5 publishers; the
# logical replication launcher is turned off and parallel query too, so that
# nothing else takes a worker slot), outbox.workers = 1, a Redis stream sink.
#   1. 8 databases without the extension, then 3 with it (created after the
#      others, so they come last in pg_database): each of the 3 gets its
#      publisher and delivers an event; again after a server restart, when
#      the launcher meets all 12 databases at once (the old build's scan gave
#      the 6 slots to postgres and the first 5 databases without the
#      extension).
#   2. 3 more databases with the extension: 6 databases need 6 publishers,
#      5 processes are free. The one left over is named in a WARNING (once,
#      not at every retry), its event waits as pending; after DROP EXTENSION
#      in another database frees a process, it gets its publisher and
#      delivers within seconds.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until pending_count);

my $T0 = time();
my $redis = OutboxRedis->start();
my $node = outbox_node('many_dbs', <<'EOF');
max_worker_processes = 6
max_logical_replication_workers = 0
max_parallel_workers_per_gather = 0
max_parallel_maintenance_workers = 0
outbox.workers = 1
EOF
is($node->safe_psql('postgres', 'SHOW max_worker_processes'), '6', 'the server runs with max_worker_processes = 6');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'logical replication launcher'}),
	'0', 'no other background worker takes a worker slot');

my @NOEXT = map { sprintf('noext%02d', $_) } 1 .. 8;
my @EXT = map { "ext$_" } 1 .. 3;
my @MORE = map { "ext$_" } 4 .. 6;

# The extension, a Redis sink and a route to the database's own stream.
sub install {
	my ($db) = @_;
	$node->safe_psql($db, 'CREATE EXTENSION outbox');
	$node->safe_psql($db,
		"SELECT outbox.create_sink('redis', 'redis', '{\"port\": " . $redis->port . ", \"mode\": \"stream\"}')");
	$node->safe_psql($db, qq{SELECT outbox.add_route('m.*', 'redis', 'stream-$db')});
	return;
}

sub emit {
	my ($db, $n) = @_;
	$node->safe_psql($db, qq{SELECT outbox.emit('m.test', '{"n": $n}', 'k')});
	return;
}

sub stream_len { return $redis->cli('XLEN', "stream-$_[0]") }

# Databases whose stream has at least $n entries and nothing pending, within
# $timeout (default: wait_until's, generous for a loaded machine).
sub delivered {
	my ($dbs, $n, $timeout) = @_;
	my @late;
	wait_until(sub {
		@late = grep { stream_len($_) < $n || pending_count($node, $_) ne '0' } @$dbs;
		return !@late;
	}, $timeout);
	return @late;
}

# Databases with a running publisher (pg_stat_activity: no database needs
# the extension for this).
sub publishing {
	return split /\n/, $node->safe_psql('postgres', q{
		SELECT datname FROM pg_stat_activity WHERE backend_type = 'outbox publisher' ORDER BY 1});
}

# The publishers run for exactly @$dbs, and still do 1.5 s later (no probe of
# another database under way in between: probes come and go within ms).
sub settled {
	my ($dbs, $timeout) = @_;
	my ($since, @p);
	my $ok = wait_until(sub {
		@p = publishing();
		if ("@p" ne "@$dbs") {
			undef $since;
			return 0;
		}
		$since //= time();
		return time() - $since >= 1.5;
	}, $timeout);
	diag("publishers for: @p") unless defined $ok;
	return defined $ok;
}

# --- 1. databases with the extension after many without ------------------------

$node->safe_psql('postgres', "CREATE DATABASE $_") for @NOEXT;
for my $db (@EXT) {
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	install($db);
	emit($db, 1);
}
my @late = delivered(\@EXT, 1);
is("@late", '', 'each of the 3 databases created after 8 without the extension gets a publisher and delivers');

# Probes are over: the publishers left are those of the 3 databases.
ok(settled(\@EXT), 'only the databases with the extension keep a publisher (probes of the others ended)');

$node->restart;
for my $db (@EXT) { emit($db, 2) }
@late = delivered(\@EXT, 2);
is("@late", '', 'after a restart, the launcher meets 12 databases and still starts the publisher of each of the 3');
ok(settled(\@EXT), 'after the restart too, only the 3 databases with the extension keep a publisher');

# --- 2. no worker process left -------------------------------------------------

my $offset = -s $node->logfile;
my $offset_at = time();
for my $db (@MORE) {
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	install($db);
	emit($db, 1);
}
# The 5 worker processes go to 5 of the 6 databases (which 5 is up to the
# launcher): the one left over waits.
my ($waiting, @p);
my $full = wait_until(sub {
	@p = publishing();
	my @left = grep { my $db = $_; !grep { $_ eq $db } @p } @MORE;
	return 0 unless @p == 5 && @left == 1;
	$waiting = $left[0];
	return 1;
});
ok(defined $full, 'all 5 worker processes run publishers, for 5 of the 6 databases with the extension')
  or diag("publishers for: @p");
SKIP: {
	skip 'no database waits for a worker process: nothing more to check', 10 unless defined $waiting;
	note("waiting: $waiting");
	ok(defined wait_until(sub {
		slurp_file($node->logfile, $offset) =~ /WARNING:\s+outbox: cannot start a publisher for database "$waiting": / }),
		"a WARNING names $waiting, the database that cannot get a publisher");
	my @served = grep { $_ ne $waiting } @MORE;
	@late = delivered(\@served, 1);
	is("@late", '', 'the other new databases got the 2 free processes and deliver');
	# The launcher retries every second; the WARNING comes once a minute.
	usleep(4_000_000);
	ok(settled([ sort(@EXT, @served) ]), "$waiting still has no publisher");
	is(pending_count($node, $waiting), '1', "the event of $waiting waits as pending");
	is(stream_len($waiting), '0', "nothing of $waiting arrived");
	my $log = slurp_file($node->logfile, $offset);
	my $times = () = $log =~ /WARNING:\s+outbox: cannot start a publisher for database "$waiting"/g;
	# Once a minute: a loaded machine may have made this part last over one.
	my $minutes = int((time() - $offset_at) / 60);
	cmp_ok($times, '<=', 1 + $minutes,
		"the WARNING for $waiting is not repeated at every retry (rate-limited: $times in $minutes full minutes)");
	like($log, qr/WARNING:\s+outbox: cannot start a publisher for database "$waiting": .*\n(?:.*\n)*?.*HINT:\s+Raise max_worker_processes/,
		'the WARNING says to raise max_worker_processes');

	# A process frees up: the extension goes from ext1.
	my $freed_at = time();
	$node->safe_psql('ext1', 'DROP EXTENSION outbox');
	@late = delivered([$waiting], 1);
	is("@late", '', "once DROP EXTENSION in ext1 frees a process, $waiting gets its publisher and delivers");
	note(sprintf('%s delivered %.1f s after DROP EXTENSION in ext1', $waiting, time() - $freed_at));
	ok(defined wait_until(sub { @p = publishing(); !grep { $_ eq 'ext1' } @p }), 'ext1 has no publisher any more')
	  or diag("publishers for: @p");
	emit($_, 3) for grep { $_ ne 'ext1' } @EXT, @MORE;
	@late = delivered([ grep { $_ ne 'ext1' } @EXT ], 3);
	push @late, delivered(\@MORE, 2);
	is("@late", '', 'every other database with the extension still delivers');
}

note(sprintf('total %.1f s', time() - $T0));
$node->stop;
$redis->stop;
done_testing();
