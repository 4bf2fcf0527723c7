# Messages the NATS server refuses end dead after outbox.max_attempts,
# without holding other keys or topics, and without the sink ever being
# judged down:
# - too large: over the server's max_payload (8 kB here), which libnats
#   checks against what the server announced, so it is never sent;
# - no stream: a subject no JetStream stream captures ("no responders",
#   confirmed by asking JetStream which streams capture the subject).
# Meanwhile other keys of the same topics and other topics are published
# promptly, and the refused event's own key goes on once it is dead.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxNats;
use OutboxNode qw(outbox_node wait_until);

my $nats = OutboxNats->start(max_payload => 8192);
$nats->add_stream('REFUSING', 'rf.big,rf.ok');
my $node = outbox_node('nats_refused', "outbox.max_attempts = 3\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', $nats->sink_sql('nats'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('rf.*', 'nats')});
my $log_start = -s $node->logfile;

$node->safe_psql('postgres', q{
	SELECT outbox.emit('rf.big', jsonb_build_object('pad', repeat('x', 20000)), 'kb');
	SELECT outbox.emit('rf.big', '{"after": "big"}', 'kb');
	SELECT outbox.emit('rf.big', '{"other": "key"}', 'kc');
	SELECT outbox.emit('rf.none', '{"n": 1}', 'kn');
	SELECT outbox.emit('rf.none', '{"n": 2}', 'kn');
	SELECT outbox.emit('rf.ok', '{"ok": 1}', 'kb');
	SELECT outbox.emit('rf.ok', '{"ok": 2}');});

my $status = sub {
	my ($where) = @_;
	return $node->safe_psql('postgres',
		"SELECT status || ':' || attempts FROM outbox.events WHERE $where");
};
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	  WHERE status = 'published' AND (payload ? 'ok' OR payload ? 'other')}) eq '3' }, 30),
	'other keys of the topic and other topics are published while the refused events retry');
unlike($status->(q{payload ? 'pad'}), qr/^published/, 'the too-large event is not published');

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events
	  WHERE status = 'dead' AND (payload ? 'pad' OR payload->>'n' = '1')}) eq '2' }),
	'the refused events end dead')
  or diag($node->safe_psql('postgres', 'SELECT topic, key, status, attempts, last_error FROM outbox.events'));
is($status->(q{payload ? 'pad'}), 'dead:3', 'the too-large event died after max_attempts attempts');
like($node->safe_psql('postgres', q{SELECT last_error FROM outbox.events WHERE payload ? 'pad'}),
	qr/^too large for the server: Payload \d+ greater than maximum allowed: 8192$/,
	'its last error says it is too large, and how large');
is($status->(q{payload->>'n' = '1'}), 'dead:3', 'the event for an uncaptured subject died after max_attempts');
like($node->safe_psql('postgres', q{SELECT last_error FROM outbox.events WHERE payload->>'n' = '1'}),
	qr/no JetStream stream captures subject "rf\.none"/, 'its last error names the subject');

# Once dead, an event stops holding its key: the next one goes (rf.none's
# next one dies the same way, rf.big's is small enough).
ok(defined wait_until(sub { $status->(q{payload ? 'after'}) eq 'published:0' }),
	'the next event of the too-large one\'s key is published once that one is dead');
ok(defined wait_until(sub { $status->(q{payload->>'n' = '2'}) eq 'dead:3' }),
	'the next event for the uncaptured subject dies on its own attempts');

my @stored = $nats->messages('REFUSING');
is_deeply([ sort map { $_->{data} =~ /"(ok|other|after)"/ ? $1 : 'unexpected' } @stored ],
	[qw(after ok ok other)], 'the stream holds the four events it could take');
my $log = slurp_file($node->logfile, $log_start);
unlike($log, qr/sink "nats" is unavailable/, 'the sink is never judged down');
unlike($node->safe_psql('postgres', q{SELECT string_agg(sinks, '; ') FROM outbox.workers}),
	qr/nats=down/, 'outbox.workers does not show it down');

$node->stop;
$nats->stop;
done_testing();
