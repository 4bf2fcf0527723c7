# A throwaway redis-server for TAP tests: started on a free loopback port in
# a directory of its own (append-only file on, so a restart keeps the data),
# queried with redis-cli.
package OutboxRedis;

use strict;
use warnings;
use OutboxMemoryDir qw(memory_tempdir);
use OutboxPorts;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time usleep);

# Every server started and not yet stopped. The END block below stops them
# before File::Temp's own END removes their directories (END blocks run last
# defined first): stopping from DESTROY alone at global destruction found the
# pid file gone and left redis-server running after the test.
my %running;

sub start {
	my ($class, %opts) = @_;
	my $self = bless {
		port => OutboxPorts::free_port(),
		password => $opts{password},
		# Its append-only file is fsynced at every write: in memory
		# (OutboxMemoryDir says why).
		dir => memory_tempdir('outbox-redis-XXXXXX'),
	}, $class;
	$self->_launch;
	return $self;
}

sub port { return $_[0]{port} }

sub _launch {
	my ($self) = @_;
	my @args = ('redis-server', '--port', $self->{port}, '--bind', '127.0.0.1',
		'--dir', $self->{dir}, '--save', '', '--appendonly', 'yes',
		'--appendfsync', 'always', '--daemonize', 'yes',
		'--pidfile', "$self->{dir}/redis.pid", '--logfile', "$self->{dir}/redis.log");
	push @args, '--requirepass', $self->{password} if defined $self->{password};
	delete $self->{hold};    # the port, held while it was stopped (OutboxPorts)
	system(@args) == 0 or die "redis-server did not start";
	# Until it answers (it loads its append-only file first): on a loaded
	# machine that may take a while, so the deadline is the tests' generous
	# one (timeout_default).
	my $start = time();
	while (time() - $start < $PostgreSQL::Test::Utils::timeout_default) {
		if (eval { $self->cli('PING') eq 'PONG' }) {
			$self->{pid} = slurp_file("$self->{dir}/redis.pid");
			chomp $self->{pid};
			$running{ $self->{dir} } = $self;
			return;
		}
		usleep(50_000);
	}
	die "redis-server does not answer";
}

# Run one command; returns redis-cli's raw output, trimmed.
sub cli {
	my ($self, @command) = @_;
	my @auth = defined $self->{password} ? ('-a', $self->{password}, '--no-auth-warning') : ();
	my ($stdout, $stderr) = run_command(
		[ 'redis-cli', '-p', $self->{port}, @auth, '--raw', @command ]);
	chomp $stdout;
	return $stdout;
}

sub stop {
	my ($self) = @_;
	my $pid = delete $self->{pid};
	delete $running{ $self->{dir} };
	return unless $pid;
	kill 'KILL', $pid;
	usleep(100_000) while kill 0, $pid;
	unlink "$self->{dir}/redis.pid";
	$self->{hold} = OutboxPorts::hold($self->{port});
}

sub restart {
	my ($self) = @_;
	$self->stop;
	$self->_launch;
}

sub DESTROY { $_[0]->stop }

END { $_->stop for values %running }

1;
