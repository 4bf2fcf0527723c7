# One key's events emitted by different sessions one after the other (each
# transaction takes the same advisory lock, emits, commits: an application
# serialising its writes to one entity across pooled connections) get ids in
# the order they were emitted, so the publisher, which sends a key's events
# in id order, keeps that order. Two sessions emitting within the same
# millisecond used to get ids ordered by each backend's random counter seed:
# about one handoff in six came out reversed. Stamps now come from one
# counter in shared memory (src/shmem/id_stamp.hpp).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node);

my $node = outbox_node('serialised_sessions');
$node->safe_psql('postgres', q{CREATE EXTENSION outbox; CREATE SEQUENCE handoff_seq;});

# No route: the events wait untouched, in the order the claims would take them.
my $script = "$PostgreSQL::Test::Utils::tmp_check/handoff.sql";
open my $fh, '>', $script or die "$script: $!";
print $fh <<'SQL';
BEGIN;
SELECT pg_advisory_xact_lock(42);
SELECT outbox.emit('handoff.t', jsonb_build_object('seq', nextval('handoff_seq')), 'k');
COMMIT;
SQL
close $fh;
for my $clients (2, 4) {
	$node->command_ok(
		[ 'pgbench', '-n', '-h', $node->host, '-p', $node->port, '-c', $clients, '-j', $clients,
		  '-t', int(2000 / $clients), '-f', $script, 'postgres' ],
		"$clients sessions take turns emitting for one key");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE topic = 'handoff.t'}),
	'4000', 'every event is there');
my $reversed = $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	  SELECT (payload->>'seq')::bigint AS seq,
	         lag((payload->>'seq')::bigint) OVER (ORDER BY id) AS before
	    FROM outbox.events WHERE topic = 'handoff.t') ordered
	 WHERE seq < before});
is($reversed, '0', 'ids sort in the order the sessions emitted, handoff after handoff');

$node->stop;
done_testing();
