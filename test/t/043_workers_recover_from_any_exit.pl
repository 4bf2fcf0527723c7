# The launcher and the publishers recover from any exit, and a restarted
# launcher never duplicates a publisher.
#
# What the old build did: a launcher that exited with an error (a
# pg_cancel_backend was enough) was restarted 10 s later by the postmaster,
# knew nothing of the publishers its predecessor had started, and started a
# second publisher 0 and 1 beside the first ones: two publishers owning the
# same key slots, order inversions. pg_terminate_backend on the launcher made
# it exit with code 0, which unregistered it for good, and publishers that
# exited afterwards were never restarted.
#
# With outbox.workers = 2, a Redis stream sink and a light steady emit load
# with keys (OutboxFaults' load: per key a sequence number kept in the
# emitting transaction, some transactions rolled back), one after another:
#   (a) pg_cancel_backend on the launcher: it logs the cancel and carries on
#       with the same PID; over the next 13 s (longer than the old build's
#       10 s restart delay) there are never more than 2 publishers and no two
#       with the same index (sampled back to back from pg_stat_activity and
#       outbox.workers);
#   (b) pg_terminate_backend on the launcher: a new launcher runs within 5 s,
#       the 2 publishers are the very same processes, never more than 2;
#   (c) pg_terminate_backend on a publisher: a new one runs within 5 s (the
#       old build never restarted it after (b)), never more than 2;
#   (d) SIGKILL of the launcher: the postmaster reinitialises the server
#       (standard PostgreSQL behaviour for a process that dies without
#       cleaning up), and publishing resumes within seconds;
#   (e) once the faults stop, every committed event has arrived, per key in
#       emit order, nothing of a rolled-back transaction, nothing stray.
# The same recovery under injected errors, cancels and terminates inside the
# launcher is t/047_launcher_faults_recover.pl (fault injection build).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until);
use OutboxFaults qw(new_load);
use OutboxLifecycle qw(session sample watch redis_stream_fetch fmt_sample);

my $WORKERS = 2;
my $TOPIC = 'rec.load';
my $T0 = time();

my $redis = OutboxRedis->start();
my $node = outbox_node('recover', <<"EOF");
outbox.workers = $WORKERS
outbox.batch_size = 200
max_worker_processes = 16
restart_after_crash = on
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres',
	"SELECT outbox.create_sink('redis', 'redis', '{\"port\": " . $redis->port . ", \"mode\": \"stream\"}')");
$node->safe_psql('postgres', q{SELECT outbox.add_route('rec.*', 'redis')});

my $s = session($node, 'postgres');
my $load = new_load(node => $node, sessions => 2, keys => 20, per_tx => 2, sleep_ms => 50, topic => $TOPIC);

my $w = OutboxFaults::wait_publishers($node, $WORKERS, []);
ok(defined $w, "$WORKERS publishers run and share the key slots");
$load->start;
usleep(1_000_000);

# The launcher's pid and the publishers' pids (sorted) now.
sub current {
	my $x = sample($s);
	return $x ? ($x->{launchers}[0], join(',', @{ $x->{publishers} })) : ();
}

# Signals $pid with pg_terminate_backend; returns its result and the server's
# clock when it was sent.
sub terminate {
	my ($pid) = @_;
	return split /\|/, $node->safe_psql('postgres',
		"SELECT pg_terminate_backend($pid), extract(epoch FROM clock_timestamp())");
}

# Seconds from $since (the server's clock) to the start of the process
# $pid (pg_stat_activity.backend_start): how long the test took to see it is
# no part of it.
sub started_after {
	my ($pid, $since) = @_;
	my $t = $node->safe_psql('postgres',
		"SELECT extract(epoch FROM backend_start) - $since FROM pg_stat_activity WHERE pid = $pid");
	return $t eq '' ? undef : $t;
}

# Checks every fault shares: never more than $WORKERS publishers, no index twice.
sub no_duplicates {
	my ($what, $r) = @_;
	is($r->{max_publishers}, $WORKERS,
		"$what: never more than $WORKERS publishers at once ($r->{answered} samples in "
		  . sprintf('%.1f s', $r->{took}) . ')')
	  or diag('e.g. ' . fmt_sample($r->{worst}));
	ok(!defined $r->{dup_index}, "$what: no two publishers hold the same index")
	  or diag("e.g. $r->{dup_index}");
	return;
}

# --- (a) pg_cancel_backend on the launcher -----------------------------------

my ($launcher, $pubs) = current();
ok(defined $launcher && $pubs =~ /^\d+,\d+$/, 'a launcher and two publishers run')
  or BAIL_OUT('nothing to test: ' . fmt_sample(sample($s)));
note("launcher $launcher, publishers $pubs");
my $offset = -s $node->logfile;
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($launcher)"), 't',
	'(a) pg_cancel_backend reaches the launcher');
# Samples where the launcher, or the publishers, were not the same processes.
my ($other_launcher, $other_publishers);
my $r = watch(session => $s, secs => 13, each => sub {
	my ($x) = @_;
	$other_launcher //= fmt_sample($x) unless join(',', @{ $x->{launchers} }) eq $launcher;
	$other_publishers //= fmt_sample($x) unless join(',', @{ $x->{publishers} }) eq $pubs;
});
ok($node->log_contains(qr/\[$launcher\] .*ERROR:\s+canceling statement due to user request/, $offset),
	'(a) the launcher logs the cancel as an ERROR');
ok(!defined $other_launcher, '(a) after the cancel the launcher carries on with the same PID throughout')
  or diag("e.g. $other_launcher");
unlike(slurp_file($node->logfile, $offset), qr/outbox: launcher started/,
	'(a) the launcher was not restarted');
no_duplicates('(a) after a cancel of the launcher', $r);
ok(!defined $other_publishers, '(a) the publishers were not disturbed (the same 2 processes throughout)')
  or diag("e.g. $other_publishers");

# --- (b) pg_terminate_backend on the launcher --------------------------------

($launcher, $pubs) = current();
$offset = -s $node->logfile;
my ($terminated, $sent_at) = terminate($launcher);
is($terminated, 't', '(b) pg_terminate_backend reaches the launcher');
my $killed = $launcher // 0;
undef $other_publishers;
# Watched until the new launcher runs, and at least 4 s; the time it took is
# measured by the server's clock, from the signal to the new launcher's start.
$r = watch(session => $s, secs => 120, min_secs => 4,
	until => sub { my ($x) = @_; @{ $x->{launchers} } == 1 && $x->{launchers}[0] != $killed },
	each => sub {
		my ($x) = @_;
		$other_publishers //= fmt_sample($x) unless join(',', @{ $x->{publishers} }) eq $pubs;
	});
my $new_launcher = defined $r->{until_at} ? started_after($r->{last}{launchers}[0], $sent_at) : undef;
ok(defined $new_launcher && $new_launcher < 5,
	sprintf('(b) a new launcher runs %.1f s after pg_terminate_backend (< 5 s)', $new_launcher // -1))
  or diag('last seen: ' . fmt_sample($r->{last}));
ok($node->log_contains(qr/outbox: launcher started/, $offset), '(b) the postmaster restarted the launcher');
no_duplicates('(b) around a terminate of the launcher', $r);
ok(!defined $other_publishers,
	'(b) the same 2 publishers run throughout, before and after the new launcher (none restarted, none added)')
  or diag("e.g. $other_publishers");

# --- (c) pg_terminate_backend on a publisher ---------------------------------

($launcher, $pubs) = current();
my ($victim) = split /,/, $pubs;
my %before = map { $_ => 1 } split /,/, $pubs;
($terminated, $sent_at) = terminate($victim);
is($terminated, 't', '(c) pg_terminate_backend reaches a publisher');
$r = watch(session => $s, secs => 120, min_secs => 3,
	until => sub {
		my ($x) = @_;
		my @p = @{ $x->{publishers} };
		return @p == $WORKERS && !(grep { $_ == $victim } @p) && (grep { !$before{$_} } @p);
	});
my ($replacement) = grep { !$before{$_} } @{ $r->{last}{publishers} || [] };
my $new_publisher = defined $r->{until_at} && defined $replacement ? started_after($replacement, $sent_at) : undef;
ok(defined $new_publisher && $new_publisher < 5,
	sprintf('(c) a new publisher runs %.1f s after the terminate (< 5 s)', $new_publisher // -1))
  or diag('last seen: ' . fmt_sample($r->{last}));
no_duplicates('(c) around a terminate of a publisher', $r);
is(join(',', @{ $r->{last}{launchers} }), $launcher // '', '(c) the launcher is the same');
ok(defined OutboxFaults::wait_publishers($node, $WORKERS, [$victim]),
	"(c) $WORKERS publishers share the key slots again");

# --- (d) SIGKILL of the launcher ---------------------------------------------

($launcher, $pubs) = current();
my @old_pids = grep { defined } ($launcher, split /,/, $pubs // '');
$offset = -s $node->logfile;
# (kill with pid 0 or an empty pid would hit this test's own process group)
ok(defined $launcher && $launcher =~ /^[1-9]\d*$/ && kill('KILL', $launcher), '(d) SIGKILL the launcher')
  or diag('no launcher to kill: ' . fmt_sample(sample($s)));
my $kill_at = time();
ok(defined wait_until(sub { $node->log_contains(qr/all server processes terminated; reinitializing/, $offset) }),
	'(d) the server reinitialises after the launcher was killed');
ok(defined OutboxFaults::wait_server($node), '(d) the server answers again');
my $back = OutboxFaults::wait_publishers($node, $WORKERS, \@old_pids);
ok(defined $back, "(d) a new launcher starts $WORKERS new publishers");
$load->restart;
# Publishing resumes: an event emitted now is delivered.
$node->safe_psql('postgres', qq{SELECT outbox.emit('$TOPIC', '{"marker": "after sigkill"}')});
my $resumed = wait_until(sub {
	$node->safe_psql('postgres',
		qq{SELECT count(*) FROM outbox.events WHERE payload ? 'marker' AND status = 'published'}) eq '1' });
# From the SIGKILL to the marker's publication (published_at: the same clock).
my $took = defined $resumed ? $node->safe_psql('postgres',
	qq{SELECT extract(epoch FROM published_at) - $kill_at FROM outbox.events WHERE payload ? 'marker'}) : -1;
ok(defined $resumed && $took < 30,
	sprintf('(d) publishing resumes %.1f s after SIGKILL of the launcher (crash restart included)', $took));
$r = watch(session => $s, secs => 3);
no_duplicates('(d) after the crash restart', $r);
is(scalar @{ $r->{last}{launchers} }, 1, '(d) one launcher runs after the crash restart');

# --- (e) nothing lost, per key in emit order ---------------------------------

usleep(1_000_000);
my @failed = $load->stop;
note('emitting sessions that failed at the stop: ' . (join(' ', @failed) || 'none'));
ok(defined OutboxFaults::wait_topic_drained($node, $TOPIC), '(e) every event is published in the end');
my $rec = OutboxFaults::reconcile(node => $node, topic => $TOPIC,
	fetch => sub { redis_stream_fetch($redis, $TOPIC) });
cmp_ok($rec->{committed}, '>', 100, "(e) the load committed events throughout ($rec->{committed})");
is($rec->{lost}, 0, '(e) every committed event arrived');
is($rec->{order_violations} + $rec->{split_keys}, 0, '(e) per key, events arrived in emit order');
is($rec->{rolled_back_delivered}, 0, '(e) no event of a rolled-back transaction arrived');
is($rec->{stray}, 0, '(e) nothing arrived that was not committed');
note("(e) $rec->{duplicates} duplicate deliveries (at least once: the crash restart may resend)");
my ($keyed, $keyless) = OutboxFaults::table_complete($node);
is("$keyed/$keyless", '0/0', '(e) outbox.events holds every event the load committed');
unlike(slurp_file($node->logfile), qr/was terminated by signal (?!9:)\d+/,
	'no server process crashed on its own (only the SIGKILL we sent)');

note(sprintf('total %.1f s', time() - $T0));
$s->close;
$node->stop;
$redis->stop;
done_testing();
