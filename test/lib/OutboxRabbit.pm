# A throwaway RabbitMQ node for TAP tests, run as the user the tests run as
# (postgres): its own node name, free loopback ports (AMQP, epmd through
# ERL_EPMD_PORT, Erlang distribution), and a private directory holding its
# mnesia, logs, configuration, an enabled-plugins file with no plugins, and
# the HOME whose .erlang.cookie it uses. A restart keeps the directory, so
# durable queues and persistent messages survive it.
#
# The node is started with /usr/lib/rabbitmq/bin/rabbitmq-server, the
# package's real start script: /usr/sbin/rabbitmq-server is a wrapper that,
# as root, switches to the rabbitmq user in /var/lib/rabbitmq, and refuses
# every other user. RABBITMQ_ALLOW_INPUT makes the script exec erl rather
# than fork it (so the pid we hold is the node's), and -noinput keeps the
# Erlang shell away. epmd runs in the foreground, ours to stop.
#
# What arrived is read with test/amqp/amqp_tool.py (pika).
package OutboxRabbit;

use strict;
use warnings;
use File::Basename qw(dirname);
use File::Path ();
use File::Temp qw(tempdir);
use IO::Socket::INET;
use IPC::Run ();
use OutboxJson;
use OutboxPorts;
use POSIX ();
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time usleep);

# Every node started and not yet stopped. The END block below stops them
# before File::Temp's own END removes their directories.
my %running;
my $counter = 0;

# test/amqp/amqp_tool.py: beside this module's folder, in the repository or a
# copy of test/ (run_all.sh copies lib/ and, it is hoped, amqp/), or under
# $OUTBOX_REPO.
sub _tool {
	for my $candidate (dirname(__FILE__) . '/../amqp/amqp_tool.py',
		($ENV{OUTBOX_REPO} ? "$ENV{OUTBOX_REPO}/test/amqp/amqp_tool.py" : ())) {
		return $candidate if -r $candidate;
	}
	die 'test/amqp/amqp_tool.py not found (set OUTBOX_REPO)';
}

# OutboxRabbit->start(conf => "rabbitmq.conf lines", user => ..., password => ...)
sub start {
	my ($class, %opts) = @_;
	$counter++;
	my $self = bless {
		dir => tempdir('outbox-rabbit-XXXXXX', TMPDIR => 1, CLEANUP => 1),
		name => "outbox-tap-$$-$counter",
		user => $opts{user} // 'outbox',
		password => $opts{password} // 'outbox-test-pass',
		conf => $opts{conf} // '',
	}, $class;
	mkdir "$self->{dir}/$_" for qw(home log);
	_write("$self->{dir}/enabled_plugins", "[].\n");
	_write("$self->{dir}/rabbitmq-env.conf", '');
	# Ports are free when picked, and taken by the node seconds later, as its
	# Erlang VM boots: another process (a test beside this one) may take one
	# in between. Then the node exits with eaddrinuse, and starts afresh on
	# other ports.
	for my $try (1 .. 3) {
		$self->_configure;
		last if eval { $self->_launch; 1 };
		my $error = $@;
		die $error if $try == 3 || $error !~ /eaddrinuse/;
		$self->stop;
		Test::More::note('rabbitmq-server: a port was taken meanwhile; starting on others');
	}
	return $self;
}

# Fresh ports, an empty node directory, and the configuration naming them.
sub _configure {
	my ($self) = @_;
	$self->{$_} = OutboxPorts::free_port() for qw(port epmd_port dist_port);
	File::Path::remove_tree("$self->{dir}/mnesia");
	mkdir "$self->{dir}/mnesia";
	# The default user replaces guest (which may only log in from loopback):
	# the tests use a user and password of their own.
	_write("$self->{dir}/rabbitmq.conf", <<"EOF" . $self->{conf});
listeners.tcp.default = 127.0.0.1:$self->{port}
default_user = $self->{user}
default_pass = $self->{password}
disk_free_limit.absolute = 1MB
log.file.level = info
EOF
}

sub port { return $_[0]{port} }
sub user { return $_[0]{user} }
sub password { return $_[0]{password} }
sub dir { return $_[0]{dir} }

sub _write {
	my ($path, $text) = @_;
	open my $fh, '>', $path or die "cannot write $path: $!";
	print $fh $text;
	close $fh;
}

sub _env {
	my ($self) = @_;
	my $d = $self->{dir};
	return (
		HOME => "$d/home",
		ERL_EPMD_PORT => $self->{epmd_port},
		ERL_CRASH_DUMP => "$d/erl_crash.dump",
		RABBITMQ_NODENAME => "$self->{name}\@localhost",
		RABBITMQ_NODE_IP_ADDRESS => '127.0.0.1',
		RABBITMQ_NODE_PORT => $self->{port},
		RABBITMQ_DIST_PORT => $self->{dist_port},
		RABBITMQ_CONF_ENV_FILE => "$d/rabbitmq-env.conf",
		RABBITMQ_CONFIG_FILE => "$d/rabbitmq",
		RABBITMQ_ADVANCED_CONFIG_FILE => "$d/advanced.config",
		RABBITMQ_ENABLED_PLUGINS_FILE => "$d/enabled_plugins",
		RABBITMQ_MNESIA_BASE => "$d/mnesia",
		RABBITMQ_LOG_BASE => "$d/log",
		RABBITMQ_LOGS => "$d/log/node.log",
		RABBITMQ_PID_FILE => "$d/node.pid",
		RABBITMQ_ALLOW_INPUT => '1',
		RABBITMQ_SERVER_START_ARGS => '-noinput',
		LANG => 'C.UTF-8',
		LC_ALL => 'C.UTF-8',
	);
}

# fork + exec in the node's directory and environment; the child is killed
# should this process die without its END block (PR_SET_PDEATHSIG).
sub _spawn {
	my ($self, $out, @cmd) = @_;
	my %env = $self->_env;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0) {
		eval {
			require 'syscall.ph';
			syscall(&SYS_prctl, 1, 9);    # PR_SET_PDEATHSIG, SIGKILL
		};
		chdir $self->{dir};
		delete @ENV{ grep { /^RABBITMQ_|^ERL_/ } keys %ENV };
		@ENV{ keys %env } = values %env;
		open STDIN, '<', '/dev/null';
		open STDOUT, '>>', $out;
		open STDERR, '>&', \*STDOUT;
		{ no warnings 'exec'; exec { $cmd[0] } @cmd; }
		POSIX::_exit(127);
	}
	return $pid;
}

sub _launch {
	my ($self) = @_;
	$self->{epmd} //= $self->_spawn("$self->{dir}/epmd.log", '/usr/bin/epmd', '-port',
		$self->{epmd_port});
	$self->{pid} = $self->_spawn("$self->{dir}/stdout", '/usr/lib/rabbitmq/bin/rabbitmq-server');
	$running{ $self->{dir} } = $self;
	# Until a login works: a boot takes 5 to 15 s on a loaded machine, so the
	# deadline is the tests' generous one.
	my $start = time();
	while (time() - $start < $PostgreSQL::Test::Utils::timeout_default) {
		if (waitpid($self->{pid}, POSIX::WNOHANG()) == $self->{pid}) {
			delete $self->{pid};
			die "rabbitmq-server exited:\n" . $self->log_text;
		}
		return if $self->_port_open && $self->_tool_ok('ping');
		usleep(100_000);
	}
	die "rabbitmq-server does not answer:\n" . $self->log_text;
}

sub _port_open {
	my ($self) = @_;
	my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $self->{port},
		Timeout => 1);
	return 0 unless $sock;
	close $sock;
	return 1;
}

sub log_text {
	my ($self) = @_;
	my $text = '';
	for my $f ("$self->{dir}/stdout", "$self->{dir}/log/node.log") {
		$text .= slurp_file($f) if -r $f;
	}
	return $text;
}

# Runs amqp_tool.py; returns (success, stdout, stderr).
sub _tool_run {
	my ($self, @args) = @_;
	local $ENV{OUTBOX_TEST_AMQP_PASSWORD} = $self->{password};
	my ($stdout, $stderr) = ('', '');
	my $ok = IPC::Run::run(
		[ '/usr/bin/python3', _tool(), '--port', $self->{port}, '--user', $self->{user}, @args ],
		'<', \undef, '>', \$stdout, '2>', \$stderr);
	return ($ok, $stdout, $stderr);
}

sub _tool_ok {
	my ($self, @args) = @_;
	my ($ok) = $self->_tool_run(@args);
	return $ok;
}

# Runs an amqp_tool.py command that must succeed; returns its output.
sub tool {
	my ($self, @args) = @_;
	my ($ok, $stdout, $stderr) = $self->_tool_run(@args);
	die "amqp_tool.py @args failed: $stderr" unless $ok;
	chomp $stdout;
	return $stdout;
}

sub declare_queue {
	my ($self, $name, %args) = @_;
	return $self->tool('declare-queue', $name, map { "$_=$args{$_}" } sort keys %args);
}

sub count { my ($self, $queue) = @_; return $self->tool('count', $queue) }

# Takes every message off $queue: an arrayref of hashes (amqp_tool.py dump).
sub dump_queue {
	my ($self, $queue) = @_;
	my $json = OutboxJson::decoder()->utf8;
	return [ map { $json->decode($_) } grep { length } split /\n/, $self->tool('dump', $queue) ];
}

# SIGKILL, as a crash would: the node, not its epmd.
sub kill_node {
	my ($self) = @_;
	my $pid = delete $self->{pid};
	return unless $pid;
	kill 'CONT', $pid;
	kill 'KILL', $pid;
	waitpid($pid, 0);
}

# Starts the node again after kill_node: same ports, same data.
sub restart {
	my ($self) = @_;
	$self->kill_node;
	$self->_launch;
}

sub stop {
	my ($self) = @_;
	$self->kill_node;
	delete $running{ $self->{dir} };
	if (my $epmd = delete $self->{epmd}) {
		kill 'KILL', $epmd;
		waitpid($epmd, 0);
	}
}

sub DESTROY { $_[0]->stop }

END { $_->stop for values %running }

1;
