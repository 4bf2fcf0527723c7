# A transaction that emitted and PREPAREs while a publisher computes its
# claims' safe bound is claimed as soon as COMMIT PREPARED commits. The bound
# lists pg_prepared_xacts, then reads the backends' first-emit times; PREPARE
# makes the transaction listed before its backend clears its time, so a
# publisher that listed just before and read just after saw it nowhere, its
# floor passed the event, and the event waited for the full scan (10 s). The
# bound now counts every prepared transaction outbox recorded in this
# database, listed or not (emit_horizon.cpp).
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
track_commit_timestamp = on
EOF
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', "SELECT outbox.create_sink('r', 'redis', '{\"port\": "
	  . $redis->port . ", \"mode\": \"list\"}')");
$node->safe_psql('postgres', q{SELECT outbox.add_route('*', 'r')});
$node->safe_psql('postgres', q{SELECT outbox.emit('warm', '{}')});
ok(defined wait_until(sub { $node->safe_psql('postgres',
	"SELECT count(*) FROM outbox.events WHERE status <> 'published'") eq '0' }), 'warm-up');
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox publisher'");
note("publisher pid $pid");

my $dir = PostgreSQL::Test::Utils::tempdir();
my ($attached, $held, $go) = ("$dir/attached", "$dir/held", "$dir/go");
my $cmds = "$dir/gdb.cmds";
open my $f, '>', $cmds or die;
print $f <<"EOF";
set pagination off
set confirm off
break outbox::ReadEmitHorizon
shell touch $attached
continue
shell touch $held; while [ ! -f $go ]; do sleep 0.05; done
delete
detach
quit
EOF
close $f;

# Seconds from the commit of transaction $xid to the publication of the event
# of $topic (published_at, after Redis acknowledged), by the server's clock:
# how long the test takes to look is no part of it. undef if it is not
# published within 30 s.
sub latency {
	my ($topic, $xid) = @_;
	return undef unless defined wait_until(sub {
		$node->safe_psql('postgres', "SELECT status FROM outbox.events WHERE topic = '$topic'") eq 'published' }, 30);
	return $node->safe_psql('postgres', qq{SELECT extract(epoch FROM published_at
		- pg_xact_commit_timestamp('$xid'::xid)) FROM outbox.events WHERE topic = '$topic'});
}

my $probe = $node->background_psql('postgres');
$probe->query_safe(q{BEGIN});
$probe->query_safe(q{SELECT outbox.emit('probe', '{"p": 1}', 'pk')});
my $probe_xid = $probe->query_safe('SELECT pg_current_xact_id()::xid');
usleep(1_200_000);    # the event is now older than the claims' 1 s margin

my $gdb = IPC::Run::start([ 'gdb', '-q', '-batch', '-p', $pid, '-x', $cmds ],
	'>', \my $gout, '2>', \my $gerr);
# Attached, breakpoint set (gdb may take seconds on a loaded machine).
ok(defined wait_until(sub { -f $attached }), 'gdb attached to the publisher and set its breakpoint')
  or diag("gdb: $gout $gerr");
$node->safe_psql('postgres', 'SELECT outbox.wakeup()');    # start a cycle
my $stopped = wait_until(sub { -f $held });
ok(defined $stopped, 'publisher held at ReadEmitHorizon (after listing prepared transactions)')
  or diag("gdb: $gout $gerr");
$probe->query_safe(q{PREPARE TRANSACTION 'race'});
open my $g, '>', $go or die; close $g;
$gdb->finish;
note("gdb said: " . join(' | ', grep { /Breakpoint|ReadEmitHorizon|Detaching/ } split /\n/, $gout));
usleep(300_000);    # the held cycle commits its floor
$probe->query_safe(q{COMMIT PREPARED 'race'});
$probe->quit;
my $lat = latency('probe', $probe_xid);
note(sprintf('probe event published %s s after COMMIT PREPARED', defined $lat ? sprintf('%.2f', $lat) : '>30'));
ok(defined $lat && $lat < 1.5, sprintf('the committed prepared event is claimed within 1.5 s (took %s s)',
	defined $lat ? sprintf('%.2f', $lat) : '>30'));

# Control: the same sequence without holding the publisher.
my $c = $node->background_psql('postgres');
$c->query_safe(q{BEGIN});
$c->query_safe(q{SELECT outbox.emit('control', '{"p": 1}', 'ck')});
my $control_xid = $c->query_safe('SELECT pg_current_xact_id()::xid');
usleep(1_200_000);
$node->safe_psql('postgres', 'SELECT outbox.wakeup()');
usleep(200_000);
$c->query_safe(q{PREPARE TRANSACTION 'ctl'});
usleep(300_000);
$c->query_safe(q{COMMIT PREPARED 'ctl'});
$c->quit;
my $control = latency('control', $control_xid);
note(sprintf('control: published %s s after COMMIT PREPARED', defined $control ? sprintf('%.2f', $control) : '>30'));
ok(defined $control && $control < 1.5, 'control (no interleaving): claimed at once');

$node->stop;
$redis->stop;
done_testing();
