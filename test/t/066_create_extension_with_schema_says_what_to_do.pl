# CREATE EXTENSION outbox WITH SCHEMA x: outbox always makes its own schema,
# outbox, and PostgreSQL's own answer (the extension "must be installed in
# schema pg_catalog", where the control file records it) sends a DBA the
# wrong way. With outbox preloaded, the statement is refused first, saying
# what to do (SQLSTATE 0A000); nothing is created. (Where a schema outbox
# exists already, the install script says what to do: regression test
# "extension"; and an earlier version asked for with VERSION is refused
# first, since its script took such a schema over.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxNode qw(outbox_node);

my $node = outbox_node('create');
$node->safe_psql('postgres', 'CREATE SCHEMA elsewhere');

my ($rc, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION outbox WITH SCHEMA elsewhere',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($rc, 0, 'WITH SCHEMA is refused');
like($err, qr/ERROR:  0A000: outbox cannot be installed in a schema of your choice/, '... with 0A000');
like($err, qr/HINT:  Leave out WITH SCHEMA: CREATE EXTENSION outbox;/, '... saying what to do');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_extension WHERE extname = 'outbox'}),
	'0', 'nothing was created');

# An earlier version's install script took over a schema outbox someone
# else made (whose owner could plant code the script and views then ran as
# the installer): CREATE EXTENSION ... VERSION is refused while one exists.
$node->safe_psql('postgres', q{CREATE ROLE squatter; CREATE SCHEMA outbox AUTHORIZATION squatter;});
($rc, $out, $err) = $node->psql('postgres', q{CREATE EXTENSION outbox VERSION '0.1.0'},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  42P06: schema "outbox" already exists/, 'VERSION 0.1.0 over a schema outbox is refused');
like($err, qr/whatever version it installs/, '... whatever version');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_extension WHERE extname = 'outbox'}),
	'0', 'nothing was created');
$node->safe_psql('postgres', 'DROP SCHEMA outbox');

$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}),
	'0.3.0', 'the plain statement installs it');
$node->stop;
done_testing();
