# What a transaction changes about publishing is never lost or applied late:
# CREATE EXTENSION's announcement, and sink and route changes, also when they
# commit with COMMIT PREPARED or race a publisher's cycle.
#
# C. The exiting publisher's race, made certain: a publisher whose cycle just
#    found the extension missing is held there (the fault injection build's
#    `stall` at publisher.extension_missing) while CREATE EXTENSION commits;
#    it then goes on. The old build's publisher wrote "absent" over the
#    announcement and exited, and no publisher ran there again.
# D. CREATE EXTENSION in a prepared transaction, committed later by COMMIT
#    PREPARED in another session, in a database the launcher has found
#    without the extension: it gets a publisher (the old build dropped the
#    announcement at PREPARE).
# E. A route added in a prepared transaction: the event waiting for it flows
#    once COMMIT PREPARED commits (the old build never reloaded the routes).
# F. A route changed and an event emitted in one transaction, 60 times, while
#    a background load keeps the publisher cycling: each event goes to the
#    target of the route it was emitted under (the old build read the
#    configuration version at the start of its cycle and claimed the event
#    with the routes it had: 5 in 100 went to the old target).
# G. A write to outbox.sinks or outbox.routes that PostgreSQL refuses
#    (TRUNCATE, COPY, INSERT, UPDATE, DELETE, ALTER EXTENSION by a role
#    without the right, caught in savepoints and committed, in a loop), or a
#    TRUNCATE of its own table named "sinks" whose trigger turns the
#    search_path to schema outbox, makes no publisher reload its sinks and
#    routes; a change that passes does.
#    The old build reloaded at every such commit: one role could keep every
#    publisher of the database reloading.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run ();
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until set_faults app_session_args);

my $redis = OutboxRedis->start();
my $port = $redis->port;
my $node = outbox_node('announce', <<'EOF', fault_injection => 1);
outbox.workers = 1
max_prepared_transactions = 4
EOF

sub setup_sql {
	my ($stream, %o) = @_;
	my $create = $o{no_create} ? '' : 'CREATE EXTENSION outbox;';
	return qq{$create
		SELECT outbox.create_sink('redis', 'redis', '{"port": $port, "mode": "stream"}');
		SELECT outbox.add_route('life.*', 'redis', '$stream');
		SELECT outbox.emit('life.event', '{"stream": "$stream"}', 'k');};
}

# Every event of $db published (within wait_until's generous deadline: a
# lost change leaves an event waiting for good), and $stream holds one.
sub delivers {
	my ($db, $stream) = @_;
	my $ok = wait_until(sub {
		$node->safe_psql($db, q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}) eq '0' });
	return defined $ok && $redis->cli('XLEN', $stream) >= 1;
}

sub publishers {
	my ($db) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox publisher' AND datname = '$db'");
}

$node->safe_psql('postgres', setup_sql('c-0'));
ok(delivers('postgres', 'c-0'), 'the node delivers');

# --- C. CREATE EXTENSION while the exiting publisher is held --------------------
set_faults($node, 'publisher.extension_missing=stall#1');
my $offset = -s $node->logfile;
$node->safe_psql('postgres', 'DROP EXTENSION outbox');
ok($node->wait_for_log(qr/fault injection: stall at publisher\.extension_missing/, $offset),
	'C: the publisher is held right after its cycle found the extension missing');
$node->safe_psql('postgres', setup_sql('c-1'));    # commits during the 2 s stall
ok(delivers('postgres', 'c-1'),
	'C: CREATE EXTENSION committed while the exiting publisher was held is not lost: its event is delivered');
set_faults($node, '');
is(publishers('postgres'), '1', 'C: one publisher runs, no more');

# --- D. CREATE EXTENSION committed by COMMIT PREPARED ----------------------------
$node->safe_psql('postgres', 'CREATE DATABASE two');
# The launcher's next scan (every 5 s) probes the new database and finds it
# without the extension; from then on it does not look there again by itself.
# The probe (a publisher in that database, which exits) has run once the
# database counts a transaction and no publisher is left there: no session
# of the test connects to it before.
sleep 6;
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT xact_commit + xact_rollback > 0 FROM pg_stat_database
		WHERE datname = 'two'}) eq 't' && publishers('two') eq '0' }),
	'D: the launcher probed the new database');
is(publishers('two'), '0', 'D: no publisher runs in a database without the extension');
$node->safe_psql('two', q{BEGIN; CREATE EXTENSION outbox; PREPARE TRANSACTION 'create_outbox';});
$node->safe_psql('two', q{COMMIT PREPARED 'create_outbox'});
$node->safe_psql('two', setup_sql('d-1', no_create => 1));
ok(delivers('two', 'd-1'), 'D: after CREATE EXTENSION committed by COMMIT PREPARED, the event is delivered');

# --- E. a route added by COMMIT PREPARED -------------------------------------------
$node->safe_psql('two', q{SELECT outbox.emit('late.event', '{"n": 1}')});
# A cycle ran since: an event emitted after it, on the route the database
# has, is published.
$node->safe_psql('two', q{SELECT outbox.emit('life.after', '{"after": "late.event"}')});
ok(defined wait_until(sub {
	$node->safe_psql('two', q{SELECT status FROM outbox.events WHERE topic = 'life.after'}) eq 'published' }),
	'E: an event emitted after it on an existing route is published');
is($node->safe_psql('two', q{SELECT status || ' ' || (next_attempt_at IS NULL) FROM outbox.events
	WHERE topic = 'late.event'}), 'pending true', 'E: an event without a route waits, untouched');
$node->safe_psql('two', q{BEGIN; SELECT outbox.add_route('late.*', 'redis', 'e-1'); PREPARE TRANSACTION 'add_route';});
$node->safe_psql('two', q{COMMIT PREPARED 'add_route'});
ok(delivers('two', 'e-1'), 'E: after a route added by COMMIT PREPARED, the waiting event flows');

# A refused COMMIT PREPARED (no such transaction) fails as usual.
my ($ret, $out, $err) = $node->psql('two', q{COMMIT PREPARED 'no_such_thing'});
like($err, qr/prepared transaction with identifier "no_such_thing" does not exist/,
	'E: a COMMIT PREPARED of an unknown transaction fails as usual');

# --- F. a route change and an event in one transaction, racing the publisher -------
$node->safe_psql('postgres', q{SELECT outbox.add_route('bg.*', 'redis', 'bg')});
my $bg = IPC::Run::start(
	[ $node->installed_command('psql'), '-X', '-q', '-d', $node->connstr('postgres'), app_session_args(),
	  '-c', q{DO $$ BEGIN FOR i IN 1..200000 LOOP PERFORM outbox.emit('bg.x', '{}'); COMMIT; PERFORM pg_sleep(0.001); END LOOP; END $$} ],
	'>', '/dev/null', '2>', '/dev/null');
my @wrong;
for my $i (1 .. 60) {
	$node->safe_psql('postgres', qq{BEGIN;
		SELECT outbox.remove_route('life.*');
		SELECT outbox.add_route('life.*', 'redis', 'f-$i');
		SELECT outbox.emit('life.event', '{"i": $i}');
		COMMIT;});
	wait_until(sub { $node->safe_psql('postgres',
		q{SELECT count(*) FROM outbox.events WHERE topic = 'life.event' AND status <> 'published'}) eq '0' });
	push @wrong, $i if $redis->cli('XLEN', "f-$i") != 1;
}
is(join(' ', @wrong), '', 'F: every event emitted in the transaction that changed its route goes to the new target');
$bg->kill_kill;

# --- G. refused writes to sinks and routes reload nothing ----------------------------
$node->safe_psql('postgres', q{CREATE ROLE intruder LOGIN;
	ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf();});
my $loads = qr/outbox: loading sinks and routes/;
$offset = -s $node->logfile;
# A change that passes is loaded (and shows the publisher logs at DEBUG1).
$node->safe_psql('postgres', q{SELECT outbox.add_route('g.*', 'redis', 'g')});
ok(defined wait_until(sub { slurp_file($node->logfile, $offset) =~ $loads }),
	'G: a route added is loaded (DEBUG1)');
$offset = -s $node->logfile;
my ($g_ret, $g_out, $g_err) = $node->psql('postgres', q{DO $$
BEGIN
  FOR i IN 1..20 LOOP
    BEGIN TRUNCATE outbox.routes; EXCEPTION WHEN insufficient_privilege THEN NULL; END;
    BEGIN INSERT INTO outbox.routes (pattern, sink) VALUES ('x.*', 'redis');
      EXCEPTION WHEN insufficient_privilege THEN NULL; END;
    BEGIN UPDATE outbox.sinks SET options = '{}'; EXCEPTION WHEN insufficient_privilege THEN NULL; END;
    BEGIN DELETE FROM outbox.routes; EXCEPTION WHEN insufficient_privilege THEN NULL; END;
    BEGIN ALTER EXTENSION outbox UPDATE; EXCEPTION WHEN insufficient_privilege THEN NULL; END;
    COMMIT;
  END LOOP;
END $$}, extra_params => [ '-U', 'intruder' ]);
is($g_ret, 0, 'G: the refused writes were caught and committed') or diag $g_err;
$node->psql('postgres', q{COPY outbox.routes FROM STDIN}, extra_params => [ '-U', 'intruder' ]);
# A statement on a table of its own whose trigger turns the search_path to
# schema outbox: the name is the one the statement resolved, not the one it
# would resolve after it ran.
($g_ret, $g_out, $g_err) = $node->psql('postgres', q{
CREATE TEMP TABLE sinks (x int);
CREATE FUNCTION pg_temp.flip() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN PERFORM set_config('search_path', 'outbox, pg_temp', false); RETURN NULL; END$$;
CREATE TRIGGER flip BEFORE TRUNCATE ON pg_temp.sinks
  FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.flip();
DO $$
BEGIN
  FOR i IN 1..20 LOOP
    PERFORM set_config('search_path', 'pg_temp, outbox', false);
    TRUNCATE sinks;
    COMMIT;
  END LOOP;
END $$}, extra_params => [ '-U', 'intruder' ]);
is($g_ret, 0, 'G: its own table, truncated under a search_path its trigger changes') or diag $g_err;
# The publisher has been woken since: an event emitted afterwards is
# published (so it ran its cycles after those commits).
$node->safe_psql('postgres', q{SELECT outbox.emit('g.after', '{}')});
ok(defined wait_until(sub { $node->safe_psql('postgres',
		q{SELECT count(*) FROM outbox.events WHERE topic = 'g.after' AND status = 'published'}) eq '1' }),
	'G: an event emitted after them is published');
unlike(slurp_file($node->logfile, $offset), $loads, 'G: no publisher reloaded sinks and routes for them');
$node->safe_psql('postgres', q{ALTER SYSTEM RESET log_min_messages; SELECT pg_reload_conf();});

unlike(slurp_file($node->logfile), qr/terminated by signal|exited with exit code [^01]/, 'no server process crashed');
$node->stop;
$redis->stop;
done_testing();
