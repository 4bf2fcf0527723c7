# A statement PostgreSQL refuses to the role running it gets no work done by
# outbox's statement hooks: no lock, no drop, no move. The hook that lets a
# restored partition take the place of an empty one of the same name used
# to lock outbox.events in ACCESS EXCLUSIVE mode before it checked anything,
# so any login role could freeze every emit() and the publisher: one session
# holds an ordinary lock on outbox.events (a reader), another runs CREATE
# TABLE outbox.events_p<an existing day>, whose lock request then waits
# behind the reader, and every emit() queues behind that request.
#
# Proves, for a login role with no right on schema outbox and for one that
# may create in it but owns nothing there, while another session holds the
# lock an open transaction that emitted holds (ROW EXCLUSIVE): its CREATE
# TABLE of an existing day's partition name, its ATTACH PARTITION of a
# table onto outbox.events, and these, which PostgreSQL itself locks before
# it refuses: CREATE TRIGGER, CREATE RULE, CREATE TEMP TABLE ... PARTITION
# OF and CREATE FOREIGN TABLE ... PARTITION OF on outbox.events; on a table
# of the role's own, a foreign key referencing outbox.events (ALTER TABLE,
# or CREATE TABLE with REFERENCES), ATTACH and DETACH PARTITION of today's
# partition; ALTER INDEX or MATERIALIZED VIEW ... DEPENDS ON EXTENSION
# naming today's partition or outbox.events (which any login role could
# send to queue every emit() behind its lock request, found by an outside
# review); each fails at once with a refusal (42501 or 42P07), not after
# waiting for a lock; an emit() made meanwhile does not wait; the partition
# is untouched.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use OutboxNode qw(outbox_node wait_until start_timed timed);
use OutboxLifecycle;

my $node = outbox_node('refused_ddl', '');
$node->safe_psql('postgres', q{
CREATE EXTENSION outbox;
CREATE ROLE intruder LOGIN;
CREATE ROLE creator LOGIN;
GRANT CREATE ON SCHEMA outbox TO creator;
CREATE ROLE app LOGIN;
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO app;
CREATE TABLE public.intruders_table (LIKE outbox.events);
ALTER TABLE public.intruders_table OWNER TO intruder;
CREATE TABLE public.intruder_own (id uuid, created_at timestamptz);
ALTER TABLE public.intruder_own OWNER TO intruder;
CREATE TABLE public.creator_own (id uuid, created_at timestamptz);
ALTER TABLE public.creator_own OWNER TO creator;
CREATE TABLE public.intruder_parted (LIKE outbox.events) PARTITION BY RANGE (created_at);
ALTER TABLE public.intruder_parted OWNER TO intruder;
CREATE TABLE public.creator_parted (LIKE outbox.events) PARTITION BY RANGE (created_at);
ALTER TABLE public.creator_parted OWNER TO creator;
GRANT CREATE ON SCHEMA public TO intruder, creator;});
my $today = $node->safe_psql('postgres',
	q{SELECT 'events_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')});
my $oid_before = $node->safe_psql('postgres', "SELECT 'outbox.$today'::regclass::oid");

# A session holds, for the whole test, the lock on outbox.events that an
# open transaction that emitted holds (and that the publisher's cycles
# take): ROW EXCLUSIVE, which conflicts with the foreign keys' SHARE ROW
# EXCLUSIVE as well as with ACCESS EXCLUSIVE.
my $reader = OutboxLifecycle::session($node);
ok(defined $reader->query('BEGIN; LOCK TABLE outbox.events IN ROW EXCLUSIVE MODE; SELECT 1'),
	'a session holds ROW EXCLUSIVE on outbox.events');

my %statements = (
	'CREATE TABLE of an existing day' => "CREATE TABLE outbox.$today (id int)",
	'ATTACH PARTITION onto outbox.events' =>
	  "ALTER TABLE ONLY outbox.events ATTACH PARTITION public.intruders_table"
	  . " FOR VALUES FROM ('2099-01-01') TO ('2099-01-02')",
	# PostgreSQL locks before it checks who may for these three: outbox's
	# hook checks first (events_ddl_check.hpp).
	'CREATE TRIGGER on outbox.events' => 'CREATE TRIGGER t BEFORE INSERT ON outbox.events'
	  . ' FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()',
	'CREATE RULE on outbox.events' => 'CREATE RULE r AS ON INSERT TO outbox.events DO ALSO NOTHING',
	'CREATE TEMP TABLE ... PARTITION OF outbox.events' =>
	  'CREATE TEMP TABLE x PARTITION OF outbox.events DEFAULT',
	'CREATE FOREIGN TABLE ... PARTITION OF outbox.events' =>
	  'CREATE FOREIGN TABLE pg_temp.y PARTITION OF outbox.events DEFAULT SERVER no_such_server',
	# On a table of the role's own (ROLE stands for its name): PostgreSQL
	# locks outbox's relation named inside before it checks the role's
	# rights on it.
	'a foreign key referencing outbox.events' =>
	  'ALTER TABLE public.ROLE_own ADD FOREIGN KEY (id, created_at) REFERENCES outbox.events (id, created_at)',
	'CREATE TABLE with REFERENCES outbox.events' =>
	  'CREATE TABLE public.ROLE_ref (id uuid REFERENCES outbox.events (id))',
	"ATTACH PARTITION of today's partition to its own table" =>
	  "ALTER TABLE public.ROLE_parted ATTACH PARTITION outbox.$today FOR VALUES FROM (MINVALUE) TO (MAXVALUE)",
	"DETACH PARTITION of today's partition from its own table" =>
	  "ALTER TABLE public.ROLE_parted DETACH PARTITION outbox.$today",
	# PostgreSQL finds the object of DEPENDS ON EXTENSION (ACCESS EXCLUSIVE
	# on the relation, of whatever kind) before it checks ownership.
	"ALTER INDEX ... DEPENDS ON EXTENSION naming today's partition" =>
	  "ALTER INDEX outbox.$today DEPENDS ON EXTENSION outbox",
	'ALTER MATERIALIZED VIEW ... DEPENDS ON EXTENSION naming outbox.events' =>
	  'ALTER MATERIALIZED VIEW outbox.events DEPENDS ON EXTENSION outbox',
);
for my $role ('intruder', 'creator') {
	for my $what (sort keys %statements) {
		(my $sql = $statements{$what}) =~ s/\bROLE_/${role}_/g;
		# Times are the server's, read in the statement's own session
		# (OutboxNode::start_timed): psql's start-up is no part of them.
		my $wait = start_timed($node, $sql, role => $role, settings => ["SET lock_timeout = '10s'"]);
		usleep(300_000);  # its lock request, if it made one, is queued now
		my ($emit_took, $emitted, $err) = timed($node, q{SELECT outbox.emit('probe.e', '{}') IS NOT NULL},
			role => 'app', settings => ["SET statement_timeout = '5s'"]);
		like($emitted, qr/^t$/m, "$role, $what: an emit() meanwhile succeeds") or diag $err;
		cmp_ok($emit_took, '<', 3, "$role, $what: the emit() does not wait");
		my ($took, undef, $stderr) = $wait->();
		like($stderr, qr/permission denied|must be owner|already exists|is not a partition/,
			"$role, $what: PostgreSQL's own refusal") or diag $stderr;
		unlike($stderr, qr/lock timeout/, "$role, $what: not a lock wait");
		cmp_ok($took, '<', 5, "$role, $what: refused at once");
	}
}
# A name without its schema is looked up again by PostgreSQL after the
# statement waited for its own locks: a table of that name earlier on the
# search_path could be renamed away meanwhile, and the name would then lock
# outbox's table. So with schema outbox on the path, the name stands for
# outbox's relation of that name, even while the role's own table comes
# first.
$node->safe_psql('postgres', q{CREATE TABLE public.events (id uuid PRIMARY KEY);
	ALTER TABLE public.events OWNER TO intruder;});
my ($fk_ret, $fk_out, $fk_err) = $node->psql('postgres', q{SET search_path = public, outbox;
	ALTER TABLE intruder_own ADD FOREIGN KEY (id) REFERENCES events (id);},
	extra_params => [ '-U', 'intruder' ]);
like($fk_err, qr/permission denied for table events.*\n.*HINT:  The name is looked up on the search_path, which has schema outbox/s,
	'an unqualified name that outbox.events could take is refused, with a hint to qualify it');
($fk_ret, $fk_out, $fk_err) = $node->psql('postgres', q{SET search_path = public, outbox;
	ALTER TABLE intruder_own ADD FOREIGN KEY (id) REFERENCES public.events (id);},
	extra_params => [ '-U', 'intruder' ]);
is($fk_ret, 0, 'qualified, the foreign key to its own table is made') or diag $fk_err;

is($node->safe_psql('postgres', "SELECT 'outbox.$today'::regclass::oid"), $oid_before,
	"today's partition is the same table");
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'probe.e'}),
	2 * scalar(keys %statements), 'every emit() is in outbox.events');
$reader->close;
$node->stop;
done_testing();
