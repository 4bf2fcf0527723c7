# Nothing is published from a hot standby; after promotion, the new primary
# publishes whatever is pending.
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
$kafka->command('create_topic failover 1');
my $primary = outbox_node('primary', undef, allows_streaming => 1);
$primary->safe_psql('postgres', 'CREATE EXTENSION outbox');
$primary->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap));
$primary->safe_psql('postgres', q{SELECT outbox.add_route('failover.*', 'kafka', 'failover')});
$primary->safe_psql('postgres', q{SELECT outbox.emit('failover.test', '{"n": 1}')});
ok(defined wait_until(sub { pending_count($primary) eq '0' }), 'the primary publishes');

$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;

# Events the primary cannot deliver (its brokers are down) reach the standby.
$kafka->command('down all');
$primary->safe_psql('postgres', q{
	SELECT outbox.emit('failover.test', jsonb_build_object('n', n)) FROM generate_series(2, 11) n;});
$primary->wait_for_catchup($standby);
is(pending_count($standby), '10', 'the standby has the pending events');
sleep 2;
is($standby->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'outbox%'}),
	'0', 'no launcher and no publisher run on a hot standby');

$primary->stop('immediate');
$kafka->command('up all');
$standby->promote;
ok(defined wait_until(sub { pending_count($standby) eq '0' }), 'after promotion the pending events are published');
# Read again (a read ends once nothing came for a while) until all 11 are there.
my $numbers = sub { my %n = map { ($_->{value} =~ /(\d+)/)[0] => 1 } @{ $_[0] }; \%n };
my $got = $kafka->consume(topics => ['failover'], timeout_ms => 5000,
	until => sub { my $n = $numbers->($_[0]); !grep { !$n->{$_} } 1 .. 11 });
my %n = %{ $numbers->($got) };
is(scalar(grep { $n{$_} } 1 .. 11), 11, 'every event arrived (duplicates allowed)');

$standby->stop;
$kafka->stop;
done_testing();
