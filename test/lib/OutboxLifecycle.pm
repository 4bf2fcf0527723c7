# Helpers for the launcher and lifecycle tests (t/043, t/044, t/045, t/047):
# a quiet persistent psql session that survives the server going away, a
# sampler of the launcher and the publishers (pg_stat_activity and
# outbox.workers in one statement), a watch loop that samples while a test
# waits for something, and reading a Redis stream back for
# OutboxFaults::reconcile.
#
# Why a persistent session: the tests sample the publishers many times a
# second for several seconds to catch a duplicate that may live only briefly;
# a psql process per sample would load the (shared, 2-core) machine more than
# the server under test. PostgreSQL::Test::BackgroundPsql notes every query
# in the regress log (hundreds of samples) and dies when the server does, so
# this one is its own: query() returns undef on any error, timeout or lost
# connection, and the next query reconnects.
package OutboxLifecycle;

use strict;
use warnings;
use Carp;
use Exporter 'import';
use IPC::Run ();
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT_OK = qw(session sample watch redis_stream_fetch fmt_sample);

sub session { return OutboxLifecycle::Session->new(@_) }

# One sample of the server's outbox processes:
#   launchers  [pids] of backend_type 'outbox launcher'
#   publishers [pids] of backend_type 'outbox publisher' (any database: a
#              duplicate shows here even when outbox.workers cannot tell it
#              from the original, whose statistics record it shares)
#   places     { pid => publisher index } from outbox.workers for $db
#   t          when it was taken
# undef while the server does not answer. $db: the database whose
# outbox.workers is read (it must have the extension); $session: an
# OutboxLifecycle::Session on any database with the extension.
sub sample {
	my ($session, $db) = @_;
	$db //= 'postgres';
	my $out = $session->query(qq{
		SELECT coalesce((SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
		                  WHERE backend_type = 'outbox launcher'), '')
		       || ';' ||
		       coalesce((SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
		                  WHERE backend_type = 'outbox publisher'), '')
		       || ';' ||
		       coalesce((SELECT string_agg(pid || ':' || publisher, ',' ORDER BY publisher, pid)
		                   FROM outbox.workers WHERE database = '$db'), '')});
	return undef unless defined $out && $out =~ /^([\d,]*);([\d,]*);([\d:,]*)$/;
	my ($l, $p, $w) = ($1, $2, $3);
	return {
		t => time(),
		launchers => [ grep { length } split /,/, $l ],
		publishers => [ grep { length } split /,/, $p ],
		places => { map { split /:/ } grep { length } split /,/, $w },
	};
}

sub fmt_sample {
	my ($s) = @_;
	return 'no answer' unless $s;
	return sprintf('launcher %s; publishers %s; outbox.workers %s',
		join(',', @{ $s->{launchers} }) || 'none', join(',', @{ $s->{publishers} }) || 'none',
		join(',', map { "$_=>$s->{places}{$_}" } sort keys %{ $s->{places} }) || 'none');
}

# watch(session => $s, db => 'postgres', secs => 12, until => sub { my ($sample) = @_; ... },
#       min_secs => 0, each => sub { my ($sample) = @_; ... })
# Samples back to back for at most `secs` seconds; stops early once `until`
# returned true and at least `min_secs` passed. Returns a summary:
#   samples, answered     how many were taken, and how many the server answered
#   max_publishers        the most publishers seen at once
#   max_launchers         the most launchers seen at once
#   dup_index             a sample (formatted) where two rows of outbox.workers
#                         had one index, or undef
#   max_launcher_gap      the longest stretch (s) with no launcher, between
#                         answered samples
#   until_at              seconds from the start until `until` held (undef: never)
#   first, last           the first and last answered samples
#   worst                 an answered sample with max_publishers publishers
sub watch {
	my (%o) = @_;
	my $start = time();
	my %r = (samples => 0, answered => 0, max_publishers => 0, max_launchers => 0,
		max_launcher_gap => 0, dup_index => undef, until_at => undef);
	my $no_launcher_since;
	while (1) {
		my $s = sample($o{session}, $o{db});
		$r{samples}++;
		if ($s) {
			$r{answered}++;
			$r{first} //= $s;
			$r{last} = $s;
			my $np = @{ $s->{publishers} };
			if ($np > $r{max_publishers} || !$r{worst}) {
				$r{max_publishers} = $np if $np > $r{max_publishers};
				$r{worst} = $s;
			}
			$r{max_launchers} = @{ $s->{launchers} } if @{ $s->{launchers} } > $r{max_launchers};
			my %seen;
			if (!$r{dup_index} && grep { $seen{$_}++ } values %{ $s->{places} }) {
				$r{dup_index} = fmt_sample($s);
			}
			if (@{ $s->{launchers} }) {
				undef $no_launcher_since;
			}
			else {
				$no_launcher_since //= $s->{t};
				my $gap = $s->{t} - $no_launcher_since;
				$r{max_launcher_gap} = $gap if $gap > $r{max_launcher_gap};
			}
			$o{each}->($s) if $o{each};
			$r{until_at} //= $s->{t} - $start if $o{until} && $o{until}->($s);
		}
		my $elapsed = time() - $start;
		last if $elapsed >= $o{secs};
		last if defined $r{until_at} && $elapsed >= ($o{min_secs} // 0);
		usleep(10_000);
	}
	$r{took} = time() - $start;
	return \%r;
}

# The entries of a Redis stream written by the Redis sink (XADD <stream> *
# id <id> topic <topic> key <key> payload <json> headers <json>) as
# OutboxFaults::reconcile wants them.
sub redis_stream_fetch {
	my ($redis, $stream) = @_;
	my @lines = split /\n/, $redis->cli('XRANGE', $stream, '-', '+'), -1;
	my @out;
	for (my $i = 0; $i + 10 < @lines; $i += 11) {
		croak "unexpected XRANGE output at line $i: @lines[$i .. $i + 3]"
		  unless $lines[ $i + 1 ] eq 'id' && $lines[ $i + 7 ] eq 'payload';
		push @out, { id => $lines[ $i + 2 ], value => $lines[ $i + 8 ], lane => $stream, pos => scalar @out };
	}
	return \@out;
}

# --- a quiet persistent psql session --------------------------------------------

package OutboxLifecycle::Session;

use strict;
use warnings;
use IPC::Run ();
use Time::HiRes qw(time);

# A query that has not answered after this long counts as lost (the session
# reconnects for the next one). Only a hang guard: generous, since on a loaded
# machine a query may well take seconds.
my $TIMEOUT = 60;

sub new {
	my ($class, $node, $db) = @_;
	return bless { node => $node, db => $db // 'postgres', n => 0 }, $class;
}

sub _connect {
	my ($self) = @_;
	$self->close;
	@$self{qw(in out err)} = ('', '', '');
	$self->{timer} = IPC::Run::timeout($TIMEOUT);
	$self->{h} = eval {
		IPC::Run::start(
			[ $self->{node}->installed_command('psql'), '-X', '-A', '-t', '-q',
			  '-v', 'ON_ERROR_STOP=0',
			  # Hundreds of samples stay out of the server log (log_statement = all).
			  '-d', $self->{node}->connstr($self->{db}) . " options='-c log_statement=none'" ],
			'<', \$self->{in}, '>', \$self->{out}, '2>', \$self->{err}, $self->{timer});
	};
	return defined $self->{h};
}

# The query's output (trimmed), or undef on error, timeout or lost connection.
sub query {
	my ($self, $sql) = @_;
	return undef unless $self->{h} || $self->_connect;
	my $banner = 'outbox_lifecycle_done_' . ++$self->{n};
	@$self{qw(out err)} = ('', '');
	$self->{in} .= "$sql\n;\n\\echo $banner\n";
	$self->{timer}->start($TIMEOUT);
	my $ok = eval {
		$self->{h}->pump until $self->{out} =~ /^$banner$/m;
		1;
	};
	if (!$ok || $self->{timer}->is_expired) {
		$self->close;
		return undef;
	}
	my $out = $self->{out};
	$out =~ s/^$banner\n?//m;
	chomp $out;
	return undef if $self->{err} =~ /\S/;
	return $out;
}

sub close {
	my ($self) = @_;
	if ($self->{h}) {
		eval { $self->{h}->kill_kill(grace => 1) };
		delete $self->{h};
	}
	return;
}

sub DESTROY {
	local ($@, $!, $?);
	$_[0]->close;
}

1;
