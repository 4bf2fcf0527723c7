# A create_sink() that fails leaves no secret of its options in the server
# log. PostgreSQL logs the statement of an ERROR (log_min_error_statement =
# error, the default), so a refused sink's password used to land in the log
# with its STATEMENT line. Outbox's errors from create_sink(), and those of
# the statements it runs, now carry no statement.
#
# Proves: for a create_sink() refused for an invalid option, for a duplicate
# name and by a role that may not manage sinks, the server log holds the
# error and not the password. (log_statement = all writes every statement
# before it runs, create_sink()'s too: the test turns it off, as a DBA who
# logs statements must know; docs/security.md says so.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node);

my $node = outbox_node('secrets', '');
$node->safe_psql('postgres', q{
CREATE EXTENSION outbox;
CREATE ROLE app LOGIN;
-- EXECUTE granted, so that the refusal is outbox's own (PostgreSQL's refusal
-- of EXECUTE comes before the function runs and logs its statement).
GRANT EXECUTE ON FUNCTION outbox.create_sink(text, text, jsonb) TO app;
SELECT outbox.create_sink('taken', 'redis', '{"port": 6379}');
ALTER SYSTEM SET log_statement = 'none';
SELECT pg_reload_conf();});

my %calls = (
	'an invalid option' =>
	  [ 'postgres', q{SELECT outbox.create_sink('bad', 'redis', '{"password": "Pw-1nvalid-0pt", "prot": 1}')} ],
	'a duplicate name' =>
	  [ 'postgres', q{SELECT outbox.create_sink('taken', 'redis', '{"password": "Pw-dup1icate-nam3"}')} ],
	'a role that may run it but not manage sinks' =>
	  [ 'app', q{SELECT outbox.create_sink('mine', 'redis', '{"password": "Pw-n0t-a110wed"}')} ],
);
for my $what (sort keys %calls) {
	my ($role, $sql) = @{ $calls{$what} };
	my ($secret) = $sql =~ /"password": "([^"]+)"/;
	my $offset = -s $node->logfile;
	my ($ret, $out, $err) = $node->psql('postgres', $sql, extra_params => [ '-U', $role ]);
	isnt($ret, 0, "$what: create_sink() fails");
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/ERROR:/, "$what: the error is logged");
	unlike($log, qr/\Q$secret\E/, "$what: the password is not");
}
$node->stop;
done_testing();
