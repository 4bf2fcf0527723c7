# nats-server down for 15 s while four sessions emit: emit() keeps working,
# the events wait (pending, without using their attempts), outbox.workers
# shows the sink down, and once the server is back every event is delivered,
# once, per key in emit order.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxNats;
use OutboxNode qw(wait_until);
use OutboxFaults qw(fault_node new_load backlog);

my $OUTAGE = 15;
my $nats = OutboxNats->start();
$nats->add_stream('OUTAGE', 'no.>');
my $node = fault_node('nats_outage', conf => "outbox.max_attempts = 3\n");
$node->safe_psql('postgres', $nats->sink_sql('nats', ack_timeout_ms => 2000));
$node->safe_psql('postgres', q{SELECT outbox.add_route('no.*', 'nats')});

my $load = new_load(node => $node, sessions => 4, keys => 20, per_tx => 3, sleep_ms => 20,
	topic => 'no.outage');
my $suite = OutboxFaults::new_suite(node => $node, load => $load, sink => 'nats', prefix => 'no',
	publishers => 2, scenarios => ['outage'], fetch => \&fetch);
$suite->start;

sub fetch {
	my ($topic) = @_;
	return [ map { { id => $_->{headers}{'outbox-id'}, value => $_->{data}, lane => $_->{subject},
				pos => $_->{seq} } } grep { $_->{subject} eq $topic } $nats->messages('OUTAGE') ];
}

my $sinks = sub { $node->safe_psql('postgres', q{SELECT string_agg(sinks, '; ') FROM outbox.workers}) };
my $r = $suite->run('outage',
	fault => "nats-server down for $OUTAGE s",
	lose_nothing => "nothing is lost when nats-server is down for $OUTAGE s while emit() goes on",
	inject => sub {
		my ($topic) = @_;
		my $p0 = $load->progress;
		$nats->stop;
		my $t = time();
		ok(defined wait_until(sub { $sinks->() =~ /\bnats=down\b/ }, 10),
			'outbox.workers shows the sink down') or diag($sinks->());
		usleep(200_000) while time() - $t < $OUTAGE;
		my $waiting = backlog($node, topic => $topic);
		cmp_ok($waiting, '>', 0, "events wait while the server is down ($waiting pending)");
		cmp_ok($load->progress, '>', $p0, 'emit() keeps working meanwhile');
		is($node->safe_psql('postgres',
			qq{SELECT count(*) FROM outbox.events WHERE topic = '$topic' AND status = 'dead'}), '0',
			'no event dies of the outage (the sink is down, not the events at fault)');
		like($sinks->(), qr/\bnats=down\b/, "the sink is still shown down after $OUTAGE s");
		$nats->start_again;
		return { injections => 1, end => time(),
			detail => "$OUTAGE s down, $waiting events pending at the end" };
	});
is($r->{duplicates}, 0, 'each event is stored once');
ok(defined wait_until(sub { $sinks->() =~ /\bnats=connected\b/ }), 'the sink is shown connected again');
$suite->finish;

$node->stop;
$nats->stop;
done_testing();
