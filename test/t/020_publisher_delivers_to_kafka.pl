# The publisher end to end against a Kafka-protocol broker: what arrives
# (key, compact JSON value, headers, route targets), what never arrives
# (rolled-back transactions and subtransactions), events without a route
# waiting until one exists, and the publisher's life cycle: start within 2 s
# of CREATE EXTENSION, one per database, gone with DROP EXTENSION, and no
# obstacle to DROP DATABASE.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql pending_count);

my $kafka = OutboxKafka->start();
$kafka->command("create_topic $_") for ('orders 3', 'payments.captured 1', 'audit.login 1',
	'second.db 1');

my $node = outbox_node('delivery');

sub publishers {
	my ($db) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox publisher'"
		  . " AND datname = '$db'");
}

# CREATE EXTENSION in $db; returns the server's clock just before its commit.
sub create_extension {
	my ($db) = @_;
	return $node->safe_psql($db,
		'BEGIN; CREATE EXTENSION outbox; SELECT extract(epoch FROM clock_timestamp()); COMMIT;');
}

# Seconds from $since (the server's clock) to the start of $db's publisher
# (pg_stat_activity.backend_start), once one runs; undef if none does. Both by
# the server's clock: how long the test took to look is no part of it.
sub publisher_started_after {
	my ($db, $since) = @_;
	return undef unless defined wait_until(sub { publishers($db) eq '1' });
	return $node->safe_psql('postgres',
		"SELECT extract(epoch FROM backend_start) - $since FROM pg_stat_activity"
		  . " WHERE backend_type = 'outbox publisher' AND datname = '$db'");
}

# --- CREATE EXTENSION starts a publisher within 2 s, no restart needed.
# The launcher first: the server starts it when it is up, which a loaded
# machine may make later than the test's CREATE EXTENSION; what is timed
# here is the launcher's answer to it.
ok(defined wait_until(sub { $node->safe_psql('postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox launcher'") eq '1' }),
	'the launcher runs');
my $took = publisher_started_after('postgres', create_extension('postgres'));
ok(defined $took && $took < 2, 'a publisher runs within 2 s of CREATE EXTENSION')
  or diag('took ' . ($took // 'forever'));
is($node->safe_psql('postgres',
		"SELECT application_name FROM pg_stat_activity WHERE backend_type = 'outbox publisher'"),
	'outbox publisher', 'pg_stat_activity names it');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox launcher'"),
	'1', 'one launcher runs');
my $ps = `ps -e -o args`;
like($ps, qr/outbox publisher for database postgres/, 'ps shows the publisher and its database');

# --- Routes: a fixed target, and the event's own topic.
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('postgres', q{SELECT outbox.add_route('orders.*', 'kafka', 'orders')});
$node->safe_psql('postgres', q{SELECT outbox.add_route('payments.*', 'kafka')});

# --- Committed, rolled back, and rolled back to a savepoint.
$node->safe_psql('postgres', q{
	CREATE TABLE orders (id int PRIMARY KEY);
	BEGIN;
	INSERT INTO orders VALUES (1);
	SELECT outbox.emit('orders.created', '{"order": 1, "items": [1, 2], "note": "a \"quoted\" word"}',
	                   'order-1', '{"source": "tap", "trace": "t-1"}');
	COMMIT;
	BEGIN;
	SELECT outbox.emit('orders.created', '{"rolled": "back"}', 'order-2');
	ROLLBACK;
	BEGIN;
	SELECT outbox.emit('orders.paid', '{"order": 1}', 'order-1');
	SAVEPOINT s;
	SELECT outbox.emit('orders.paid', '{"rolled": "back to savepoint"}', 'order-1');
	ROLLBACK TO SAVEPOINT s;
	SELECT outbox.emit('payments.captured', '{"amount": 12.50}');
	COMMIT;
});

ok(defined wait_until(sub { pending_count($node) eq '0' }), 'every committed event is published');

my $orders = $kafka->consume(topics => ['orders'], count => 2, timeout_ms => 5000);
is(scalar @$orders, 2, 'two events arrived on the fixed target topic');
my ($created) = grep { $_->{value} =~ /"items"/ } @$orders;
my ($paid) = grep { $_->{value} eq '{"order":1}' } @$orders;
ok($created && $paid, 'both committed order events arrived');
is($created->{key}, 'order-1', 'the event key is the message key');
is($created->{value}, '{"note":"a \"quoted\" word","items":[1,2],"order":1}',
	'the value is the payload as compact JSON');

my ($created_id) = $node->safe_psql('postgres',
	q{SELECT id FROM outbox.events WHERE topic = 'orders.created'});
is_deeply($created->{headers},
	[ [ 'outbox-id', $created_id ], [ 'outbox-topic', 'orders.created' ],
	  [ 'trace', 't-1' ], [ 'source', 'tap' ] ],
	'headers: outbox-id, outbox-topic, then the user headers in jsonb key order');
ok($created->{partition} == $paid->{partition} && $created->{offset} < $paid->{offset},
	'same key: same partition, in emit order');
ok(!(grep { $_->{value} =~ /rolled/ } @$orders), 'nothing from a rolled-back transaction or savepoint');

my $payments = $kafka->consume(topics => ['payments.captured'], count => 1, timeout_ms => 5000);
is(scalar @$payments, 1, 'a NULL target delivers to the event topic');
ok(!defined $payments->[0]{key}, 'an event without key has no message key');
is($payments->[0]{value}, '{"amount":12.50}', 'numbers keep their text');

is($node->safe_psql('postgres',
		q{SELECT count(*) FROM outbox.events WHERE status = 'published' AND published_at IS NOT NULL}),
	'3', 'published events carry published_at');

# --- outbox.workers shows the publisher and what it did.
# (state is 'publishing' while a poll cycle runs, 'idle' between cycles)
is($node->safe_psql('postgres', q{
	SELECT database || ' ' || (state IN ('idle', 'publishing')) || ' ' || sinks || ' '
	       || published || ' ' || (last_batch_size > 0) || ' ' || (last_batch_ms >= 0)
	  FROM outbox.workers}),
	'postgres true kafka=connected 3 true true',
	'outbox.workers: database, state, sink state, events published, last batch');

# --- No route: the event waits, and flows once a route exists. A routed
# event emitted after it and published shows that a cycle ran since.
$node->safe_psql('postgres', q{SELECT outbox.emit('audit.login', '{"user": "ann"}')});
$node->safe_psql('postgres', q{SELECT outbox.emit('payments.captured', '{"after": "audit.login"}')});
ok(defined wait_until(sub { pending_count($node, 'postgres', q{topic = 'payments.captured'}) eq '0' }),
	'a routed event emitted after it is published');
is(pending_count($node, 'postgres', q{topic = 'audit.login'}), '1', 'an unrouted event stays pending');
$node->safe_psql('postgres', q{SELECT outbox.add_route('audit.*', 'kafka')});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'it flows once a route exists');
is(scalar @{ $kafka->consume(topics => ['audit.login'], count => 1, timeout_ms => 5000) }, 1,
	'and arrives');

# --- A second database gets its own publisher, without a restart.
$node->safe_psql('postgres', 'CREATE DATABASE second');
$took = publisher_started_after('second', create_extension('second'));
ok(defined $took && $took < 2, 'CREATE EXTENSION in a second database starts its publisher')
  or diag('took ' . ($took // 'forever'));
$node->safe_psql('second', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('second', q{SELECT outbox.add_route('second.*', 'kafka')});
$node->safe_psql('second', q{SELECT outbox.emit('second.db', '{"from": "second"}')});
ok(defined wait_until(sub { pending_count($node, 'second') eq '0' }),
	'the second database publishes');
# outbox.workers shows this database's publishers only: sink names, states
# and errors of other databases are not its users' business.
is($node->safe_psql('second', q{SELECT string_agg(DISTINCT database, ',') FROM outbox.workers}),
	'second', "outbox.workers in database second shows second's publisher only");
is($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT database, ',') FROM outbox.workers}),
	'postgres', 'and in database postgres only its own');

# --- DROP EXTENSION stops it; DROP DATABASE (without FORCE) succeeds.
$node->safe_psql('second', 'DROP EXTENSION outbox');
ok(defined wait_until(sub { publishers('second') eq '0' }), 'DROP EXTENSION stops the publisher');
$node->safe_psql('second', 'CREATE EXTENSION outbox');
ok(defined wait_until(sub { publishers('second') eq '1' }), 'CREATE EXTENSION starts it again');
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE second');
is($ret, 0, 'DROP DATABASE succeeds while the database has a publisher') or diag($stderr);
ok(defined wait_until(sub { publishers('postgres') eq '1' }), 'the other database keeps publishing');

$node->stop;
$kafka->stop;
done_testing();
