# Helpers shared by the TAP tests: a PostgreSQL::Test::Cluster node with
# outbox preloaded, polling with a deadline, and reading what arrived.
package OutboxNode;

use strict;
use warnings;
use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT_OK = qw(outbox_node wait_until wait_while_progressing kafka_sink_sql pending_count
  set_faults fault_injection_available app_session_args psql_tolerant start_timed timed
  partition_counts pages_per_drained_event);

# A started node with outbox preloaded and quick publisher settings.
# Extra postgresql.conf lines may be passed as a string. Options besides
# PostgreSQL::Test::Cluster's init() options:
#   fault_injection => 1   load the test build of outbox, which has the
#                          fault injection points and outbox.fault_injection
#                          (from $OUTBOX_FI_LIBDIR, which test/run_all.sh
#                          sets; without it the test is skipped)
# The environment can change every node's settings:
#   OUTBOX_TEST_LIBDIR     load outbox.so from this directory (not for
#                          fault_injection nodes)
#   OUTBOX_TEST_ISOLATION  the server's default_transaction_isolation
#                          ('repeatable read', 'serializable'): run_all.sh
#                          runs the publisher suites at each level
sub outbox_node {
	my ($name, $extra_conf, %opts) = @_;
	my $fault_injection = delete $opts{fault_injection};
	if ($fault_injection && !fault_injection_available()) {
		plan skip_all => 'needs the fault injection build of outbox: set OUTBOX_FI_LIBDIR '
		  . '(test/run_all.sh builds it)';
	}
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%opts);
	$node->append_conf('postgresql.conf', <<"EOF");
shared_preload_libraries = 'outbox'
outbox.poll_interval = '200ms'
outbox.backoff_min = '50ms'
outbox.backoff_max = '1s'
log_min_messages = 'info'
EOF
	# The module the server loads: the fault injection build, or another
	# build under test (OUTBOX_TEST_LIBDIR: a directory holding outbox.so,
	# e.g. an older release's, to show a test fails there), else the
	# installed one.
	my $moddir = $fault_injection ? $ENV{OUTBOX_FI_LIBDIR} : $ENV{OUTBOX_TEST_LIBDIR};
	if ($moddir) {
		$node->append_conf('postgresql.conf', "dynamic_library_path = '$moddir:\$libdir'\n");
	}
	if (my $iso = $ENV{OUTBOX_TEST_ISOLATION}) {
		$node->append_conf('postgresql.conf', "default_transaction_isolation = '$iso'\n");
	}
	$node->append_conf('postgresql.conf', $extra_conf) if defined $extra_conf;
	$node->start;
	return $node;
}

# psql arguments for a session that plays the application in a load test:
# with OUTBOX_TEST_ISOLATION set it still runs at READ COMMITTED, as an
# application that does not retry serialization failures must. What the
# isolation runs test is the publisher, maintenance and the launcher (which
# pin their own level) under that server default, and every other statement
# of the test; emit() at other levels has tests of its own.
sub app_session_args {
	return () unless $ENV{OUTBOX_TEST_ISOLATION};
	return ('-c', "SET default_transaction_isolation = 'read committed'");
}

# Whether the fault injection build of outbox is at hand.
sub fault_injection_available {
	my $dir = $ENV{OUTBOX_FI_LIBDIR};
	return defined $dir && -r "$dir/outbox.so";
}

# Set outbox.fault_injection server-wide (ALTER SYSTEM) and make every
# process take it; '' clears it. Returns once the postmaster has read the new
# setting (a new session shows it), that is once it has passed the reload on
# to every process: pg_reload_conf() only sends the signal, and on a loaded
# machine the postmaster may act on it after the test's next statement.
sub set_faults {
	my ($node, $rules) = @_;
	(my $quoted = $rules) =~ s/'/''/g;
	$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.fault_injection = '$quoted'");
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	defined wait_until(sub {
		$node->safe_psql('postgres', 'SHOW outbox.fault_injection') eq $rules })
	  or die "outbox.fault_injection did not become '$rules'";
	return;
}

# Poll $check (a code ref) until it returns true or $timeout seconds pass
# (default: PostgreSQL::Test::Utils' timeout_default, 180 s unless
# PG_TEST_TIMEOUT_DEFAULT says otherwise: a deadline for something that must
# happen, generous for a loaded machine). Returns the elapsed seconds, or
# undef on timeout.
sub wait_until {
	my ($check, $timeout) = @_;
	$timeout //= $PostgreSQL::Test::Utils::timeout_default;
	my $start = time();
	while (time() - $start < $timeout) {
		return time() - $start if $check->();
		usleep(50_000);
	}
	return undef;
}

# For long work that a loaded machine stretches but that must keep moving (a
# backlog drained, thousands of events claimed): polls $measure (a code ref
# returning a number or a string) until $done->($value) holds, and gives up
# only when the value has not changed for $stall seconds (default:
# timeout_default). Returns the elapsed seconds, or undef.
sub wait_while_progressing {
	my ($measure, $done, $stall) = @_;
	$stall //= $PostgreSQL::Test::Utils::timeout_default;
	my $start = time();
	my ($last, $since) = (undef, $start);
	while (1) {
		my $value = $measure->();
		return time() - $start if $done->($value);
		if (!defined $last || $value ne $last) {
			($last, $since) = ($value, time());
		}
		return undef if time() - $since >= $stall;
		usleep(200_000);
	}
}

# $node->psql, but a server that refuses the connection (crash, restart) is a
# failed query, not the end of the test: when psql exits before reading the
# query that IPC::Run writes to its stdin, IPC::Run dies with "Broken pipe"
# (seen in TAP 071 on 17 and TAP 040 on 15, polling while the server
# restarted after a publisher's SIGKILL). Returns ($ret, $out, $err) as psql
# does, $ret non-zero on such a failure.
sub psql_tolerant {
	my ($node, $db, $sql) = @_;
	my ($ret, $out, $err);
	my $ok = eval { ($ret, $out, $err) = $node->psql($db, $sql); 1 };
	return $ok ? ($ret, $out, $err) : (3, '', "psql did not run: $@");
}

# Runs $sql in a psql session of its own, in the background, and times it
# by the server's clock, read in that session just before and just after
# the statement: psql's start-up, long on a loaded machine, is no part of
# the time. psql goes on after the statement's error, to read the clock
# again. Options: role (the connecting role; the node's default user
# otherwise), db ('postgres'), settings (statements run first, such as
# "SET lock_timeout = '4s'"). Returns a code ref that waits for psql and
# returns (seconds, stdout without the clock's lines, stderr); seconds are
# 99 when the session did not read the clock twice.
sub start_timed {
	my ($node, $sql, %opts) = @_;
	my $clock = q{SELECT 'outbox-clock:' || extract(epoch FROM clock_timestamp())};
	my @cmd = ('psql', '-X', '-A', '-t', '-d', $node->connstr($opts{db} // 'postgres'));
	push @cmd, '-U', $opts{role} if defined $opts{role};
	push @cmd, map { ('-c', $_) } @{ $opts{settings} // [] };
	push @cmd, '-c', $clock, '-c', $sql, '-c', $clock;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	return sub {
		$h->finish;
		my @t = $out =~ /^outbox-clock:([\d.]+)$/mg;
		(my $rest = $out) =~ s/^outbox-clock:[\d.]+\n?//mg;
		return (@t == 2 ? $t[1] - $t[0] : 99, $rest, $err);
	};
}

# start_timed, waited for: (seconds, stdout, stderr).
sub timed {
	return start_timed(@_)->();
}

# SQL creating a Kafka sink on the test broker with fast test timeouts.
sub kafka_sink_sql {
	my ($name, $bootstrap, %extra) = @_;
	my %options = (
		'bootstrap.servers' => $bootstrap,
		'message.timeout.ms' => '3000',
		'topic.metadata.refresh.interval.ms' => '1000',
		'reconnect.backoff.max.ms' => '1000',  # quick reconnects after an outage
		%extra);
	my $json = join(', ', map { qq{"$_": "$options{$_}"} } sort keys %options);
	return "SELECT outbox.create_sink('$name', 'kafka', '{$json}')";
}

sub pending_count {
	my ($node, $db, $where) = @_;
	$where = $where ? "AND $where" : '';
	return $node->safe_psql($db // 'postgres',
		"SELECT count(*) FROM outbox.events WHERE status = 'pending' $where");
}

# What outbox's partitions have cost so far in database postgres: pages
# read (shared buffer hits and reads, heap and index), rows inserted and rows
# updated, as the statistics system has them. Reads no partition itself.
sub partition_counts {
	my ($node) = @_;
	my ($pages, $inserted, $updated) = split /\|/, $node->safe_psql('postgres', q{
		SELECT coalesce(sum(coalesce(io.heap_blks_hit, 0) + coalesce(io.heap_blks_read, 0)
			+ coalesce(io.idx_blks_hit, 0) + coalesce(io.idx_blks_read, 0)), 0),
			coalesce(sum(st.n_tup_ins), 0), coalesce(sum(st.n_tup_upd), 0)
		FROM pg_catalog.pg_inherits AS i
		JOIN pg_catalog.pg_statio_all_tables AS io ON io.relid = i.inhrelid
		JOIN pg_catalog.pg_stat_all_tables AS st ON st.relid = i.inhrelid
		WHERE i.inhparent = 'outbox.events'::pg_catalog.regclass});
	return { pages => $pages, inserted => $inserted, updated => $updated };
}

# Runs $emit (which emits $count events), waits until the statistics system
# has their $count inserts and the publisher's $count updates (each
# publication updates its row once; the publisher hands its statistics over
# within a second of its last cycle), and returns the pages outbox's
# partitions were read for meanwhile, per event. Dies when they were not
# drained.
sub pages_per_drained_event {
	my ($node, $count, $emit) = @_;
	my $before = partition_counts($node);
	$emit->();
	my $after;
	my $took = wait_while_progressing(
		sub { $after = partition_counts($node); "$after->{inserted}/$after->{updated}" },
		sub {
			$after->{inserted} - $before->{inserted} >= $count
			  && $after->{updated} - $before->{updated} >= $count
		});
	die "$count events were not drained" unless defined $took;
	return ($after->{pages} - $before->{pages}) / $count;
}

1;
