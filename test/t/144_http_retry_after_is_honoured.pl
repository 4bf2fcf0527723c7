# An HTTP endpoint's Retry-After is honoured: after a 503 asking for 3 s,
# the event is not sent again before 3 s have passed; a Retry-After longer
# than outbox.backoff_max (here an hour, with a 4 s maximum) waits the
# maximum, so an endpoint cannot park events for longer than the
# operator allows. Neither costs an attempt, though the event is the only
# one sent there: an endpoint asking to be left alone (429, Retry-After) is
# down, not the event at fault.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use OutboxHttp;
use OutboxNode qw(outbox_node wait_until);

my $http = OutboxHttp->start();
my $node = outbox_node('http_retry_after',
	"outbox.backoff_min = '100ms'\noutbox.backoff_max = '4s'\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', $http->sink_sql('hooks'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('ra.*', 'hooks')});

# Requests to one path, oldest first.
my $asked = sub { my ($path) = @_; return grep { $_->{path} eq $path } $http->received };

for my $case ([ 'ra.soon', 503, 3, 2.9, 4.5 ], [ 'ra.late', 429, 3600, 3.9, 5.5 ]) {
	my ($topic, $status, $after, $min, $max) = @$case;
	$http->rules(down_paths => { "/hooks/$topic" => $status }, retry_after => $after);
	$node->safe_psql('postgres', qq{SELECT outbox.emit('$topic', '{"t": 1}')});
	ok(defined wait_until(sub { $asked->("/hooks/$topic") >= 1 }), "$topic: the endpoint was asked");
	usleep(500_000);
	$http->rules();
	ok(defined wait_until(sub {
		$node->safe_psql('postgres', qq{SELECT status FROM outbox.events WHERE topic = '$topic'}) eq 'published' }),
		"$topic: published once the endpoint takes it");
	my @r = $asked->("/hooks/$topic");
	my $gap = $r[1]{at} - $r[0]{at};
	cmp_ok($gap, '>=', $min, sprintf('%s: after HTTP %d with Retry-After %s, the next try came %.2f s later', $topic, $status, $after, $gap));
	cmp_ok($gap, '<', $max, "$topic: and not later than backoff_max allows");
	is(scalar @r, 2, "$topic: one request refused, one taken");
	is($node->safe_psql('postgres', qq{SELECT attempts FROM outbox.events WHERE topic = '$topic'}), '0',
		"$topic: no attempt spent");
}

$node->stop;
$http->stop;
done_testing();
