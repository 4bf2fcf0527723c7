# The restore hook before ATTACH PARTITION onto outbox.events
# (MoveDefaultRowsBeforeRestoredAttach) must take no lock for a role
# PostgreSQL would refuse the ATTACH to. It takes SHARE UPDATE EXCLUSIVE on
# outbox.events (by oid, no name lookup) after checking only that the role
# owns the three tables. PostgreSQL looks outbox.events up by name first,
# and refuses a role without USAGE on schema outbox before any lock; that
# role is refused in time all the same, because RefuseLockingDdlOfNonOwners
# looks the partition's qualified name up first (RangeVarGetRelid, which
# checks USAGE).
#
# Proves: a role that owns outbox.events, its default partition and the
# table to attach, but has no USAGE on schema outbox, gets PostgreSQL's
# refusal at once, without waiting for a lock a maintenance run holds.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node timed);

my $node = outbox_node('attach_no_usage');
$node->safe_psql('postgres', q{
	CREATE EXTENSION outbox;
	CREATE ROLE tables_owner LOGIN;
	CREATE TABLE outbox.events_p20310105 (LIKE outbox.events INCLUDING CONSTRAINTS INCLUDING DEFAULTS);
	ALTER TABLE outbox.events OWNER TO tables_owner;
	ALTER TABLE outbox.events_default OWNER TO tables_owner;
	ALTER TABLE outbox.events_p20310105 OWNER TO tables_owner;
	REVOKE USAGE ON SCHEMA outbox FROM PUBLIC;
});
is($node->safe_psql('postgres',
		q{SELECT has_schema_privilege('tables_owner', 'outbox', 'USAGE')}),
	'f', 'the role has no USAGE on schema outbox');

my $maintenance = $node->background_psql('postgres');
$maintenance->query_safe('BEGIN');
$maintenance->query_safe('LOCK TABLE ONLY outbox.events IN SHARE UPDATE EXCLUSIVE MODE');

# How long the ATTACH took by the server's clock (OutboxNode::timed): psql's
# start-up, long on a loaded machine, is no part of it.
my ($took, undef, $err) = timed($node,
	q{ALTER TABLE ONLY outbox.events ATTACH PARTITION outbox.events_p20310105
		FOR VALUES FROM ('2031-01-05 00:00:00+00') TO ('2031-01-06 00:00:00+00')},
	role => 'tables_owner', settings => ["SET lock_timeout = '4s'"]);
like($err, qr/permission denied for schema outbox/, "PostgreSQL's refusal") or diag($err);
cmp_ok($took, '<', 2, 'at once, not after waiting for a lock on outbox.events')
  or diag(sprintf('took %.1f s: %s', $took, $err));

$maintenance->query_safe('COMMIT');
$maintenance->quit;
$node->stop;
done_testing();
