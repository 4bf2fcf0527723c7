# Per-key order at a RabbitMQ consumer while several sessions emit at once
# and two publishers (outbox.workers = 2) deliver: each session emits small
# transactions for keys of its own, with a per-key sequence number kept in
# the same transaction, some transactions rolled back on purpose. At the
# queue: every committed event exactly once (no fault, so no duplicate),
# nothing rolled back, and per key the sequence numbers in emit order.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use IPC::Run ();
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node wait_until pending_count);
use OutboxRabbit;

my $SESSIONS = 3;
my $TX = 150;         # committed transactions per session
my $PER_TX = 4;       # keyed events per transaction
my $KEYS = 8;         # keys per session

my $rabbit = OutboxRabbit->start();
$rabbit->declare_queue('order-q');
my $node = outbox_node('amqp_order', <<'EOF');
outbox.workers = 2
outbox.batch_size = 100
max_worker_processes = 16
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
my ($port, $user, $password) = ($rabbit->port, $rabbit->user, $rabbit->password);
$node->safe_psql('postgres', qq{
	SELECT outbox.create_sink('rabbit', 'amqp', '{"port": $port, "user": "$user", "password": "$password"}');
	SELECT outbox.add_route('ko.*', 'rabbit', 'order-q');});
$node->safe_psql('postgres', <<"EOF");
CREATE TABLE key_seq (key text PRIMARY KEY, seq int NOT NULL DEFAULT 0);
INSERT INTO key_seq SELECT format('s%s-k%s', s, k) FROM generate_series(0, $SESSIONS - 1) s,
                                                        generate_series(0, $KEYS - 1) k;
CREATE PROCEDURE emit_load(p_session int) LANGUAGE plpgsql AS \$\$
DECLARE
  k text;
  n int;
BEGIN
  FOR t IN 1..$TX LOOP
    IF t % 7 = 3 THEN
      -- Rolled back: none of it may ever arrive.
      PERFORM outbox.emit('ko.orders', jsonb_build_object('rolled_back', true),
                          format('s%s-k%s', p_session, t % $KEYS));
      ROLLBACK;
    END IF;
    FOR j IN 1..$PER_TX LOOP
      k := format('s%s-k%s', p_session, floor(random() * $KEYS)::int);
      UPDATE key_seq SET seq = seq + 1 WHERE key = k RETURNING seq INTO n;
      PERFORM outbox.emit('ko.orders', jsonb_build_object('k', k, 'seq', n), k);
    END LOOP;
    IF t % 3 = 0 THEN
      PERFORM outbox.emit('ko.orders', jsonb_build_object('s', p_session, 't', t));
    END IF;
    COMMIT;
  END LOOP;
END
\$\$;
EOF

my @emitters;
for my $s (0 .. $SESSIONS - 1) {
	push @emitters, IPC::Run::start(
		[ $node->installed_command('psql'), '-X', '-q', '-v', 'ON_ERROR_STOP=1',
		  '-d', $node->connstr('postgres'), OutboxNode::app_session_args(),
		  '-c', "CALL emit_load($s)" ],
		'<', \undef, '>', "$PostgreSQL::Test::Utils::log_path/emitter_$s.log", '2>&1');
}
my $failed = grep { !eval { $_->finish } } @emitters;
is($failed, 0, 'the emitting sessions finish');
my $committed = $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events});
is($committed, $SESSIONS * ($TX * $PER_TX + int($TX / 3)), 'every committed event is in outbox.events');
ok(defined wait_until(sub { pending_count($node) eq '0' }), 'everything is published');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}),
	'0', 'nothing is dead');

my $arrived = $rabbit->dump_queue('order-q');
my %ids = map { $_ => 1 } split /\n/, $node->safe_psql('postgres', q{SELECT id FROM outbox.events});
my (%seen, %last, @disorder, $rolled_back, $stray, $duplicates);
($rolled_back, $stray, $duplicates) = (0, 0, 0);
for my $m (@$arrived) {
	my $p = decode_json($m->{body});
	$rolled_back++ if $p->{rolled_back};
	$stray++ unless $ids{ $m->{message_id} };
	$duplicates++ if $seen{ $m->{message_id} }++;
	next unless defined $p->{k};
	push @disorder, "$p->{k}: $p->{seq} after $last{$p->{k}}"
	  if defined $last{ $p->{k} } && $p->{seq} <= $last{ $p->{k} };
	$last{ $p->{k} } = $p->{seq};
}
is(scalar @$arrived, $committed, 'as many messages arrived as committed');
is(scalar(keys %seen), $committed, 'every committed event arrived');
is($duplicates, 0, 'none twice');
is($rolled_back, 0, 'nothing of a rolled-back transaction arrived');
is($stray, 0, 'nothing that did not commit arrived');
is_deeply(\@disorder, [], 'per key, the sequence numbers arrive in emit order');
my $final = $node->safe_psql('postgres', q{SELECT string_agg(key || '=' || seq, ',' ORDER BY key) FROM key_seq});
is(join(',', map { "$_=$last{$_}" } sort keys %last), $final, 'and each key\'s last event arrived last');

$node->stop;
$rabbit->stop;
done_testing();
