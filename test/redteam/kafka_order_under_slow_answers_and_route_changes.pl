# RED TEAM: steady keyed load on one Kafka sink while the broker's RTT moves
# around outbox.ack_wait (50 ms) and single Produce requests are refused
# (INVALID_RECORD), outbox.max_attempts = 1. Per key, first deliveries must be
# in emit order except for events named in a WARNING "will arrive after a
# later event of their key"; no published event may be missing at the broker.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep time);
use OutboxNode qw(outbox_node wait_until kafka_sink_sql);
use OutboxKafka;

my $seconds = $ENV{RED_SECONDS} // 25;
my $kafka = OutboxKafka->start(topics => ['o:4', 'p:2']);
my $node = outbox_node('red971', "outbox.ack_wait = '50ms'\noutbox.max_attempts = " . ($ENV{RED_MAXATT} // 1) . "\n" . ($ENV{RED_CONF} // ''));
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('kafka', $kafka->bootstrap,
	'message.timeout.ms' => '8000',
	'max.in.flight.requests.per.connection' => '1',
	($ENV{RED_BNM} ? ('batch.num.messages' => $ENV{RED_BNM}) : ())));
# one route without a target: topics o.* go to Kafka topics 'o.a' .. ; we
# use a targeted route for o.* and a targetless route for the second topic set
$node->safe_psql('postgres', q{SELECT outbox.add_route('o.*', 'kafka', 'o')});
$node->safe_psql('postgres', q{SELECT outbox.add_route('p.*', 'kafka', 'p')});

my $dir = PostgreSQL::Test::Utils::tempdir;
open my $fh, '>', "$dir/load.sql" or die $!;
print $fh "\\set k random(1, 16)\n\\set t random(1, 2)\n"
  . "SELECT outbox.emit(CASE WHEN :t = 1 THEN 'o.e' ELSE 'p.e' END, jsonb_build_object('k', :k), 'k' || :k);\n";
close $fh;
my ($out, $err) = ('', '');
my $load = IPC::Run::start(
	[ 'pgbench', '-n', '-h', $node->host, '-p', $node->port, '-c', '1',
	  '-R', 150, '-T', $seconds, '-f', "$dir/load.sql", 'postgres' ],
	'>', \$out, '2>', \$err);

my $log_offset = -s $node->logfile;
my @rtts = (0, 30, 45, 55, 70, 120, 250);
my $end = time() + $seconds;
my $i = 0;
while (time() < $end) {
	my $r = $rtts[ int(rand(@rtts)) ];
	$kafka->command_ok("rtt all $r");
	$kafka->command_ok('produce_errors 1 INVALID_RECORD') if rand() < 0.6;
	if ($ENV{RED_LEADER} && rand() < 0.2) {
		$kafka->command_ok('leader p ' . int(rand(2)) . ' -1');
		usleep(300_000);
		$kafka->command_ok('leader p 0 1');
		$kafka->command_ok('leader p 1 2');
	}
	if ($ENV{RED_CANCEL} && rand() < 0.15) {
		$node->safe_psql('postgres', q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE backend_type = 'outbox publisher'});
	}
	if ($ENV{RED_ROUTES} && rand() < 0.25) {
		my $r = rand() < 0.5 ? 'o.*' : 'p.*';
		if (rand() < 0.5) {
			$node->safe_psql('postgres', "SELECT outbox.pause('$r')");
			usleep(int(rand(400_000)));
			$node->safe_psql('postgres', "SELECT outbox.resume('$r')");
		} else {
			my $t = $r eq 'o.*' ? 'o' : 'p';
			$node->safe_psql('postgres', "SELECT outbox.remove_route('$r')");
			usleep(int(rand(400_000)));
			$node->safe_psql('postgres', "SELECT outbox.add_route('$r', 'kafka', '$t')");
		}
	}
	usleep(100_000 + int(rand(300_000)));
	$i++;
}
$load->finish;
$kafka->command_ok('rtt all 0');
$kafka->command_ok('clear_errors Produce');
$kafka->command_ok('leader p 0 1');
$kafka->command_ok('leader p 1 2');

ok(defined wait_until(sub { $node->safe_psql('postgres',
	q{SELECT count(*) FROM outbox.events WHERE status='pending'}) eq '0' }, 180), 'nothing pending')
  or diag $node->safe_psql('postgres', q{SELECT id, topic, key, attempts, next_attempt_at, last_error FROM outbox.events WHERE status='pending' ORDER BY id LIMIT 20});
note $node->safe_psql('postgres', q{SELECT status, count(*) FROM outbox.events GROUP BY 1});

my %pos;
my %status;
for (split /\n/, $node->safe_psql('postgres',
	q{SELECT id, row_number() OVER (ORDER BY id), status FROM outbox.events})) {
	my ($id, $n, $st) = split /\|/;
	$pos{$id} = $n;
	$status{$id} = $st;
}
my $npub = grep { $status{$_} eq 'published' } keys %status;
my $msgs = $kafka->consume(topics => ['o', 'p'], timeout_ms => 5000, until => sub {
	my %s = map { my ($id) = map { $_->[1] } grep { $_->[0] eq 'outbox-id' } @{ $_->{headers} }; defined $id ? ($id => 1) : () } @{ $_[0] };
	(grep { $status{$_} eq 'published' && !$s{$_} } keys %status) == 0 });
my $log = slurp_file($node->logfile, $log_offset);
my %warned;
while ($log =~ /will arrive after a later event of their key[^:\n]*: ([0-9a-f, .-]+)/g) {
	$warned{$_} = 1 for grep { /^[0-9a-f-]{36}$/ } split /,\s*/, $1;
}
note scalar(keys %warned) . " events named in overtaken WARNINGs";
my $ndead = grep { $status{$_} eq 'dead' } keys %status;
note "$ndead dead";
# per (topic, key): order of first deliveries
my (%seen, %last, @bad);
for my $m (sort { $a->{topic} cmp $b->{topic} || $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} } @$msgs) {
	my ($id) = map { $_->[1] } grep { $_->[0] eq 'outbox-id' } @{ $m->{headers} };
	next if !defined $id || $seen{$id}++;
	my $kk = "$m->{topic}/$m->{key}";
	my $n = $pos{$id};
	if (defined $last{$kk} && $n < $last{$kk}[0] && !$warned{$id}) {
		push @bad, "$kk: $id (#$n, $status{$id}) after $last{$kk}[1] (#$last{$kk}[0])";
	}
	$last{$kk} = [ $n, $id ] if !defined $last{$kk} || $n > $last{$kk}[0];
}
my @missing = grep { $status{$_} eq 'published' && !$seen{$_} } keys %status;
if (@missing) {
	my $all = $kafka->consume(topics => ['o', 'p', 'o.e', 'p.e'], count => $npub, timeout_ms => 5000, deadline => 60);
	my %where;
	for my $m (@$all) {
		my ($id) = map { $_->[1] } grep { $_->[0] eq 'outbox-id' } @{ $m->{headers} };
		push @{ $where{$id} }, "$m->{topic}/$m->{partition}\@$m->{offset}" if defined $id;
	}
	diag "missing $_ found at: " . join(' ', @{ $where{$_} || ['nowhere'] }) for @missing;
	for my $id (@missing) {
		diag $node->safe_psql('postgres', "SELECT topic, key, created_at, published_at FROM outbox.events WHERE id = '$id'");
		# neighbours of its key: where they are
		for my $n (split /\n/, $node->safe_psql('postgres', "SELECT id FROM outbox.events e WHERE (topic, key) = (SELECT topic, key FROM outbox.events WHERE id = '$id') ORDER BY abs(extract(epoch FROM created_at - (SELECT created_at FROM outbox.events WHERE id = '$id'))) LIMIT 5")) {
			diag "  neighbour $n at: " . join(' ', @{ $where{$n} || ['nowhere'] });
		}
	}
}
my @dead_arrived = grep { $status{$_} eq 'dead' && $seen{$_} } keys %status;
note "dead but at the broker: " . scalar(@dead_arrived);
is(scalar(@missing), 0, "every published event ($npub) is at the broker") or diag "missing: @missing[0..(@missing > 10 ? 9 : $#missing)]";
is(scalar(@bad), 0, 'per key, first deliveries in emit order or WARNING-named') or diag join("\n", @bad[0..(@bad > 20 ? 19 : $#bad)]);
if (@bad) {
	for my $b (@bad[0..(@bad > 5 ? 4 : $#bad)]) {
		my ($id) = $b =~ /: (\S+) /;
		diag $node->safe_psql('postgres', "SELECT id, status, attempts, published_at, last_error FROM outbox.events WHERE id = '$id'");
		diag join("\n", grep { index($_, $id) >= 0 } split /\n/, $log);
	}
}
$node->stop;
$kafka->stop;
done_testing();
