# A transaction that emitted and PREPAREs while a publisher computes its
# claims' safe bound is claimed as soon as COMMIT PREPARED commits (issue 13,
# defect 9; red team). The bound lists pg_prepared_xacts, then reads the
# backends' first-emit times; PREPARE makes the transaction listed before its
# backend clears its time, so a publisher that listed just before and read
# just after saw it nowhere, its floor passed the event, and the event waited
# for the full scan (10 s). The bound now counts every prepared transaction
# outbox recorded in this database, listed or not (emit_horizon.cpp).
#
# The interleaving is made certain with gdb: the publisher is held at the
# entry of outbox::ReadEmitHorizon (after the listing) while the session that
# emitted 1.2 s earlier runs PREPARE TRANSACTION; then it goes on, commits
# its floor, and COMMIT PREPARED follows. Skipped without gdb.
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

plan skip_all => 'needs gdb' unless `which gdb` =~ /gdb/;
my $redis = OutboxRedis->start();
my $node = outbox_node('prepgdb', <<"EOF");
max_prepared_transactions = 5
outbox.poll_interval = '5s'
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', "SELECT outbox.create_sink('r', 'redis', '{\"port\": "
	  . $redis->port . ", \"mode\": \"list\"}')");
$node->safe_psql('postgres', q{SELECT outbox.add_route('*', 'r')});
$node->safe_psql('postgres', q{SELECT outbox.emit('warm', '{}')});
ok(defined wait_until(sub { $node->safe_psql('postgres',
	"SELECT count(*) FROM outbox.events WHERE status <> 'published'") eq '0' }, 30), 'warm-up');
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox publisher'");
note("publisher pid $pid");

my $dir = PostgreSQL::Test::Utils::tempdir();
my ($held, $go) = ("$dir/held", "$dir/go");
my $cmds = "$dir/gdb.cmds";
open my $f, '>', $cmds or die;
print $f <<"EOF";
set pagination off
set confirm off
break outbox::ReadEmitHorizon
continue
shell touch $held; while [ ! -f $go ]; do sleep 0.05; done
delete
detach
quit
EOF
close $f;

my $probe = $node->background_psql('postgres');
$probe->query_safe(q{BEGIN});
$probe->query_safe(q{SELECT outbox.emit('probe', '{"p": 1}', 'pk')});
usleep(1_200_000);    # the event is now older than the claims' 1 s margin

my $gdb = IPC::Run::start([ 'gdb', '-q', '-batch', '-p', $pid, '-x', $cmds ],
	'>', \my $gout, '2>', \my $gerr);
usleep(1_500_000);    # attached, breakpoint set
$node->safe_psql('postgres', 'SELECT outbox.wakeup()');    # start a cycle
my $stopped = wait_until(sub { -f $held }, 20);
ok(defined $stopped, 'publisher held at ReadEmitHorizon (after listing prepared transactions)')
  or diag("gdb: $gout $gerr");
$probe->query_safe(q{PREPARE TRANSACTION 'race'});
open my $g, '>', $go or die; close $g;
$gdb->finish;
note("gdb said: " . join(' | ', grep { /Breakpoint|ReadEmitHorizon|Detaching/ } split /\n/, $gout));
usleep(300_000);    # the held cycle commits its floor
my $t = time();
$probe->query_safe(q{COMMIT PREPARED 'race'});
$probe->quit;
my $state = sub { $node->safe_psql('postgres', "SELECT status FROM outbox.events WHERE topic = 'probe'") };
my $w = wait_until(sub { $state->() eq 'published' }, 30);
my $lat = defined $w ? time() - $t : undef;
note(sprintf('probe event published %s s after COMMIT PREPARED', defined $lat ? sprintf('%.2f', $lat) : '>30'));
ok(defined $lat && $lat < 1.5, sprintf('the committed prepared event is claimed within 1.5 s (took %s s)',
	defined $lat ? sprintf('%.2f', $lat) : '>30'));

# Control: the same sequence without holding the publisher.
my $c = $node->background_psql('postgres');
$c->query_safe(q{BEGIN});
$c->query_safe(q{SELECT outbox.emit('control', '{"p": 1}', 'ck')});
usleep(1_200_000);
$node->safe_psql('postgres', 'SELECT outbox.wakeup()');
usleep(200_000);
$c->query_safe(q{PREPARE TRANSACTION 'ctl'});
usleep(300_000);
$t = time();
$c->query_safe(q{COMMIT PREPARED 'ctl'});
$c->quit;
$w = wait_until(sub { $node->safe_psql('postgres', "SELECT status FROM outbox.events WHERE topic = 'control'") eq 'published' }, 30);
note(sprintf('control: published %.2f s after COMMIT PREPARED', time() - $t));
ok(defined $w && time() - $t < 1.5, 'control (no interleaving): claimed at once');

$node->stop;
$redis->stop;
done_testing();
