# Per-key order at an HTTP sink while four sessions emit at once (small
# transactions of keyed and keyless events, some rolled back on purpose:
# OutboxFaults.pm's load) and two publishers share the key slots: every
# committed event is posted once, nothing rolled back arrives, and per key
# the receiver gets the events in emit order. The sink keeps one request
# in flight per endpoint and key, with many keys in parallel: the receiver
# answers each request after 20 ms, and the load still drains.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxHttp;
use OutboxFaults qw(fault_node new_load);

my $http = OutboxHttp->start();
$http->rules(delay_ms => 20);
my $node = fault_node('http_order');
$node->safe_psql('postgres', $http->sink_sql('hooks'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('ho.*', 'hooks')});

my $load = new_load(node => $node, sessions => 4, keys => 20, per_tx => 3, sleep_ms => 10,
	topic => 'ho.steady');
my $suite = OutboxFaults::new_suite(node => $node, load => $load, sink => 'hooks', prefix => 'ho',
	publishers => 2, scenarios => ['steady'], fetch => sub { $http->deliveries("/hooks/$_[0]") });
$suite->start;


my $r = $suite->run('steady',
	fault => 'none: four sessions emitting at once, a receiver answering in 20 ms',
	lose_nothing => 'every committed event arrives while four sessions emit at once',
	inject => sub {
		usleep(6_000_000);
		return { injections => 0, end => time(), detail => '6 s of load, two publishers' };
	});
is($r->{duplicates}, 0, 'each event is posted once');
cmp_ok($r->{committed}, '>', 200, "a real load ($r->{committed} events)");

# Many keys in parallel: requests overlapped in time at the receiver.
my @got = sort { $a->{at} <=> $b->{at} } $http->delivered;
my $overlaps = grep { $got[$_]{at} - $got[ $_ - 1 ]{at} < 0.015 } 1 .. $#got;
cmp_ok($overlaps, '>', 10, "requests of different keys overlap ($overlaps answered within 15 ms of another)");
$suite->finish;

$node->stop;
$http->stop;
done_testing();
