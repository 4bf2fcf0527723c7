# At an HTTP sink, an event its endpoint always refuses with 500, whether
# the endpoint takes others or has never answered a 2xx (the event is all it
# was ever sent), ends dead after outbox.max_attempts (its
# last error quotes at most 256 bytes of the answer), without holding other
# keys; and an endpoint that answers 503 to every event is judged down
# without spending the events' attempts, while another endpoint of the same
# sink goes on at its usual pace. Once it answers again its events arrive,
# in order per key. A key's events for two endpoints (a route without a
# target) arrive in emit order while the first endpoint refuses.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use OutboxHttp;
use OutboxNode qw(outbox_node wait_until);

my $http = OutboxHttp->start();
$http->rules(fail_bodies => { poison => 500 });
my $node = outbox_node('http_refused',
	"outbox.max_attempts = 3\noutbox.backoff_min = '100ms'\noutbox.backoff_max = '2s'\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', $http->sink_sql('hooks'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('pa.*', 'hooks')});
my $log_start = -s $node->logfile;
my $status = sub {
	return $node->safe_psql('postgres',
		"SELECT status || ':' || attempts FROM outbox.events WHERE $_[0]");
};

# A new endpoint whose first and only request is refused: one event failing
# alone is that event's fault, not a sign the endpoint is down.
$node->safe_psql('postgres', q{SELECT outbox.emit('pa.fresh', '{"poison": "alone"}')});
ok(defined wait_until(sub { $status->(q{topic = 'pa.fresh'}) eq 'dead:3' }),
	'an event refused with 500 forever by an endpoint that never answered a 2xx is dead after max_attempts')
  or diag($node->safe_psql('postgres', 'SELECT topic, key, status, attempts, last_error FROM outbox.events'));
unlike(slurp_file($node->logfile, $log_start), qr/ is down \(/, 'that endpoint was not judged down');

$node->safe_psql('postgres', q{SELECT outbox.emit('pa.a', '{"warm": 1}'), outbox.emit('pa.b', '{"warm": 1}')});
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '2' }),
	'both endpoints take events first');

# The poison event, then others of its key and of other keys, one at a time.
$node->safe_psql('postgres', q{SELECT outbox.emit('pa.a', jsonb_build_object('poison', repeat('p', 600)), 'kp')});
for my $i (1 .. 15) {
	$node->safe_psql('postgres', qq{SELECT outbox.emit('pa.a', '{"i": $i}', 'k' || ($i % 3)),
		outbox.emit('pa.a', '{"after": $i}', 'kp')});
	usleep(200_000);
}
ok(defined wait_until(sub { $status->(q{topic = 'pa.a' AND payload ? 'poison'}) eq 'dead:3' }),
	'the event refused with 500 forever is dead after max_attempts')
  or diag($node->safe_psql('postgres', 'SELECT topic, key, status, attempts, last_error FROM outbox.events'));
my $error = $node->safe_psql('postgres', q{SELECT last_error FROM outbox.events WHERE topic = 'pa.a' AND payload ? 'poison'});
like($error, qr{^POST for target "pa\.a": HTTP 500: status 500 for }, 'its last error names the target and the answer, not the URL');
ok(length($error) < 256 + 100, 'at most 256 bytes of the answer are quoted');
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	  WHERE status = 'published' AND attempts = 0 AND (payload ? 'i' OR payload ? 'after')}) eq '30' }),
	'every other event of the endpoint, its key\'s next ones too, is published without a failed attempt')
  or diag($node->safe_psql('postgres', 'SELECT topic, key, status, attempts, last_error FROM outbox.events'));
my @after = map { $_->{body} =~ /"after": ?(\d+)/ ? $1 : () } $http->delivered;
is_deeply(\@after, [ 1 .. 15 ], 'the poison event\'s key keeps its order');
my $log = slurp_file($node->logfile, $log_start);
unlike($log, qr/ is down \(|sink "hooks" is unavailable/, 'neither the endpoint nor the sink was judged down');

# pa.b down (503 to all), pa.a goes on.
$http->rules(down_paths => { '/hooks/pa.b' => 503 });
$node->safe_psql('postgres', q{SELECT outbox.emit('pa.b', jsonb_build_object('b', i), 'kb' || (i % 2))
	FROM generate_series(1, 6) i});
# One at a time, each once the one before is published. The lag is the
# server's, from emit() to the acknowledgement (published_at): the test's
# psql calls, seconds on a loaded machine, are no part of it.
for my $i (1 .. 10) {
	$node->safe_psql('postgres', qq{SELECT outbox.emit('pa.a', '{"during": $i}', 'kd')});
	wait_until(sub { $status->(qq{payload->>'during' = '$i'}) eq 'published:0' }, 10);
}
my $worst = $node->safe_psql('postgres', q{SELECT max(extract(epoch FROM
	coalesce(published_at, clock_timestamp()) - created_at)) FROM outbox.events WHERE payload ? 'during'});
cmp_ok($worst, '<', 2.5, sprintf('while pa.b is down, pa.a\'s events are published promptly (worst %.2f s)', $worst));
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE payload ? 'b' AND status = 'published'}),
	'0', 'nothing of the down endpoint is published');
is($node->safe_psql('postgres', q{SELECT max(attempts) FROM outbox.events WHERE payload ? 'b'}),
	'0', 'the down endpoint\'s events spend no attempts');
like(slurp_file($node->logfile, $log_start), qr/the endpoint of POST for target "pa\.b" is down \(POST for target "pa\.b": HTTP 503/,
	'the log says the endpoint is down');
unlike($node->safe_psql('postgres', q{SELECT sinks FROM outbox.workers}), qr/hooks=down/,
	'the sink is not shown down');

$http->rules();
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE payload ? 'b' AND status = 'published'}) eq '6' }),
	'once it answers, the down endpoint\'s events arrive');
my @b = map { $_->{body} =~ /"b": ?(\d+)/ ? $1 : () } $http->delivered;
is_deeply([ grep { $_ % 2 } @b ], [ 1, 3, 5 ], 'in order per key (kb1)');
is_deeply([ grep { !($_ % 2) } @b ], [ 2, 4, 6 ], 'in order per key (kb0)');

# A route without a target sends a key's events to their own paths: the
# key's event for pa.e waits while its earlier one for pa.d is refused (503
# with Retry-After: the endpoint is down, no attempt is spent), and arrives
# after it.
$http->forget;
$http->rules(down_paths => { '/hooks/pa.d' => 503 }, retry_after => 1);
$node->safe_psql('postgres', q{BEGIN;
	SELECT outbox.emit('pa.d', '{"cross": 1}', 'kx');
	SELECT outbox.emit('pa.e', '{"cross": 2}', 'kx');
	COMMIT;});
ok(defined wait_until(sub { scalar grep { $_->{path} eq '/hooks/pa.d' } $http->received }),
	'the key\'s first event is refused at its endpoint');
sleep 1;
is(scalar(grep { $_->{path} eq '/hooks/pa.e' } $http->received), 0,
	'the key\'s event for another endpoint is not sent meanwhile');
$http->rules();
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE payload ? 'cross' AND status = 'published'}) eq '2' }),
	'both arrive once the endpoint answers');
my @cross = map { $_->{body} =~ /"cross": ?(\d+)/ ? $1 : () } $http->delivered;
is_deeply(\@cross, [ 1, 2 ], 'in emit order across the two endpoints');

$node->stop;
$http->stop;
done_testing();
