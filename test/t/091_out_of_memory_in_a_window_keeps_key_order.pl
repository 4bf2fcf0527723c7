# Out of memory (std::bad_alloc) inside the dispatcher while batches of one
# key are in flight keeps per-key order: an earlier build dropped the
# failing batch and went on with the window, so the next batch's events of
# the key were sent first. Now the whole window is given up and the cycle
# aborts (its events stay pending, the order state is rebuilt).
#
# Needs the fault injection build; its "oom" action at a C++ point throws
# std::bad_alloc. Events 0..5 of one key in one transaction, made visible by
# COMMIT PREPARED 1.3 s after emit, batch_size 1, batches_in_flight 4: the
# first window carries 4 batches of the key.
# (a) bad_alloc in the first Begin of the window;
# (b) bad_alloc in a Finish, at random, a few times, over several windows.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql set_faults);

my $kafka = OutboxKafka->start(topics => [ 'oa:1', 'ob:1' ]);
my $node = outbox_node('oomwin', q{
outbox.poll_interval = '10s'
max_prepared_transactions = 5
outbox.batch_size = 1
outbox.batches_in_flight = 4
outbox.max_attempts = 100
}, fault_injection => 1);
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('k', $kafka->bootstrap));
$node->safe_psql('postgres', q{SELECT outbox.add_route('o*', 'k')});
for my $t ('oa', 'ob') {
	$node->safe_psql('postgres', "SELECT outbox.emit('$t', '{\"warm\":1}', 'warm')");
}
my $unpub = sub { $node->safe_psql('postgres',
	"SELECT count(*) FROM outbox.events WHERE status <> 'published'" . ($_[0] ? " AND topic = '$_[0]'" : '')) };
ok(defined wait_until(sub { $unpub->() eq '0' }), 'warm-up');

sub emit_window {
	my ($topic, $key, $n) = @_;
	$node->safe_psql('postgres', qq{
BEGIN;
DO \$\$ BEGIN
  FOR i IN 0 .. $n - 1 LOOP
    PERFORM outbox.emit('$topic', jsonb_build_object('seq', i), '$key');
  END LOOP;
END \$\$;
PREPARE TRANSACTION 'w_$key';});
	usleep(1_300_000);
	$node->safe_psql('postgres', "COMMIT PREPARED 'w_$key'");
}

# Per key, the seqs of the first deliveries in arrival order. Read again (a
# read ends once nothing came for a while) until each of @$keys has all $n,
# or the deadline passes.
sub first_deliveries {
	my ($topic, $keys, $n) = @_;
	my $first = sub {
		my (%first, %seen);
		for my $m (sort { $a->{offset} <=> $b->{offset} } @{ $_[0] }) {
			next unless defined $m->{key} && $m->{value} =~ /"seq": ?(\d+)/;
			push @{ $first{ $m->{key} } }, $1 unless $seen{"$m->{key}/$1"}++;
		}
		return \%first;
	};
	my $msgs = $kafka->consume(topics => [$topic], timeout_ms => 2000, until => sub {
		my $f = $first->($_[0]);
		return !grep { @{ $f->{$_} || [] } < $n } @$keys;
	});
	return $first->($msgs);
}

# (a) bad_alloc in the first Begin of the window.
set_faults($node, 'dispatch.begin=oom#1');
emit_window('oa', 'ka', 6);
ok(defined wait_until(sub { $unpub->('oa') eq '0' }), '(a) all published');
set_faults($node, '');
my $f = first_deliveries('oa', ['ka'], 6)->{ka} || [];
is(scalar @$f, 6, '(a) all 6 events of key ka arrived');
note("(a) first deliveries of key ka: @$f");
ok(!grep({ $f->[$_] < $f->[ $_ - 1 ] } 1 .. $#$f), '(a) first deliveries follow emit order')
  or diag("(a) first deliveries: @$f");

# (b) bad_alloc in FinishFront, at random (1 in 2), over several windows.
set_faults($node, 'dispatch.finish=oom/2#6');
for my $w (1 .. 8) { emit_window('ob', "kb$w", 6); }
ok(defined wait_until(sub { $unpub->('ob') eq '0' }), '(b) all published');
set_faults($node, '');
my $all = first_deliveries('ob', [ map { "kb$_" } 1 .. 8 ], 6);
my $bad = 0;
for my $k (sort keys %$all) {
	next if $k eq 'warm';
	my $s = $all->{$k};
	if (grep { $s->[$_] < $s->[ $_ - 1 ] } 1 .. $#$s) { $bad++; diag("(b) key $k first deliveries: @$s"); }
}
my $injected = () = slurp_file($node->logfile) =~ /out of memory/g;
note("(b) log lines mentioning out of memory: $injected");
is($bad, 0, '(b) no key out of emit order');

$node->stop;
$kafka->stop;
done_testing();
