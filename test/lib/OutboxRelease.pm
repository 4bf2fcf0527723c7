# Nodes that run a real earlier release of outbox, for the update tests: a
# private copy of this machine's PostgreSQL tree (bin, lib, share), with
# outbox as a release built it installed into it (test/lib/releases.sh
# staged each one; test/run_all.sh sets OUTBOX_RELEASES_DIR). Installing
# another release into the same tree and restarting is what an operator's
# upgrade does: the server's files change under the data directory.
package OutboxRelease;

use strict;
use warnings;
use Exporter 'import';
use File::Path qw(make_path);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT_OK = qw(release_tree install_release release_node releases_available
  RELEASE_0_1_0 RELEASE_0_2_0);

# The commits the released versions were built from.
use constant RELEASE_0_1_0 => '34385b2';
use constant RELEASE_0_2_0 => '17f5436';

sub releases_available {
	my $dir = $ENV{OUTBOX_RELEASES_DIR};
	return
	     defined $dir
	  && -f "$dir/" . RELEASE_0_1_0 . '/.staged'
	  && -f "$dir/" . RELEASE_0_2_0 . '/.staged'
	  && -d "$dir/current";
}

# Copy $from into $to, recursively, keeping modes (and symbolic links as
# links).
sub copy_tree {
	my ($from, $to) = @_;
	make_path($to);
	system('cp', '-a', "$from/.", "$to/") == 0
	  or die "cp -a $from $to failed";
	return;
}

# A private copy of the PostgreSQL tree the tests run against; returns its
# root. PostgreSQL finds its share directory relative to its binaries, so
# the copy runs as the original does.
sub release_tree {
	my ($name) = @_;
	my $bindir = `pg_config --bindir`;
	my $sharedir = `pg_config --sharedir`;
	chomp($bindir, $sharedir);
	(my $prefix = $bindir) =~ s{/bin$}{};
	my $root = "${PostgreSQL::Test::Utils::tmp_check}/tree_$name";
	copy_tree($prefix, "$root$prefix");
	copy_tree($sharedir, "$root$sharedir");
	return { root => $root, install_path => "$root$prefix" };
}

# Install a staged release ('34385b2', '17f5436' or 'current') into the
# tree, over whatever outbox it held: its library, control files and SQL
# scripts (releases.sh stages them as lib/ and extension/). A release's
# scripts stay where a later one has none of that name, as with a package
# upgrade.
sub install_release {
	my ($tree, $which) = @_;
	my $stage = "$ENV{OUTBOX_RELEASES_DIR}/$which";
	die "release $which is not staged in $ENV{OUTBOX_RELEASES_DIR}"
	  unless -d "$stage/lib" && (-f "$stage/.staged" || $which eq 'current');
	my $pg_config = "$tree->{install_path}/bin/pg_config";
	my $pkglibdir = `$pg_config --pkglibdir`;
	my $sharedir = `$pg_config --sharedir`;
	chomp($pkglibdir, $sharedir);
	die "$pg_config names no directories" unless $pkglibdir ne '' && $sharedir ne '';
	copy_tree("$stage/lib", $pkglibdir);
	copy_tree("$stage/extension", "$sharedir/extension");
	return;
}

# A node of the tree, outbox preloaded, not started.
sub release_node {
	my ($name, $tree, $extra_conf) = @_;
	my $node =
	  PostgreSQL::Test::Cluster->new($name, install_path => $tree->{install_path});
	$node->init;
	$node->append_conf('postgresql.conf', <<"EOF");
shared_preload_libraries = 'outbox'
outbox.poll_interval = '200ms'
outbox.backoff_min = '50ms'
outbox.backoff_max = '1s'
log_min_messages = 'info'
EOF
	$node->append_conf('postgresql.conf', $extra_conf) if defined $extra_conf;
	return $node;
}

1;
