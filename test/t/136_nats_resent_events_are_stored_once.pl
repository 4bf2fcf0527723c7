# Events sent again are stored once: outbox.replay() puts 200 published
# events back to pending, the publisher sends them again with the same event
# ids (Nats-Msg-Id), JetStream acknowledges each as a duplicate within its
# duplicate window (2 minutes by default) and stores nothing new, and outbox
# records them published. The stream keeps exactly the first copies, in
# order: exactly once into the stream within that window.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNats;
use OutboxNode qw(outbox_node wait_until);

my $nats = OutboxNats->start();
$nats->add_stream('RESENT', 'rs.>');
my $node = outbox_node('nats_resent');
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', $nats->sink_sql('nats'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('rs.*', 'nats')});
$node->safe_psql('postgres', q{
	SELECT outbox.emit('rs.order', jsonb_build_object('i', i), 'k' || (i % 7))
	  FROM generate_series(1, 200) i});
my $published = sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'});
};
ok(defined wait_until(sub { $published->() eq '200' }), 'the 200 events are published');
is($nats->count('RESENT'), 200, 'the stream holds 200 messages');
my @first = map { $_->{headers}{'outbox-id'} } $nats->messages('RESENT');

my $before = $node->safe_psql('postgres', q{SELECT max(published_at) FROM outbox.events});
is($node->safe_psql('postgres', q{SELECT outbox.replay(now() - interval '1 hour', 'rs.order')}), '200',
	'replay puts the 200 events back to pending');
ok(defined wait_until(sub {
	$node->safe_psql('postgres',
		qq{SELECT count(*) FROM outbox.events WHERE status = 'published' AND published_at > '$before'}) eq '200' }),
	'the publisher sends them again and records them published');
is($nats->count('RESENT'), 200, 'the stream still holds 200 messages: the re-sends were duplicates');
is_deeply([ map { $_->{headers}{'outbox-id'} } $nats->messages('RESENT') ], \@first,
	'the same messages, in the same order');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}), '0',
	'nothing is left pending or dead');

$node->stop;
$nats->stop;
done_testing();
