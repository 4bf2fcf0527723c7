# An HTTP sink posts over TLS, checking the receiver's certificate against
# the CA given inline in tls_ca, and speaks HTTP/2 where the receiver offers
# it (ALPN): many keys' requests go at once as streams of a few kept-alive
# connections, one request in flight per key, each key's events in emit
# order. A sink trusting another CA refuses the same receiver: its events
# wait without spending attempts (no answer could be had: the endpoint is
# down), say why in last_error, and never hold up the first sink; once its
# tls_ca is mended they arrive. tls_verify "false" skips the check.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP ();
use OutboxHttp;
use OutboxNode qw(outbox_node wait_until);

my $https = OutboxHttp->start_tls();
my $node = outbox_node('http_tls', "outbox.backoff_min = '100ms'\noutbox.backoff_max = '1s'\n");
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
my $sql = sub {
	my ($name, %options) = @_;
	my $json = JSON::PP->new->canonical->encode(
		{ url => $https->url('/hooks/{target}'), max_connections => '4', %options });
	$json =~ s/'/''/g;
	return "SELECT outbox.create_sink('$name', 'http', '$json')";
};
$node->safe_psql('postgres', $sql->('trusted', tls_ca => $https->ca_pem));
$node->safe_psql('postgres', $sql->('untrusted', tls_ca => $https->other_ca_pem));
$node->safe_psql('postgres', q{SELECT outbox.add_route('tls.ok.*', 'trusted'),
	outbox.add_route('tls.bad.*', 'untrusted')});

my $count = sub {
	return $node->safe_psql('postgres', "SELECT count(*) FROM outbox.events WHERE $_[0]");
};
# 12 keys, 8 events each, all committed at once: the sink has 12 keys to
# send in parallel and 8 rounds of one request per key.
$node->safe_psql('postgres', q{SELECT outbox.emit('tls.bad.a', jsonb_build_object('bad', i), 'kb')
	FROM generate_series(1, 3) i});
$node->safe_psql('postgres', q{SELECT outbox.emit('tls.ok.a', jsonb_build_object('k', i % 12, 'n', i / 12),
	'k' || (i % 12)) FROM generate_series(0, 95) i});
ok(defined wait_until(sub { $count->(q{topic = 'tls.ok.a' AND status = 'published'}) eq '96' }),
	'the sink trusting the receiver\'s CA publishes every event over TLS')
  or diag($node->safe_psql('postgres', 'SELECT topic, status, attempts, last_error FROM outbox.events LIMIT 5'));

my @got = grep { $_->{path} eq '/hooks/tls.ok.a' } $https->received;
is(scalar(@got), 96, 'the receiver got each event once');
is_deeply([ sort { $a cmp $b } keys %{ { map { $_->{version} => 1 } @got } } ], ['2.0'],
	'every request went over HTTP/2');
my %connections = map { $_->{connection} => 1 } @got;
cmp_ok(scalar(keys %connections), '<=', 4, 'over at most max_connections kept-alive connections ('
	  . scalar(keys %connections) . ')');
my ($most) = sort { $b <=> $a } map { $_->{concurrent} } @got;
cmp_ok($most, '>', 1, "with requests of different keys open at once on one connection (up to $most)");
my %order;
for my $r (@got) {
	my ($k, $n) = $r->{body} =~ /"k": ?(\d+), ?"n": ?(\d+)/ or next;
	push @{ $order{$k} }, $n;
}
is(scalar(grep { join(',', @{ $order{$_} }) eq '0,1,2,3,4,5,6,7' } keys %order), 12,
	'each key\'s events arrived in emit order');

ok(defined wait_until(sub {
	$node->safe_psql('postgres', q{SELECT last_error FROM outbox.events WHERE topic = 'tls.bad.a' LIMIT 1})
	  =~ /certificate/i }),
	'the sink trusting another CA says the certificate is refused');
is($count->(q{topic = 'tls.bad.a' AND status = 'pending' AND attempts = 0}), '3',
	'its events wait without spending attempts');
is(scalar(grep { $_->{path} eq '/hooks/tls.bad.a' } $https->received), 0, 'and none reached the receiver');
unlike($node->safe_psql('postgres', q{SELECT string_agg(last_error, ' ') FROM outbox.events
	WHERE topic = 'tls.bad.a'}), qr/BEGIN CERTIFICATE/, 'the PEM text is not quoted in the error');

my $mended = JSON::PP->new->canonical->encode({ url => $https->url('/hooks/{target}'), tls_ca => $https->ca_pem });
$mended =~ s/'/''/g;
$node->safe_psql('postgres', "UPDATE outbox.sinks SET options = '$mended' WHERE name = 'untrusted'");
ok(defined wait_until(sub { $count->(q{topic = 'tls.bad.a' AND status = 'published'}) eq '3' }),
	'once it trusts the right CA, its events arrive');

$node->safe_psql('postgres', $sql->('unchecked', tls_verify => 'false'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('tls.any.*', 'unchecked')});
$node->safe_psql('postgres', q{SELECT outbox.emit('tls.any.a', '{"any": 1}')});
ok(defined wait_until(sub { $count->(q{topic = 'tls.any.a' AND status = 'published'}) eq '1' }),
	'tls_verify "false" posts without checking the certificate');

$node->stop;
$https->stop;
done_testing();
