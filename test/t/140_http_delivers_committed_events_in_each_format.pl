# An HTTP sink posts exactly the committed events, in the shapes
# docs/formats.md describes, each signed as Standard Webhooks says, which
# the npm standardwebhooks package (not outbox's own code) verifies:
# - raw: the body is the payload; outbox-id, outbox-topic and outbox-key
#   (keyed events only) travel as headers beside webhook-id (the event id),
#   and user headers keep their names;
# - cloudevents, binary mode (ce- headers) and structured mode
#   (application/cloudevents+json), both read by the CloudEvents SDK's HTTP
#   binding;
# - a route without a target posts to the URL with the event's topic in its
#   path, a route with one to that target; a URL without {target} carries
#   the target in header outbox-target;
# - nothing of a rolled-back transaction or subtransaction arrives;
# - the secret comes from the server's environment ({"env": ...}) and is
#   never logged; outbox.workers shows the sink connected.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxHttp;
use OutboxNode qw(outbox_node wait_until);

my $http = OutboxHttp->start();

$ENV{OUTBOX_HTTP_SECRET} = $OutboxHttp::SECRET;
my $node = outbox_node('http_formats', "outbox.cloudevents_source = '/test/http'\n");
delete $ENV{OUTBOX_HTTP_SECRET};
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
my $secret = { env => 'OUTBOX_HTTP_SECRET' };
$node->safe_psql('postgres', $http->sink_sql('hooks', secret => $secret,
	headers => "X-Static: s1\nX-Team: orders"));
$node->safe_psql('postgres', $http->sink_sql('structured', secret => $secret,
	format => 'structured'));
$node->safe_psql('postgres', $http->sink_sql('plain', path => '/plain', secret => $secret));
$node->safe_psql('postgres', q{
	SELECT outbox.add_route('raw.*', 'hooks');
	SELECT outbox.add_route('ce.*', 'hooks', format => 'cloudevents');
	SELECT outbox.add_route('cs.*', 'structured', format => 'cloudevents');
	SELECT outbox.add_route('other.*', 'hooks', 'routed/x y');
	SELECT outbox.add_route('pl.*', 'plain');});

$node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox.emit('raw.order', '{"n": 1}', 'k1', '{"trace": "t1"}'),
	       outbox.emit('raw.order', '{"n": 2}');
	COMMIT;
	BEGIN; SELECT outbox.emit('raw.order', '{"n": "rolled back"}', 'k1'); ROLLBACK;
	BEGIN;
	SELECT outbox.emit('raw.order', '{"n": 3}', 'k1');
	SAVEPOINT s;
	SELECT outbox.emit('raw.order', '{"n": "subtransaction"}', 'k1');
	ROLLBACK TO SAVEPOINT s;
	COMMIT;
	SELECT outbox.emit('ce.order', '{"c": 1}', 'k2', '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "X-Other": "o"}');
	SELECT outbox.emit('cs.order', '{"s": 1}', 'k3');
	SELECT outbox.emit('other.thing', '{"o": 1}');
	SELECT outbox.emit('pl.thing', '{"p": 1}');});

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'published'}) eq '7' }),
	'the seven committed events are published')
  or diag($node->safe_psql('postgres', 'SELECT topic, status, attempts, last_error FROM outbox.events'));

my %id = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
	q{SELECT coalesce('n' || (payload->>'n'), 'c' || (payload->>'c'), 's' || (payload->>'s'),
	                  'o' || (payload->>'o'), 'p' || (payload->>'p')), id
	    FROM outbox.events});
my $json = JSON::PP->new->utf8(0);

my @got = $http->delivered;
is(scalar @got, 7, 'the receiver took seven requests, nothing rolled back');
my %by;    # n1, n2, ... => [ position, request ]
for my $i (0 .. $#got) {
	my $body = eval { $json->decode($got[$i]{body}) } // {};
	$body = $body->{data} if ref $body->{data} eq 'HASH';    # structured mode
	my ($name) = map { "$_$body->{$_}" } grep { defined $body->{$_} } qw(n c s o p);
	$by{ $name // '?' } = [ $i, $got[$i] ];
}
is_deeply([ sort keys %by ], [qw(c1 n1 n2 n3 o1 p1 s1)], 'the bodies are the payloads');
ok(defined $by{n1} && defined $by{n3} && $by{n1}[0] < $by{n3}[0], 'per key, in emit order');
is_deeply({ map { $_ => $by{$_}[1]{path} } keys %by }, {
		n1 => '/hooks/raw.order', n2 => '/hooks/raw.order', n3 => '/hooks/raw.order',
		c1 => '/hooks/ce.order', s1 => '/hooks/cs.order', o1 => '/hooks/routed/x%20y',
		p1 => '/plain' },
	'the path holds the topic, or the route target percent-encoded');
is($by{n1}[1]{method}, 'POST', 'webhooks are POSTed');

my %h = %{ $by{n1}[1]{headers} };
like(delete $h{'webhook-timestamp'}, qr/^\d{10}$/, 'webhook-timestamp is seconds since the epoch');
like(delete $h{'webhook-signature'}, qr/^v1,[A-Za-z0-9+\/]{43}=$/, 'webhook-signature is v1,<base64>');
delete @h{qw(host content-length user-agent accept)};
is_deeply(\%h, {
		'webhook-id' => $id{n1}, 'outbox-id' => $id{n1}, 'outbox-topic' => 'raw.order',
		'outbox-key' => 'k1', trace => 't1', 'content-type' => 'application/json',
		'x-static' => 's1', 'x-team' => 'orders' },
	'raw headers: webhook-id is the event id, outbox-id, -topic, -key, the user header, '
	  . 'the static ones');
ok(!exists $by{n2}[1]{headers}{'outbox-key'}, 'no outbox-key for an event without a key');
is($by{o1}[1]{headers}{'outbox-topic'}, 'other.thing', 'a routed event keeps its topic');
is($by{p1}[1]{headers}{'outbox-target'}, 'pl.thing',
	'a URL without {target} carries the target in outbox-target');

my %ce = %{ $by{c1}[1]{headers} };
is_deeply({ map { $_ => $ce{$_} } grep { /^ce-/ && $_ ne 'ce-time' } keys %ce }, {
		'ce-specversion' => '1.0', 'ce-id' => $id{c1}, 'ce-source' => '/test/http',
		'ce-type' => 'ce.order', 'ce-partitionkey' => 'k2',
		'ce-traceparent' => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
		'ce-outboxheaders' => '{"X-Other":"o"}' },
	'binary mode: the attributes as ce- headers');
is($by{s1}[1]{headers}{'content-type'}, 'application/cloudevents+json',
	'structured mode: application/cloudevents+json');

SKIP: {
	my $tools = OutboxHttp::node_tools();
	if (!$tools) {
		fail('npm standardwebhooks and cloudevents are installed (test/http/install_node_tools.sh)')
		  if $ENV{CI} || $ENV{OUTBOX_REQUIRE_TOOLS};
		skip 'npm standardwebhooks and cloudevents are not installed '
		  . '(test/http/install_node_tools.sh)', 4;
	}
	my @checked = $http->verified($OutboxHttp::SECRET);
	is(scalar(grep { $_->{signature} eq 'valid' } @checked), scalar @checked,
		'standardwebhooks verifies every signature')
	  or diag(explain(\@checked));
	my %ev = map { $_->{webhook_id} => $_ } @checked;
	my $c = $ev{ $id{c1} }{cloudevent} // {};
	is_deeply([ @$c{qw(id type source specversion partitionkey traceparent)}, $c->{data} ],
		[ $id{c1}, 'ce.order', '/test/http', '1.0', 'k2',
		  '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', { c => 1 } ],
		'the CloudEvents SDK reads the binary event')
	  or diag(explain($ev{ $id{c1} }));
	my $s = $ev{ $id{s1} }{cloudevent} // {};
	is_deeply([ @$s{qw(id type source partitionkey)}, $s->{data} ],
		[ $id{s1}, 'cs.order', '/test/http', 'k3', { s => 1 } ],
		'the CloudEvents SDK reads the structured event')
	  or diag(explain($ev{ $id{s1} }));
	# A body changed on the way no longer verifies (the check can fail).
	my $tampered = "$http->{dir}/tampered.jsonl";
	my $r = $by{n2}[1];
	$r->{body} =~ s/2/9/;
	open(my $fh, '>', $tampered) or die;
	print $fh JSON::PP->new->utf8(1)->encode($r), "\n";
	close $fh;
	my $save = $http->{dir};
	rename("$save/received.jsonl", "$save/kept.jsonl");
	rename($tampered, "$save/received.jsonl");
	my ($bad) = $http->verified($OutboxHttp::SECRET);
	like($bad->{signature}, qr/^invalid/, 'a changed body fails verification');
	rename("$save/kept.jsonl", "$save/received.jsonl");
}

like($node->safe_psql('postgres', q{SELECT sinks FROM outbox.workers}), qr/\bhooks=connected\b/,
	'outbox.workers shows the sink connected');
unlike(slurp_file($node->logfile), qr/AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA/,
	'the secret is never logged');

$node->stop;
$http->stop;
done_testing();
