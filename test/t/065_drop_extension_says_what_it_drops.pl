# DROP EXTENSION outbox drops outbox.events with every event in it; it now
# says how many undelivered (pending and dead) events went, as a WARNING.
#
# Proves: a DROP EXTENSION of a database holding pending and dead events
# warns with both counts; one holding only published events, or none, says
# nothing; a role that may not drop the extension gets PostgreSQL's refusal
# and no count.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node);

my $node = outbox_node('drop_warning', '');
$node->safe_psql('postgres', 'CREATE ROLE intruder LOGIN');

$node->safe_psql('postgres', q{
CREATE EXTENSION outbox;
SELECT outbox.emit('orders.new', pg_catalog.jsonb_build_object('i', i)) FROM generate_series(1, 5) i;
UPDATE outbox.events SET status = 'dead', attempts = 10
 WHERE id = (SELECT id FROM outbox.events ORDER BY id LIMIT 1);});

my ($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION outbox', extra_params => [ '-U', 'intruder' ]);
isnt($ret, 0, 'a role that does not own the extension may not drop it');
like($err, qr/must be owner/, "PostgreSQL's own refusal");
unlike($err, qr/dropped .* event/, 'and no count of the events');

($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION outbox');
is($ret, 0, 'the owner drops the extension');
like($err, qr/WARNING:  DROP EXTENSION outbox dropped 4 pending and 1 dead event\(s\), never delivered/,
	'the WARNING names how many pending and dead events went');

$node->safe_psql('postgres', q{
CREATE EXTENSION outbox;
SELECT outbox.emit('orders.new', '{}');
UPDATE outbox.events SET status = 'published', published_at = now();});
($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION outbox');
is($ret, 0, 'dropped again');
unlike($err, qr/WARNING/, 'nothing undelivered: no WARNING');

$node->stop;
done_testing();
