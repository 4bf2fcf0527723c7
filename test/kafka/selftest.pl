# Self-test of the Kafka test tools (kafka_broker, kafka_consume, OutboxKafka.pm):
# starts a 3-broker librdkafka mock cluster, produces with kcat, reads back with
# kafka_consume, and checks that each fault the outbox tests rely on does what it says:
# brokers down/up, added latency, injected Produce errors (retriable and permanent), a
# leaderless partition. Needs no PostgreSQL; takes about 10 s.
#
#   prove test/kafka/selftest.pl
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use IO::Socket::INET;
use IPC::Run ();
use Test::More;
use OutboxKafka;

plan skip_all => 'kcat is not installed'
  unless grep { -x "$_/kcat" } split /:/, ($ENV{PATH} || '');

# A short delivery timeout for produces that are meant to fail.
my %fail_fast = ('message.timeout.ms' => 1500);

my $k = OutboxKafka->start(brokers => 3, topics => [ 't:1', 'multi:3' ]);
like($k->bootstrap, qr/^127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){2}$/,
	'bootstrap lists three loopback brokers');

# --- control channel -------------------------------------------------------------------
is($k->command('ping'), 'OK', 'ping');
like($k->command('frobnicate'), qr/^ERR /, 'unknown command is an ERR, not a crash');
like($k->command('down 9'), qr/^ERR bad broker id/, 'broker id out of range');
like($k->command('produce_errors 1 NO_SUCH_ERROR'), qr/^ERR unknown error name/,
	'unknown error name');
like($k->command('create_topic t 1'), qr/^ERR TOPIC_ALREADY_EXISTS/, 'topic exists');
is($k->command('create_topic fresh 2'), 'OK', 'create_topic at runtime');
is($k->command('ping'), 'OK', 'still answering after bad commands');

# --- produce and consume: keys, values, headers ----------------------------------------
ok( $k->produce(
		topic => 't',
		key => 'k1',
		value => 'v1',
		headers => [ [ 'ce_type', 'orders.created' ], [ 'trace', 'abc' ] ]),
	'kcat delivers a keyed message with headers');
ok($k->produce(topic => 't', value => "line1\nline2 \"q\" \\ \x{e9}\x{20ac}"),
	'kcat delivers an unkeyed message with a newline, quotes and non-ASCII text');
ok($k->produce(topic => 't', key => '', value => '', headers => [ [ 'nullhdr', undef ] ]),
	'kcat delivers an empty key and value with a null header value');

my $msgs = $k->consume(topics => ['t'], count => 3, timeout_ms => 5000);
is(scalar @$msgs, 3, 'consume returns the three messages');
is_deeply(
	$msgs->[0],
	{
		topic => 't',
		partition => 0,
		offset => 0,
		key => 'k1',
		value => 'v1',
		headers => [ [ 'ce_type', 'orders.created' ], [ 'trace', 'abc' ] ]
	},
	'first message: key, value, headers in order');
is($msgs->[1]{key}, undef, 'no key is null');
is($msgs->[1]{value}, "line1\nline2 \"q\" \\ \x{e9}\x{20ac}",
	'value survives JSON escaping and UTF-8 decoding');
is($msgs->[1]{offset}, 1, 'offsets count up');
is($msgs->[2]{key}, '', 'empty key is an empty string, not null');
is($msgs->[2]{value}, '', 'empty value');
is_deeply($msgs->[2]{headers}, [ [ 'nullhdr', undef ] ], 'null header value');

# Topics: the producer's Metadata request auto-created 'auto' (the mock's default is 4
# partitions); a consumer of a missing topic waits, prints nothing and creates nothing.
ok($k->produce(topic => 'auto', key => 'a', value => 'x'), 'produce auto-creates a topic');
$msgs = $k->consume(topics => ['auto'], count => 1, timeout_ms => 3000);
ok(@$msgs == 1 && $msgs->[0]{partition} < 4, 'message in an auto-created topic');
$msgs = $k->consume(topics => ['never'], timeout_ms => 500);
is(scalar @$msgs, 0, 'consuming a missing topic returns nothing');
is($k->command('create_topic never 1'), 'OK', '... and did not create it');

# count stops early; several topics at once.
ok($k->produce(topic => 'multi', partition => $_, value => "m$_"), "produce to multi [$_]")
  for 0 .. 2;
$msgs = $k->consume(topics => [ 'multi', 't' ], timeout_ms => 1000);
is(scalar @$msgs, 6, 'two topics: 3 + 3 messages');
$msgs = $k->consume(topics => [ 'multi', 't' ], count => 2, timeout_ms => 5000);
is(scalar @$msgs, 2, 'count stops after N messages');

# --- brokers down and up ----------------------------------------------------------------
is($k->command('down all'), 'OK', 'down all');
my ($ok, $err) = $k->produce(topic => 't', value => 'while down', props => \%fail_fast);
ok(!$ok, 'produce fails while all brokers are down');
like($err, qr/timed out|transport|refused/i, '... with a timeout or transport error');
is($k->command('up all'), 'OK', 'up all');
ok($k->produce(topic => 't', value => 'after up'), 'produce succeeds after up all');
is($k->command('down 2'), 'OK', 'down one broker');
is($k->command('up 2'), 'OK', 'up one broker');

# --- latency -------------------------------------------------------------------------------
is($k->command('rtt all 5'), 'OK', 'rtt all 5');
ok($k->produce(topic => 't', value => 'slow'), 'produce succeeds with 5 ms rtt');
is($k->command('rtt all 0'), 'OK', 'rtt back to 0');

# --- injected Produce errors ------------------------------------------------------------------
is($k->command('produce_errors 1 NOT_LEADER_FOR_PARTITION'), 'OK',
	'inject one NOT_LEADER_FOR_PARTITION');
ok($k->produce(topic => 't', value => 'retried'),
	'a retriable error is retried and the message delivered');
is($k->command('produce_errors 2 RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT'), 'OK',
	'error names take the RD_KAFKA_RESP_ERR_ prefix too');
ok($k->produce(topic => 't', value => 'retried twice'), 'two timeouts, then delivered');
is($k->command('produce_errors 1 msg_size_too_large'), 'OK', 'names are case-insensitive');
($ok, $err) = $k->produce(topic => 't', value => 'too large');
ok(!$ok, 'a permanent error fails the delivery');
like($err, qr/too large/i, '... with the injected error');

# --- leaderless partition ----------------------------------------------------------------------
is($k->command('leader t 0 -1'), 'OK', 'partition t [0] leaderless');
($ok, $err) = $k->produce(topic => 't', value => 'no leader', props => \%fail_fast);
ok(!$ok, 'produce to a leaderless partition times out');
is($k->command('leader t 0 3'), 'OK', 'leader back (broker 3)');
ok($k->produce(topic => 't', value => 'leader back'), 'produce succeeds with a leader again');

$msgs = $k->consume(topics => ['t'], timeout_ms => 1000);
is_deeply(
	[ map { $_->{value} } @$msgs[ 3 .. $#$msgs ] ],
	[ 'after up', 'slow', 'retried', 'retried twice', 'leader back' ],
	'exactly the delivered messages are in the log, once each');

# --- shutdown -------------------------------------------------------------------------------
my @ports = $k->bootstrap =~ /:(\d+)/g;
sub port_open
{
	my $s = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $_[0],
		Timeout => 2);
	return defined $s;
}
ok(port_open($ports[0]), 'broker 1 accepts connections');
$k->stop;
ok(!port_open($ports[0]), 'stop closes the listeners');
eval { $k->command('ping') };
like($@, qr/not running/, 'command after stop dies');
$k->stop;    # twice is fine

{
	my $k2 = OutboxKafka->start(brokers => 1);
	@ports = $k2->bootstrap =~ /:(\d+)/g;
	is(scalar @ports, 1, 'one-broker cluster');
	ok(port_open($ports[0]), 'second broker up');
}
ok(!port_open($ports[0]), 'a broker object going out of scope stops the broker');

# EOF on stdin alone ends the broker: a test that dies never leaves one behind.
my ($out, $stderr) = ('', '');
my $ran = IPC::Run::run([ "$FindBin::RealBin/kafka_broker", '--brokers', '1' ],
	'<', \undef, '>', \$out, '2>', \$stderr, IPC::Run::timeout(30));
ok($ran, 'kafka_broker exits with status 0 on EOF');
like($out, qr/^BOOTSTRAP 127\.0\.0\.1:\d+\n\z/, '... after printing only the BOOTSTRAP line');

done_testing();
