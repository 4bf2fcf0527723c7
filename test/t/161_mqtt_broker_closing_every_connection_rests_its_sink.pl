# A broker that closes every connection at the first message it is sent
# (mosquitto with a max_packet_size below every message, over MQTT 3.1.1,
# which cannot learn the limit), while an application emits 20 events a
# second: nothing is delivered, each event is lost with its connection
# twice, becomes a suspect and is sent alone, and every turn alone fails.
# Each new event is a fresh suspect, so the sink is never judged down by
# its suspects; its turns went one after another as fast as the broker
# closed connections, a connection, a cycle and a commit each (about 250
# connections and 280 commits a second, a quarter of a core). After a row
# of failed turns with nothing delivered, while new events keep coming and
# are lost with others too, the sink now rests between tries (at most a
# quarter of a second) until it delivers. Proves, over 10 s of
# the stream: the broker sees at most 15 connections a second and the
# publisher commits at most once per new event and twice per try; no
# event is charged more than an attempt per outbox.backoff_max (5 s here:
# none ends dead); once the broker takes the messages (restarted without
# the limit) every event is published.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use POSIX ();
use IPC::Run ();
use OutboxMosquitto;
use OutboxNode qw(outbox_node wait_until);

my $RATE = 20;       # events a second
my $WINDOW = 10;     # seconds measured

my $mq = OutboxMosquitto->start(max_packet_size => 100);
my $BACKOFF_MAX = 5;  # seconds
my $node = outbox_node('closing_broker', "outbox.backoff_max = '${BACKOFF_MAX}s'\n");
my $began = time();
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', $mq->sink_sql('closer', protocol => '3.1.1', connections => 1));
$node->safe_psql('postgres', q{SELECT outbox.add_route('c.*', 'closer')});

sub sql { return $node->safe_psql('postgres', $_[0]) }

# What the broker said so far: one "New connection from" line per connection.
sub connections {
	my $log = "$mq->{dir}/mosquitto.log";
	return 0 unless -e $log;
	my $n = () = slurp_file($log) =~ /New connection from/g;
	return $n;
}

# The publisher's CPU time so far, in seconds (utime + stime of its process).
my $pid = sql(q{SELECT pid FROM outbox.workers WHERE pid IS NOT NULL LIMIT 1});
sub cpu_seconds {
	my @f = split ' ', (slurp_file("/proc/$pid/stat") =~ /\)\s+(.*)$/s)[0];
	return ($f[11] + $f[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK());
}

sub commits {
	return sql(q{SELECT pg_catalog.pg_stat_get_db_xact_commit(oid) FROM pg_catalog.pg_database
		WHERE datname = 'postgres'});
}

sub events { return sql(q{SELECT count(*) FROM outbox.events}) }

# The stream: one transaction and one event each, $RATE a second, every
# event of its own key and large enough that the broker closes over it; for
# the first 12 s (past the sends with others and the first row of turns
# alone), the measured window and a little more.
my $total = $RATE * (12 + $WINDOW + 3);
my $stream = IPC::Run::start([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', qq{
	DO \$\$ BEGIN FOR i IN 1 .. $total LOOP
		PERFORM outbox.emit('c.t', jsonb_build_object('n', i, 'pad', repeat('x', 200)), 'k' || i);
		COMMIT;
		PERFORM pg_catalog.pg_sleep(1.0 / $RATE);
	END LOOP; END \$\$} ], '>', \my $out, '2>', \my $err);
sleep 12;
cmp_ok(connections(), '>', 20, 'the broker takes connections and closes them');
is(sql(q{SELECT count(*) FROM outbox.events WHERE status = 'published'}), '0', 'nothing is delivered');

my ($c0, $cpu0, $x0, $e0, $t0) = (connections(), cpu_seconds(), commits(), events(), time());
sleep $WINDOW;
my ($c1, $cpu1, $e1, $t1) = (connections(), cpu_seconds(), events(), time());
# The statistics system has a backend's commits within a second of them.
sleep 1;
my $x1 = commits();
my $secs = $t1 - $t0;
my $conn_rate = ($c1 - $c0) / $secs;
# The stream's commits and this test's own queries (about one a second) taken out.
my $commit_rate = ($x1 - $x0 - ($e1 - $e0) - 8) / $secs;
my $cpu = 100 * ($cpu1 - $cpu0) / $secs;
note(sprintf('over %.1f s: %.1f connections/s, %.1f publisher commits/s, %.1f %% of a core, '
	  . '%d events emitted', $secs, $conn_rate, $commit_rate, $cpu, $e1 - $e0));
# The sink rests from the row's end: a try per rest (the new events of the
# meantime with others, a turn alone), nothing sent in between.
cmp_ok($conn_rate, '<=', 15,
	"the broker sees at most 15 connections a second (${\ sprintf('%.1f', $conn_rate)}/s)");
# Each new event's commit wakes the publisher, which finds nothing it may
# send (the sink's topic is left alone while it rests): a commit each, and
# one or two per try (at most four a second).
cmp_ok($commit_rate, '<=', $RATE + 8,
	"the publisher commits at most once per new event and twice per try "
	  . "(${\ sprintf('%.1f', $commit_rate)}/s)");
like($node->safe_psql('postgres', q{SELECT string_agg(sinks, '; ') FROM outbox.workers}),
	qr/\bcloser=down\b/, 'outbox.workers shows the sink down');
$stream->finish;
is($?, 0, 'the stream of events ran to its end') or diag($err);
my $emitted = events();
my $charges_allowed = 1 + int((time() - $began) / $BACKOFF_MAX);
cmp_ok(sql(q{SELECT coalesce(max(attempts), 0) FROM outbox.events}), '<=', $charges_allowed,
	"no event is charged more than an attempt per outbox.backoff_max (at most $charges_allowed)");
is(sql(q{SELECT count(*) FROM outbox.events WHERE status = 'dead'}), '0',
	'no event ends dead while the broker closes every connection');

# The broker takes the messages again: every event is published.
$mq->{max_packet_size} = undef;
$mq->start_again;
ok(defined wait_until(sub { sql(q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}) eq '0' }),
	"every event is published once the broker takes them ($emitted emitted)")
  or diag(sql(q{SELECT status, count(*), max(attempts), min(last_error) FROM outbox.events GROUP BY 1}));

$node->stop;
$mq->stop;
done_testing();
