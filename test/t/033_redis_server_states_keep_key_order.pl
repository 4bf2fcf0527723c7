# Per-key order at Redis when a batch's pipeline meets a passing state of the
# server: BUSY while another client's Lua script runs past
# busy-reply-threshold (lowered to 20 ms here; the default 5 s does the
# same). Redis answers BUSY to every command it reads while the script runs
# and applies the ones it reads after; when one pipeline held several events
# of a key, the first was refused and the later ones applied (the consumer
# got 1, 2, ... before 0). The sink now sends a key's next event
# only after the reply to the one before it, and not at all when that one
# failed (redis_sink.cpp).
#
# Each round: 8 events of one key in a prepared transaction, a 200 ms script,
# COMMIT PREPARED at a random moment inside it; 20 rounds
# (OUTBOX_TEST_ROUNDS). Per key the first deliveries follow emit order.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until);

my $ATTEMPTS = $ENV{OUTBOX_TEST_ROUNDS} // 20;
my $N = 8;
my $redis = OutboxRedis->start();
$redis->cli('CONFIG', 'SET', 'busy-reply-threshold', '20');
my $node = outbox_node('busy', <<"EOF");
max_prepared_transactions = 5
outbox.max_attempts = 100
outbox.batch_size = 100
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', "SELECT outbox.create_sink('r', 'redis', '{\"port\": "
	  . $redis->port . ", \"mode\": \"stream\"}')");
$node->safe_psql('postgres', q{SELECT outbox.add_route('busy', 'r')});
$node->safe_psql('postgres', q{SELECT outbox.emit('busy', '{"warm":1}', 'warm')});
my $unpub = sub { $node->safe_psql('postgres',
	"SELECT count(*) FROM outbox.events WHERE status <> 'published'") };
ok(defined wait_until(sub { $unpub->() eq '0' }), 'warm-up delivered');

my $script = q{local t0=redis.call('TIME'); while true do local t=redis.call('TIME'); if (t[1]-t0[1])*1000000+(t[2]-t0[2]) > tonumber(ARGV[1]) then break end end return 1};
my $violations = 0;
for my $a (1 .. $ATTEMPTS) {
	my $key = "k$a";
	# The events, emitted now, made visible by COMMIT PREPARED at the right moment.
	$node->safe_psql('postgres', qq{
BEGIN;
DO \$\$ BEGIN
  FOR i IN 0 .. $N - 1 LOOP
    PERFORM outbox.emit('busy', jsonb_build_object('seq', i, 'pad', repeat('x', 100000)), '$key');
  END LOOP;
END \$\$;
PREPARE TRANSACTION 'w$a';});
	my $h = IPC::Run::start([ 'redis-cli', '-p', $redis->port, 'EVAL', $script, '0', '200000' ],
		'>', \my $o, '2>', \my $e);
	usleep(int(150_000 + rand(70_000)));
	$node->safe_psql('postgres', "COMMIT PREPARED 'w$a'");
	$h->finish;
	wait_until(sub { $node->safe_psql('postgres',
		"SELECT count(*) FROM outbox.events WHERE key = '$key' AND status <> 'published'") eq '0' });
}
ok(defined wait_until(sub { $unpub->() eq '0' }), 'everything published');

# First deliveries per key, in stream order.
my @lines = split /\n/, $redis->cli('XRANGE', 'busy', '-', '+');
my (%first, %seen, %entry);
for my $line (@lines, '0-0') {
	if ($line =~ /^\d+-\d+$/) {
		if (defined $entry{key} && ($entry{payload} // '') =~ /"seq": ?(\d+)/) {
			push @{ $first{ $entry{key} } }, $1 unless $seen{"$entry{key}/$1"}++;
		}
		%entry = (_field => undef);
		next;
	}
	if (defined $entry{_field}) { $entry{ delete $entry{_field} } = $line; }
	else { $entry{_field} = $line; }
}
for my $key (sort keys %first) {
	next if $key eq 'warm';
	my @f = @{ $first{$key} };
	my $bad = grep { $f[$_] < $f[ $_ - 1 ] } 1 .. $#f;
	if ($bad) {
		$violations++;
		my $db = $node->safe_psql('postgres', "SELECT string_agg(payload->>'seq' || ':' || attempts, ' ' ORDER BY id) FROM outbox.events WHERE key = '$key'");
		diag("key $key: first deliveries @f  (database seq:attempts: $db)");
	}
}
my $log = slurp_file($node->logfile);
my @busy = $log =~ /(.*BUSY.*)/g;
note('server log lines mentioning BUSY: ' . scalar(@busy));
note($_) for @busy[0 .. ($#busy < 3 ? $#busy : 3)];
is($violations, 0, "no key's first deliveries out of emit order ($ATTEMPTS attempts)");

$node->stop;
$redis->stop;
done_testing();
