# The publisher's ready claim starts from a remembered floor instead of the
# head of the index (so it never walks events published since a long
# transaction took its snapshot). An event whose transaction emitted early
# and committed late (plain or two-phase) sits below events published long
# before it: it must still go out within a second or two of its commit, not
# at the next periodic full scan (every 10 s).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql pending_count);

my $kafka = OutboxKafka->start();
$kafka->command('create_topic late 1');
my $node = outbox_node('late', "max_prepared_transactions = 5\ntrack_commit_timestamp = on");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
$node->safe_psql('postgres', q{SELECT outbox.add_route('late.*', 'kafka', 'late')});

sub flows_for {
	my ($seconds, $label) = @_;
	my $end = time() + $seconds;
	my $i = 0;
	while (time() < $end) {
		$node->safe_psql('postgres',
			"SELECT outbox.emit('late.other', jsonb_build_object('i', $i, 'l', '$label'))");
		$i++;
	}
	return $i;
}

for my $case ('plain', 'prepared') {
	my $tx = $node->background_psql('postgres');
	$tx->query_safe('BEGIN');
	$tx->query_safe(qq{SELECT outbox.emit('late.early', '{"case": "$case"}')});
	my $xid = $tx->query_safe('SELECT pg_current_xact_id()::xid');
	$tx->query_safe("PREPARE TRANSACTION 'late_$case'") if $case eq 'prepared';

	# Meanwhile later events flow and are published: the floor moves on.
	my $n = flows_for(3, $case);
	ok(defined wait_until(sub {
		pending_count($node, 'postgres', q{topic = 'late.other'}) eq '0' }),
		"$case: $n later events published while the early one is uncommitted");

	if ($case eq 'prepared') {
		$tx->quit;
		$node->safe_psql('postgres', "COMMIT PREPARED 'late_$case'");
	} else {
		$tx->query_safe('COMMIT');
		$tx->quit;
	}
	# From its commit (pg_xact_commit_timestamp) to its publication
	# (published_at, after the broker acknowledged), by the server's clock:
	# how long the test takes to look is no part of it.
	ok(defined wait_until(sub { pending_count($node, 'postgres', q{topic = 'late.early'}) eq '0' }),
		"$case: the early event is published");
	my $took = $node->safe_psql('postgres', qq{
		SELECT extract(epoch FROM published_at - pg_xact_commit_timestamp('$xid'::xid))
		  FROM outbox.events WHERE topic = 'late.early' AND payload->>'case' = '$case'});
	ok($took ne '' && $took < 3,
		sprintf("$case: the early event is published %.2f s after its late commit", $took || -1));
}

# Read again (a read ends once nothing came for a while) until both are there.
my $early = sub { scalar(grep { $_->{value} =~ /"case"/ } @{ $_[0] }) };
is($early->($kafka->consume(topics => ['late'], timeout_ms => 5000, until => sub { $early->($_[0]) >= 2 })),
	2, 'both early events arrived');

$node->stop;
$kafka->stop;
done_testing();
