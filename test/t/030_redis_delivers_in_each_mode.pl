# The Redis sink against a real redis-server: stream, publish and list modes
# with the contract's fields, rolled-back events never delivered, a Redis
# restart losing nothing, a WRONGTYPE poison event going dead while its
# neighbours flow, AUTH with a password and a non-zero db, per-key order in
# a stream, and a Redis outage never stalling a Kafka route; a password from
# the server's environment is sent only while no role but the table's owner
# may write outbox.sinks (a column grant included).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql pending_count);
use OutboxRedis;

my $password = 'redis-s3cret';
my $redis = OutboxRedis->start(password => $password);
my $kafka = OutboxKafka->start();
$kafka->command('create_topic kafka.side 1');
# The list sink takes its password from the server's environment instead of
# SQL text: set before the server starts.
$ENV{OUTBOX_TEST_REDIS_PASSWORD} = $password;
my $node = outbox_node('redis', "outbox.max_attempts = 3");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
my $port = $redis->port;
for my $mode ('stream', 'list', 'publish') {
	my $extra = $mode eq 'stream' ? '"maxlen": 100000' : '"host": "127.0.0.1"';
	my $secret = $mode eq 'list' ? '{"env": "OUTBOX_TEST_REDIS_PASSWORD"}' : qq("$password");
	my $options = qq({"port": $port, "db": 3, "password": $secret, "mode": "$mode", $extra});
	$node->safe_psql('postgres', "SELECT outbox.create_sink('redis-$mode', 'redis', '$options')");
}
$node->safe_psql('postgres', q{
	SELECT outbox.add_route('s.*', 'redis-stream', 'events');
	SELECT outbox.add_route('l.*', 'redis-list');
	SELECT outbox.add_route('p.*', 'redis-publish', 'events-channel');});
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('postgres', q{SELECT outbox.add_route('kafka.*', 'kafka')});

sub cli { return $redis->cli('-n', 3, @_) }

# A subscriber for publish mode, started before anything is published.
my ($sub_out, $sub_err) = ('', '');
my $subscriber = IPC::Run::start(
	[ 'redis-cli', '-p', $port, '-a', $password, '--no-auth-warning', '-n', 3, '--raw',
	  'SUBSCRIBE', 'events-channel' ],
	'>', \$sub_out, '2>', \$sub_err);
ok(defined wait_until(sub { $subscriber->pump_nb; $sub_out =~ /events-channel/ }),
	'subscriber ready');

$node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox.emit('s.orders', '{"n": 1, "note": "quote \" and \\\\ backslash"}', 'k1', '{"trace": "t1"}');
	SELECT outbox.emit('l.orders', '{"n": 2}');
	SELECT outbox.emit('p.orders', '{"n": 3}', 'k3');
	COMMIT;
	BEGIN;
	SELECT outbox.emit('s.orders', '{"rolled": "back"}', 'k1');
	SELECT outbox.emit('l.orders', '{"rolled": "back"}');
	ROLLBACK;});
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'all three published');

my ($s_id, $l_id, $p_id) = map { $node->safe_psql('postgres', "SELECT id FROM outbox.events WHERE topic = '$_'") }
  ('s.orders', 'l.orders', 'p.orders');

# Stream: XADD events * id <id> topic <topic> key <key> payload <json> headers <json>
my @entry = split /\n/, cli('XRANGE', 'events', '-', '+');
is(scalar @entry, 11, 'one stream entry (rolled-back event absent)');
my %f = @entry[ 1 .. 10 ];
is($f{id}, $s_id, 'stream field id');
is($f{topic}, 's.orders', 'stream field topic');
is($f{key}, 'k1', 'stream field key');
is_deeply(decode_json($f{payload}), { n => 1, note => 'quote " and \\ backslash' }, 'stream field payload');
is($f{headers}, '{"trace":"t1"}', 'stream field headers, a JSON object');

# List: RPUSH l.orders <envelope> (target NULL: the event's topic)
my @list = split /\n/, cli('LRANGE', 'l.orders', '0', '-1');
is(scalar @list, 1, 'one list element (rolled-back event absent)');
is_deeply(decode_json($list[0]),
	{ id => $l_id, topic => 'l.orders', key => undef, payload => { n => 2 }, headers => {} },
	'list envelope: id, topic, null key, payload object, empty headers');

# Publish: PUBLISH events-channel <envelope>
ok(defined wait_until(sub { $subscriber->pump_nb; $sub_out =~ /"payload"/ }),
	'the subscriber received a message');
my ($envelope) = $sub_out =~ /^(\{.*\})$/m;
is_deeply(decode_json($envelope),
	{ id => $p_id, topic => 'p.orders', key => 'k3', payload => { n => 3 }, headers => {} },
	'publish envelope');
$subscriber->kill_kill;

# Redis stopped for a while, then restarted (append-only file): nothing lost,
# and a Kafka route keeps flowing meanwhile.
$redis->stop;
$node->safe_psql('postgres', q{
	SELECT outbox.emit('s.orders', jsonb_build_object('n', 100 + i), 'k' || (i % 3))
	  FROM generate_series(1, 30) i;
	SELECT outbox.emit('kafka.side', '{"during": "redis outage"}');});
ok(defined wait_until(sub { pending_count($node, 'postgres', q{topic = 'kafka.side'}) eq '0' }),
	'a Kafka route flows while Redis is down');
sleep 2;
is(pending_count($node, 'postgres', q{topic = 's.orders'}), '30', 'Redis events wait');
$redis->restart;
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'published after Redis is back');
@entry = split /\n/, cli('XRANGE', 'events', '-', '+');
is(scalar(@entry) / 11, 31, 'all 30 arrived, nothing lost (duplicates would show as more)');

# Per-key order in the stream.
my %last;
my $in_order = 1;
for (my $i = 0; $i < @entry; $i += 11) {
	my %e = @entry[ $i + 1 .. $i + 10 ];
	my $n = decode_json($e{payload})->{n};
	$in_order = 0 if defined $last{ $e{key} } && $n < $last{ $e{key} };
	$last{ $e{key} } = $n;
}
ok($in_order, 'per key, stream entries are in emit order');

# WRONGTYPE: a target key holding a string refuses its events; they go dead
# after outbox.max_attempts while events to other keys flow.
cli('SET', 'l.poison', 'not a list');
$node->safe_psql('postgres', q{
	SELECT outbox.emit('l.poison', '{"n": 1}', 'p');
	SELECT outbox.emit('l.fine', '{"n": 2}', 'p');});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT status FROM outbox.events WHERE topic = 'l.poison'}) eq 'dead' }),
	'the WRONGTYPE event goes dead');
like($node->safe_psql('postgres', q{SELECT last_error FROM outbox.events WHERE topic = 'l.poison'}),
	qr/WRONGTYPE/, 'last_error says WRONGTYPE');
# Its neighbour (same key) waited behind it until it was dead: it goes out in
# a later cycle.
ok(defined wait_until(sub { pending_count($node, 'postgres', q{topic = 'l.fine'}) eq '0' }),
	'its neighbour is published');
is(cli('LLEN', 'l.fine'), '1', 'its neighbour was delivered');
# (The test server logs every statement, so the password is in the log as
# part of create_sink's own text: check what outbox itself wrote.)
my @ours = grep { /outbox: / && !/statement: / } split /\n/, slurp_file($node->logfile);
ok(scalar(@ours) > 0 && !(grep { /\Q$password\E/ } @ours),
	'the Redis password never appears in what outbox logs');

unlike($node->safe_psql('postgres', q{SELECT options::text FROM outbox.sinks WHERE name = 'redis-list'}),
	qr/\Q$password\E/, 'a password given as {"env": ...} is stored as the reference, not the secret');
for my $case ([ 'OUTBOX_TEST_NOT_SET', qr/names environment variable OUTBOX_TEST_NOT_SET, which the server's environment lacks/ ],
	[ 'HOME', qr/names an environment variable outbox may not read/ ]) {
	my ($var, $want) = @$case;
	my ($rc, $out, $err) = $node->psql('postgres',
		qq{SELECT outbox.create_sink('r-env', 'redis', '{"password": {"env": "$var"}}')});
	like($err, $want, "create_sink refuses {\"env\": \"$var\"} (22023)");
}
like($node->safe_psql('postgres', 'SELECT sinks FROM outbox.workers'), qr/redis-stream=connected/,
	'outbox.workers shows the Redis sinks');
unlike($node->safe_psql('postgres', 'SELECT sinks FROM outbox.workers'), qr/\Q$password\E/,
	'and never their options');

# Once another role may write outbox.sinks, its options are no superuser's
# choice: by a grant on one column of the table (a restore may bring one
# back), as a login role that writes every table without a grant
# (pg_write_all_data), or as one that may become the table's owner. That
# role, writing the list sink's options, gets no value from the server's
# environment sent anywhere: the publisher refuses the sink and its event
# waits. With the right gone, it is delivered. (Reading the name its UPDATE
# looks for takes SELECT, which pg_write_all_data does not give: a column
# grant of it does, and by itself makes no difference.)
my $list_options = $node->safe_psql('postgres', q{SELECT options::text FROM outbox.sinks WHERE name = 'redis-list'});
for my $case ([ 'a column grant', 'granted', 'GRANT UPDATE (options) ON outbox.sinks TO granted',
		'REVOKE UPDATE (options) ON outbox.sinks FROM granted' ],
	[ 'pg_write_all_data', 'etl', 'GRANT pg_write_all_data TO etl', 'REVOKE pg_write_all_data FROM etl' ],
	[ 'membership in the owner', 'writer_member', 'GRANT outbox_writer TO writer_member',
		'REVOKE outbox_writer FROM writer_member' ]) {
	my ($what, $member, $grant, $revoke) = @$case;
	$node->safe_psql('postgres', qq{CREATE ROLE $member LOGIN; $grant;
		GRANT USAGE ON SCHEMA outbox TO $member; GRANT SELECT (name) ON outbox.sinks TO $member;});
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', qq{SET ROLE $member;
		UPDATE outbox.sinks SET options = '$list_options' WHERE name = 'redis-list';});
	$node->safe_psql('postgres', qq{SELECT outbox.emit('l.$member', '{"n": 10}')});
	ok(defined wait_until(sub { slurp_file($node->logfile, $offset) =~
			/sink "redis-list" is unavailable \(option "password" names an environment variable: only a superuser/ }),
		"$what: the publisher refuses the password from the environment");
	is(cli('LLEN', "l.$member"), '0', 'and the event waits');
	$node->safe_psql('postgres', qq{$revoke; REVOKE ALL ON outbox.sinks FROM $member;
		UPDATE outbox.sinks SET options = options WHERE name = 'redis-list';});
	ok(defined wait_until(sub { cli('LLEN', "l.$member") eq '1' }),
		"$what taken away: the sink is the superuser's again and the event is delivered");
}

$node->stop;
$kafka->stop;
$redis->stop;
done_testing();
