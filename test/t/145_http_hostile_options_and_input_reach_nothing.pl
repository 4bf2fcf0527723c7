# Hostile options and input at an HTTP sink reach nothing they aim at:
# - create_sink refuses file:// and gopher:// URLs, a CA given as a file
#   name, and a static webhook-signature header (22023);
# - a receiver's redirect to file:// is not followed, even with
#   follow_redirects on: the event is not published and no file's content
#   shows anywhere; without follow_redirects a redirect is not followed at all;
# - an event whose topic is ".." (a route without a target sends to the
#   topic) is never sent, and ends dead naming its target;
# - a user header whose value holds CR LF (to add a header of its own) and
#   a user header named webhook-signature are never sent: those events end
#   dead naming the header, and the receiver gets no forged header; nor is
#   an event's header named like one of the sink's static headers (its
#   credentials, say);
# - a token in the URL never reaches last_error, outbox.workers (which
#   monitoring roles read) or the log: errors name the target, not the URL;
# - the other events of the same sink are delivered meanwhile.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;
use OutboxHttp;
use OutboxNode qw(outbox_node wait_until);

my $http = OutboxHttp->start();
my $node = outbox_node('http_hostile',
	"outbox.max_attempts = 2\noutbox.backoff_min = '100ms'\noutbox.backoff_max = '1s'\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');

for my $case (
	[ 'file://', { url => 'file:///etc/passwd' }, qr/option "url" must start with http/ ],
	[ 'gopher://', { url => 'gopher://127.0.0.1:70/_x' }, qr/option "url" must start with http/ ],
	[ 'a CA file name', { url => 'https://h/', tls_ca => '/etc/ssl/private/key.pem' }, qr/option "tls_ca" must be PEM text/ ],
	[ 'a static forged signature', { url => 'http://h/', headers => 'webhook-signature: v1,AAAA' },
		qr/option "headers" must not set header webhook-signature/ ],
	[ 'a CRLF in a static header', { url => 'http://h/', headers => "X-A: a\r" }, qr/option "headers"/ ])
{
	my ($what, $options, $error) = @$case;
	my $json = JSON::PP->new->canonical->encode($options);
	my ($ret, $stdout, $stderr) = $node->psql('postgres',
		"SELECT outbox.create_sink('bad', 'http', \$\$$json\$\$)");
	like($stderr, qr/invalid options for http sink "bad": .*/, "create_sink refuses $what");
	like($stderr, $error, "naming the option ($what)");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.sinks}), '0', 'no sink was made');

$node->safe_psql('postgres', $http->sink_sql('hooks', headers => 'X-Api-Key: owner-key'));
$node->safe_psql('postgres', $http->sink_sql('tokened', path => '/tok/{target}?token=s3cr3tTOKEN'));
# The server logs every statement here (the token is in create_sink's own
# text, as docs/security.md says of secrets): what the sink logs comes later.
my $log_start = -s $node->logfile;
$node->safe_psql('postgres', $http->sink_sql('follows', path => '/redirect/{target}',
	follow_redirects => 'true'));
$node->safe_psql('postgres', $http->sink_sql('stays', path => '/redirect/{target}'));
$node->safe_psql('postgres', q{
	SELECT outbox.add_route('ok.*', 'hooks');
	SELECT outbox.add_route('..', 'hooks');
	SELECT outbox.add_route('rd.follow', 'follows');
	SELECT outbox.add_route('rd.stay', 'stays');
	SELECT outbox.add_route('tk.*', 'tokened');});
$http->rules(down_paths => { '/redirect/rd.follow' => 302, '/redirect/rd.stay' => 302, '/tok/tk.a' => 500 },
	location => 'file:///etc/passwd');

$node->safe_psql('postgres', q{
	SELECT outbox.emit('..', '{"dots": 1}');
	SELECT outbox.emit('ok.crlf', '{"crlf": 1}', 'k', jsonb_build_object('X-Evil', E'a\r\nwebhook-signature: v1,forged'));
	SELECT outbox.emit('ok.forged', '{"forged": 1}', 'k2', '{"webhook-signature": "v1,forged"}');
	SELECT outbox.emit('ok.forged', '{"ceforged": 1}', NULL, '{"CE-Type": "evil"}');
	SELECT outbox.emit('ok.fine', '{"fine": 1}', 'k');
	SELECT outbox.emit('ok.key', '{"apikey": 1}', NULL, '{"x-api-key": "emitters-key"}');
	SELECT outbox.emit('tk.a', '{"token": 1}');
	SELECT outbox.emit('rd.follow', '{"follow": 1}');
	SELECT outbox.emit('rd.stay', '{"stay": 1}');});

my $row = sub {
	my ($field) = @_;
	return $node->safe_psql('postgres',
		"SELECT status || ':' || attempts || ':' || coalesce(last_error, '') FROM outbox.events WHERE payload ? '$field'");
};
ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM outbox.events WHERE status = 'dead'}) eq '7' }),
	'the hostile events end dead, and so do the events refused alone with 500 and 302')
  or diag($node->safe_psql('postgres', 'SELECT topic, status, attempts, last_error FROM outbox.events'));
like($row->('dots'), qr/^dead:2:its target cannot be sent to: .*"\.\."/, 'topic ".." is never a target');
like($row->('crlf'), qr/^dead:2:its header "X-Evil" has a value with CR, LF or NUL/, 'a CRLF header value is refused by name');
like($row->('forged'), qr/^dead:2:its header "webhook-signature" is reserved/, 'a forged webhook-signature is refused by name');
like($row->('ceforged'), qr/^dead:2:its header "CE-Type" is reserved/, 'a ce- header is refused by name');
like($row->('apikey'), qr/^dead:2:its header "x-api-key" is one the sink sets/, 'an event cannot add a static header of the sink');
like($row->('fine'), qr/^published:0:/, 'the key\'s next event is published once the refused one is dead');

ok(defined wait_until(sub {
	scalar(grep { $_->{path} eq '/redirect/rd.follow' } $http->received) >= 2
	  && scalar(grep { $_->{path} eq '/redirect/rd.stay' } $http->received) >= 2 }),
	'the redirecting endpoints were asked, and asked again');
like($row->('follow'), qr/^pending:0:POST for target "rd\.follow": .*(Protocol|protocol|scheme)/i,
	'a redirect to file:// is refused by libcurl, not followed; the event waits')
  or diag($row->('follow'));
like($row->('stay'), qr/^(pending:[01]|dead:2):POST for target "rd\.stay": HTTP 302/,
	'without follow_redirects a redirect is not followed (an attempt of the event: it alone is redirected)');
ok(defined wait_until(sub { $row->('token') =~ /HTTP 500/ }), 'the tokened endpoint refused its event');
my $everything = $node->safe_psql('postgres', q{SELECT string_agg(coalesce(last_error, ''), ' ') FROM outbox.events})
  . $node->safe_psql('postgres', q{SELECT string_agg(coalesce(last_error, ''), ' ') FROM outbox.workers})
  . slurp_file($node->logfile, $log_start);
unlike($everything, qr/root:/, 'no file content reached an error or the log');
unlike($everything, qr/s3cr3tTOKEN/, 'the URL\'s token reached no error, outbox.workers or the log');

my @got = $http->received;
is_deeply([ sort map { $_->{path} } grep { $_->{path} !~ m{^/(redirect|tok)/} } @got ], ['/hooks/ok.fine'],
	'the receiver got nothing of the hostile events, nothing at / or /hooks/..');
ok(!grep({ ($_->{headers}{'webhook-signature'} // '') =~ /forged/ || exists $_->{headers}{'x-evil'} } @got),
	'no forged header arrived');

$node->stop;
$http->stop;
done_testing();
