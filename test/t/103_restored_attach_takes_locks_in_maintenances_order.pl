# A restore's ATTACH PARTITION of an outbox partition, beside partition
# maintenance. Before the ATTACH, outbox's hook moves the default
# partition's rows of that day into the table being attached (events
# emitted during the restore). Maintenance holds outbox.events (SHARE
# UPDATE EXCLUSIVE) and then reads the default partition. The hook used to
# lock the default partition first and then wait for outbox.events: each
# waited for the other, and the restore's log said "deadlock detected".
# Here one session takes maintenance's locks one at a time, so that the
# ATTACH comes between them. Proves: the ATTACH waits for outbox.events
# before it locks the default partition, the "maintenance" session reads
# the default partition without waiting, nobody gets an error, and the
# ATTACH then moves the row and attaches the table.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node);

my $node = outbox_node('restored_attach');
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
# An event of 2031-01-05, a day without a partition: it lies in
# outbox.events_default, as one emitted during a restore would.
# One transaction: the publisher's maintenance (at its start, whenever a
# loaded machine lets it, then once a minute) makes a partition for a day
# whose events it finds in the default partition, and moves them there; it
# must not find the event before the restored table of that name exists
# (once it does, maintenance leaves that day to the restore).
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox.emit('restore.e', '{}', 'k');
	UPDATE outbox.events SET created_at = '2031-01-05 12:00+00' WHERE topic = 'restore.e';
	CREATE TABLE outbox.events_p20310105 (LIKE outbox.events INCLUDING CONSTRAINTS INCLUDING DEFAULTS);
	COMMIT;
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events_default WHERE topic = 'restore.e'}),
	'1', 'the event lies in the default partition');

my $maintenance = $node->background_psql('postgres');
$maintenance->query_safe('BEGIN');
$maintenance->query_safe('LOCK TABLE ONLY outbox.events IN SHARE UPDATE EXCLUSIVE MODE');

my $restore = $node->background_psql('postgres', on_error_stop => 0);
my $restore_pid = $restore->query_safe('SELECT pg_backend_pid()');
$restore_pid =~ s/\s+//g;
$restore->query_until(qr/attaching/, q{\echo attaching
ALTER TABLE ONLY outbox.events ATTACH PARTITION outbox.events_p20310105
  FOR VALUES FROM ('2031-01-05 00:00:00+00') TO ('2031-01-06 00:00:00+00');
});
ok($node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $restore_pid"),
	'the ATTACH waits for the maintenance session');
is($node->safe_psql('postgres', qq{SELECT string_agg(c.relname || ' ' || l.mode, ', ' ORDER BY c.relname)
	FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
	WHERE l.pid = $restore_pid AND c.relnamespace = 'outbox'::regnamespace AND c.relname !~ '_idx'}),
	'events ShareUpdateExclusiveLock', 'for outbox.events, holding no lock on the default partition');

# Maintenance reads the default partition: it does not wait (a deadlock
# would be found after deadlock_timeout, and one side would get an ERROR).
my ($count, $failed) = $maintenance->query(q{SELECT count(*) FROM outbox.events_default});
ok(!$failed, 'the maintenance session reads the default partition')
  or diag($maintenance->{stderr});
$maintenance->query_safe('COMMIT');

my ($done, $restore_failed) = $restore->query('SELECT 1');
ok(!$restore_failed, 'the ATTACH completes without an error') or diag($restore->{stderr});
is($node->safe_psql('postgres', q{SELECT tableoid::regclass FROM outbox.events WHERE topic = 'restore.e'}),
	'outbox.events_p20310105', "the default partition's event of that day moved into the attached table");

$maintenance->quit;
$restore->quit;
$node->stop;
done_testing();
