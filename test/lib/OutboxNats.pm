# A throwaway nats-server with JetStream for TAP tests: started on a free
# loopback port with a store directory of its own (so a restart keeps the
# streams) and user/password authentication, and looked at with nats_tool
# (test/nats/nats_tool.c, compiled here into the test's own directory: there
# is no nats CLI). Every server started is killed when the test ends, however
# it ends (the END block below; and the kernel kills a server whose test
# process dies, PR_SET_PDEATHSIG).
#
#   my $nats = OutboxNats->start(max_payload => 8192);
#   $nats->add_stream('ORDERS', 'orders.>', max_msgs => 10, discard => 'new');
#   $node->safe_psql('postgres', $nats->sink_sql('nats', ack_timeout_ms => 2000));
#   my @messages = $nats->messages('ORDERS');   # { seq, subject, headers => {...}, data }
#   $nats->stop;  $nats->start_again;       # SIGKILL, then the same port and store
#   $nats->pause;  $nats->resume;           # SIGSTOP, SIGCONT: connections stay, no answers
package OutboxNats;

use strict;
use warnings;
use Carp;
use Config;
use File::Temp qw(tempdir);
use FindBin;
use IO::Socket::INET;
use OutboxPorts;
use IPC::Run ();
use JSON::PP ();
use OutboxJson;
use POSIX ();
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time usleep);

our $USER = 'outbox';
our $PASSWORD = 'nats-Secret-4711';

# Every server started and not yet stopped. The END block stops them before
# File::Temp's own END removes their directories (END blocks run last
# defined first).
my %running;
my $tool;    # the compiled nats_tool, once per test process

# nats_tool's source: beside this module in a copy of test/ that has
# test/nats, else in the repository under test (OUTBOX_REPO, which
# test/run_all.sh sets).
sub _tool {
	return $tool if defined $tool;
	my @candidates = ("$FindBin::RealBin/../nats/nats_tool.c");
	push @candidates, "$ENV{OUTBOX_REPO}/test/nats/nats_tool.c" if $ENV{OUTBOX_REPO};
	my ($source) = grep { -r $_ } @candidates;
	croak "nats_tool.c not found (looked at @candidates)" unless $source;
	my $dir = tempdir('outbox-nats-tool-XXXXXX', TMPDIR => 1, CLEANUP => 1);
	my $flags = `pkg-config --cflags --libs libnats 2>/dev/null` || '-lnats';
	chomp $flags;
	my $out = "$dir/nats_tool";
	system("cc -O1 -o '$out' '$source' $flags") == 0 or croak "cannot compile $source";
	return $tool = $out;
}

# start(max_payload => bytes, jetstream => 0 to leave JetStream off)
sub start {
	my ($class, %opts) = @_;
	my $self = bless {
		port => OutboxPorts::free_port(),
		max_payload => $opts{max_payload},
		dir => tempdir('outbox-nats-XXXXXX', TMPDIR => 1, CLEANUP => 1),
	}, $class;
	_tool();
	$self->_launch($opts{jetstream} // 1);
	return $self;
}

sub port { return $_[0]{port} }
sub url { return "nats://127.0.0.1:$_[0]{port}" }
sub running { return defined $_[0]{pid} }

sub _launch {
	my ($self, $jetstream) = @_;
	my $conf = "$self->{dir}/nats.conf";
	open(my $fh, '>', $conf) or croak "cannot write $conf: $!";
	print $fh "listen: 127.0.0.1:$self->{port}\n";
	print $fh "max_payload: $self->{max_payload}\n" if $self->{max_payload};
	print $fh "authorization { user: \"$USER\", password: \"$PASSWORD\" }\n";
	print $fh "jetstream { store_dir: \"$self->{dir}/store\" }\n" if $jetstream;
	close $fh;
	delete $self->{hold};    # the port, held while it was stopped (OutboxPorts)
	$self->{jetstream} = $jetstream;
	my $pid = fork();
	croak "fork: $!" unless defined $pid;
	if ($pid == 0) {
		# prctl(PR_SET_PDEATHSIG, SIGKILL): never outlive the test process.
		syscall(157, 1, 9) if $Config{archname} =~ /^x86_64-linux/;
		open(STDOUT, '>>', "$self->{dir}/nats.log") or POSIX::_exit(127);
		open(STDERR, '>&', \*STDOUT) or POSIX::_exit(127);
		exec('nats-server', '-c', $conf) or POSIX::_exit(127);
	}
	$self->{pid} = $pid;
	$running{ $self->{dir} } = $self;
	# Until it answers, and JetStream with it; on a loaded machine that may
	# take a while, so the deadline is the tests' generous one.
	my $start = time();
	while (time() - $start < $PostgreSQL::Test::Utils::timeout_default) {
		croak "nats-server exited: " . slurp_file("$self->{dir}/nats.log")
		  if waitpid($pid, POSIX::WNOHANG()) == $pid;
		return if eval { $self->tool($jetstream ? 'ready' : 'ping'); 1 };
		usleep(50_000);
	}
	croak 'nats-server does not answer';
}

# Runs nats_tool with this server's URL and credentials; returns its output
# (dies when it fails).
sub tool {
	my ($self, @args) = @_;
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run([ _tool(), $self->url, $USER, $PASSWORD, @args ],
		'<', \undef, '>', \$stdout, '2>', \$stderr)
	  or croak "nats_tool @args: $stderr";
	return $stdout;
}

# add_stream(NAME, 'subj.>,other', max_msgs => N, discard => 'new', max_msg_size => B)
sub add_stream {
	my ($self, $name, $subjects, %o) = @_;
	my @args = ('add-stream', $name, $subjects);
	if (defined $o{max_msgs} || defined $o{discard} || defined $o{max_msg_size}) {
		push @args, $o{max_msgs} // -1, $o{discard} // 'old', $o{max_msg_size} // -1;
	}
	$self->tool(@args);
	return;
}

sub purge { $_[0]->tool('purge', $_[1]); return }

# How many messages the stream holds.
sub count {
	my ($self, $name) = @_;
	my $out = $self->tool('count', $name);
	chomp $out;
	return $out;
}

# Every message of the stream, in stream order: { seq, subject, headers, data }.
sub messages {
	my ($self, $name) = @_;
	my $json = OutboxJson::decoder()->utf8(0);
	return map { $json->decode($_) } grep { length } split /\n/, $self->tool('read', $name);
}

# The SQL creating a NATS sink on this server (the options as strings,
# %extra over the defaults).
sub sink_sql {
	my ($self, $name, %extra) = @_;
	my %options = (servers => $self->url, user => $USER, password => $PASSWORD, %extra);
	my $json = join(', ', map {
		my $v = $options{$_};
		ref $v ? qq{"$_": } . JSON::PP->new->canonical->encode($v) : qq{"$_": "$v"}
	} sort keys %options);
	return "SELECT outbox.create_sink('$name', 'nats', '{$json}')";
}

# SIGKILL; the store stays.
sub stop {
	my ($self) = @_;
	local $?;    # waitpid's status must not become the test's exit status (END)
	my $pid = delete $self->{pid};
	delete $running{ $self->{dir} };
	return unless $pid;
	kill 'KILL', $pid;
	waitpid($pid, 0);
	$self->{hold} = OutboxPorts::hold($self->{port});
	return;
}

# SIGSTOP the server by its PID: its connections stay open (the kernel
# takes their bytes) and it answers nothing until resume (SIGCONT). Returns
# once every thread of it has stopped (/proc's task states), so that nothing
# it had read is still answered after pause returns.
sub pause {
	my ($self) = @_;
	croak 'the server is not running' unless $self->{pid};
	kill 'STOP', $self->{pid};
	my $start = time();
	while (time() - $start < 10) {
		my @states = map { ((eval { slurp_file($_) } // '') =~ /^\d+ \(.*\) (\S)/)[0] // 'T' }
		  glob("/proc/$self->{pid}/task/*/stat");
		return if !grep { $_ ne 'T' && $_ ne 't' } @states;
		usleep(10_000);
	}
	croak 'nats-server did not stop';
}

sub resume {
	my ($self) = @_;
	kill 'CONT', $self->{pid} if $self->{pid};
	return;
}

# The same port and store again (jetstream => 0: without JetStream).
sub start_again {
	my ($self, %opts) = @_;
	$self->stop;
	$self->_launch($opts{jetstream} // 1);
	return;
}

sub DESTROY { $_[0]->stop }

END { $_->stop for values %running }

1;
