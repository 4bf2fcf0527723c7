# Any login role could stop publishing in any database with statements that
# PostgreSQL then refuses: the ProcessUtility hook
# paused a database's publishers for 15 s before DROP DATABASE, CREATE
# DATABASE ... TEMPLATE, ALTER DATABASE ... RENAME / SET TABLESPACE ran,
# that is before PostgreSQL's permission checks. Now only a statement that
# will pass those checks steps the publishers aside (database_guard.cpp).
#
# A role with no privilege (mallory) runs each refused statement; an event
# emitted right after is published within 2 s. Then a sustained attack; then
# the database's owner drops it for real, which must still work.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until kafka_sink_sql);

my $kafka = OutboxKafka->start(topics => ['shopev:1']);
my $node = outbox_node('dropdb', '');
$node->safe_psql('postgres', 'CREATE DATABASE shop');
$node->safe_psql('shop', 'CREATE EXTENSION outbox');
$node->safe_psql('shop', kafka_sink_sql('k', $kafka->bootstrap));
$node->safe_psql('shop', q{SELECT outbox.add_route('shopev', 'k')});
$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE');

sub unpublished {
	return $node->safe_psql('shop',
		"SELECT count(*) FROM outbox.events WHERE status <> 'published'");
}
# Time from the commit of one emitted event until it is published, by the
# server's clock (emit() to published_at, after the broker acknowledged): how
# long the test takes to look is no part of it. undef if it is not published
# within 40 s.
sub latency {
	my $id = $node->safe_psql('shop', q{SELECT outbox.emit('shopev', '{"a":1}', 'k')});
	my $w = wait_until(sub { unpublished() eq '0' }, 40);
	return undef unless defined $w;
	return $node->safe_psql('shop',
		"SELECT extract(epoch FROM published_at - created_at) FROM outbox.events WHERE id = '$id'");
}

my $base = latency();
ok(defined $base && $base < 2, sprintf('baseline: published in %.2f s', $base // -1));

for my $stmt ('DROP DATABASE shop', 'CREATE DATABASE x TEMPLATE shop',
	'ALTER DATABASE shop RENAME TO y', 'BEGIN; DROP DATABASE IF EXISTS shop')
{
	my $t = time();
	my ($rc, $out, $err) = $node->psql('postgres', $stmt, extra_params => [ '-U', 'mallory' ]);
	note(sprintf("mallory: %s -> rc %d, %s (%.2f s)", $stmt, $rc, $err =~ s/\n/ /gr, time() - $t));
	like($err, qr/must be owner|permission denied|cannot run inside a transaction block/,
		"refused: $stmt");
	my $l = latency();
	ok(defined $l && $l < 2,
		sprintf('after the refused "%s" an event is published within 2 s (took %s s)', $stmt,
			defined $l ? sprintf('%.2f', $l) : '>40'));
}

# A sustained attack: one refused statement every 5 s, events every 0.5 s
# (the old build paused the publishers for 15 s at each).
my $t0 = time();
my $h = IPC::Run::start([ 'bash', '-c',
	'for i in 1 2 3; do psql -X -h ' . $node->host . ' -p ' . $node->port
	  . ' -U mallory -d postgres -c "DROP DATABASE shop" 2>/dev/null; sleep 5; done' ]);
my ($emitted, $max_lag) = (0, 0);
while (time() - $t0 < 15) {
	$node->safe_psql('shop', q{SELECT outbox.emit('shopev', '{"b":1}', 'k2')});
	$emitted++;
	my $lag = $node->safe_psql('shop',
		"SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) FROM outbox.events WHERE status = 'pending'");
	$max_lag = $lag if $lag > $max_lag;
	usleep(500_000);
}
$h->finish;
note(sprintf('sustained: %d events emitted over 15 s, oldest pending event reached %.1f s', $emitted, $max_lag));
ok($max_lag < 2, sprintf('sustained refused DROP DATABASE: no event waits over 2 s (max %.1f s)', $max_lag));
my $log = slurp_file($node->logfile);
my $exits = () = $log =~ /outbox.*(paus|publisher.*exit)/gi;
note("server log lines about pausing/exiting publishers: $exits");

# The database's owner (untrusted too) with CREATEDB: statements PostgreSQL
# refuses for other reasons than rights do not pause publishing either.
$node->safe_psql('postgres', 'ALTER DATABASE shop OWNER TO mallory');
$node->safe_psql('postgres', 'ALTER ROLE mallory CREATEDB');
my $app = $node->background_psql('shop');    # a session using the database
for my $stmt ('ALTER DATABASE shop RENAME TO postgres', 'ALTER DATABASE shop SET TABLESPACE nosuch',
	'DROP DATABASE shop',
	'ALTER DATABASE shop RENAME TO shop2', 'CREATE DATABASE postgres TEMPLATE shop',
	q{DO $$ BEGIN EXECUTE 'DROP DATABASE shop'; END $$})
{
	my ($rc, $out, $err) = $node->psql('postgres', $stmt, extra_params => [ '-U', 'mallory' ]);
	isnt($rc, 0, "the owner's \"$stmt\" is refused") or diag($out);
	my $l = latency();
	ok(defined $l && $l < 2,
		sprintf('after the owner\'s refused "%s" an event is published within 2 s (took %s s)', $stmt,
			defined $l ? sprintf('%.2f', $l) : '>40'));
}
$app->quit;

# A statement that will pass PostgreSQL's checks still steps the publishers
# aside, and works: the owner drops the database.
my ($rc) = $node->psql('postgres', 'DROP DATABASE shop', extra_params => [ '-U', 'mallory' ]);
is($rc, 0, "the owner's DROP DATABASE of a database with the extension succeeds");

$node->stop;
$kafka->stop;
done_testing();
