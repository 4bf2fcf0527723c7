# A throwaway mosquitto broker for TAP tests: started on a free loopback
# port with a directory and configuration of its own (anonymous clients; an
# ACL file refusing the topics asked; max_packet_size when asked), and a subscriber at QoS 1 written
# with Debian's python3-paho-mqtt (test/mqtt/mqtt_tool.py) recording what
# arrives. Every broker and subscriber started is killed when the test ends,
# however it ends (the END block below; and the kernel kills a broker whose
# test process dies, PR_SET_PDEATHSIG).
#
#   my $mq = OutboxMosquitto->start(max_packet_size => 8192);
#   $mq->subscribe('raw/#', 'ce/#');               # before the events come
#   $node->safe_psql('postgres', $mq->sink_sql('mqtt', ack_timeout_ms => 2000));
#   my @messages = $mq->messages;   # { topic, body, content_type, correlation, properties }
#   $mq->stop;  $mq->start_again;   # SIGKILL, then the same port
#   $mq->pause;  $mq->resume;       # SIGSTOP, SIGCONT: it keeps its connections, answers nothing
package OutboxMosquitto;

use strict;
use warnings;
use Carp;
use Config;
use File::Temp qw(tempdir);
use FindBin;
use IO::Socket::INET;
use OutboxPorts;
use JSON::PP ();
use OutboxJson;
use OutboxMemoryDir qw(memory_tempdir);
use OutboxNode qw(wait_while_progressing);
use POSIX ();
use Test::More ();
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time usleep);

my %running;    # every broker or subscriber started and not yet stopped: dir => self

# mqtt_tool.py: beside this module in a copy of test/ that has test/mqtt,
# else in the repository under test (OUTBOX_REPO, which test/run_all.sh sets).
sub _tool {
	my @candidates = ("$FindBin::RealBin/../mqtt/mqtt_tool.py");
	push @candidates, "$ENV{OUTBOX_REPO}/test/mqtt/mqtt_tool.py" if $ENV{OUTBOX_REPO};
	my ($tool) = grep { -r $_ } @candidates;
	croak "mqtt_tool.py not found (looked at @candidates)" unless $tool;
	return $tool;
}

# start(max_packet_size => bytes, deny => ['denied/#', ...]: filters no
# client may publish to (MQTT 5 publishers get reason code 0x87),
# save_every_change => 1: the broker saves its state after every change
# instead of every second, so that what it acknowledged survives its
# SIGKILL; mosquitto writes no journal, and a publisher cannot make up for
# messages a broker lost after acknowledging them), unlimited_queue => 1:
# nothing dropped for a subscriber that falls behind (below))
sub start {
	my ($class, %opts) = @_;
	my $self = bless {
		port => OutboxPorts::free_port(),
		max_packet_size => $opts{max_packet_size},
		deny => $opts{deny} // [],
		save_every_change => $opts{save_every_change},
		unlimited_queue => $opts{unlimited_queue},
		dir => tempdir('outbox-mosquitto-XXXXXX', TMPDIR => 1, CLEANUP => 1),
	}, $class;
	# The saved state in memory (OutboxMemoryDir says why).
	$self->{store} = memory_tempdir('outbox-mosquitto-store-XXXXXX');
	$self->_launch;
	return $self;
}

sub port { return $_[0]{port} }
sub running { return defined $_[0]{pid} }

sub _spawn {
	my ($self, $log, @command) = @_;
	my $pid = fork();
	croak "fork: $!" unless defined $pid;
	if ($pid == 0) {
		# prctl(PR_SET_PDEATHSIG, SIGKILL): never outlive the test process.
		syscall(157, 1, 9) if $Config{archname} =~ /^x86_64-linux/;
		open(STDOUT, '>>', $log) or POSIX::_exit(127);
		open(STDERR, '>&', \*STDOUT) or POSIX::_exit(127);
		exec(@command) or POSIX::_exit(127);
	}
	return $pid;
}

sub _launch {
	my ($self) = @_;
	my $dir = $self->{dir};
	open(my $acl, '>', "$dir/acl") or croak "cannot write $dir/acl: $!";
	# "pattern" rules apply to every client, anonymous or not ("topic" rules
	# before any "user" line only to anonymous ones); a deny rule that
	# matches refuses the publish whatever else allows it.
	print $acl "pattern deny $_\n" for @{ $self->{deny} };
	print $acl "pattern readwrite #\n";
	close $acl;
	open(my $fh, '>', "$dir/mosquitto.conf") or croak "cannot write the configuration: $!";
	print $fh "listener $self->{port} 127.0.0.1\n", "allow_anonymous true\n",
	  "log_dest stderr\n", "acl_file $dir/acl\n",

	  # The subscriber's session (its subscriptions, what waits for it)
	  # saved every second, so that it survives a SIGKILL of the broker.
	  "persistence true\n", "persistence_location $self->{store}/\n", "autosave_interval 1\n";
	print $fh "autosave_on_changes true\n" if $self->{save_every_change};
	# No limit on what waits for the subscriber (mosquitto drops QoS 1
	# messages beyond 1,000 queued for a client by default): under a load, a
	# subscriber behind the sink must not make the broker drop what it
	# acknowledged. Not the default: with it, mosquitto 2.0.11 closes a
	# publisher's connection after refusing a message (0x87).
	print $fh "max_queued_messages 0\n" if $self->{unlimited_queue};
	print $fh "max_packet_size $self->{max_packet_size}\n" if $self->{max_packet_size};
	# As root, mosquitto would become user "mosquitto", who cannot read this
	# private directory.
	print $fh "user root\n" if $> == 0;
	close $fh;
	delete $self->{hold};    # the port, held while it was stopped (OutboxPorts)
	$self->{pid} = $self->_spawn("$dir/mosquitto.log", 'mosquitto', '-c', "$dir/mosquitto.conf");
	$running{$dir} = $self;
	my $start = time();
	while (time() - $start < $PostgreSQL::Test::Utils::timeout_default) {
		croak "mosquitto exited: " . slurp_file("$dir/mosquitto.log")
		  if waitpid($self->{pid}, POSIX::WNOHANG()) == $self->{pid};
		my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $self->{port});
		return if $sock;
		usleep(50_000);
	}
	croak 'mosquitto does not answer';
}

# Starts the subscriber (once per test) on these filters, at QoS 1, with
# MQTT 5 (protocol => '3.1.1' for the older one).
sub subscribe {
	my ($self, @filters) = @_;
	my %o = ref $filters[-1] eq 'HASH' ? %{ pop @filters } : ();
	my $out = "$self->{dir}/received.jsonl";
	$self->{sub_pid} = $self->_spawn("$self->{dir}/subscriber.log", '/usr/bin/python3', _tool(),
		'--port', $self->{port}, '--out', $out, '--protocol', $o{protocol} // '5', @filters);
	$self->{out} = $out;
	my $start = time();
	while (!-e "$out.ready") {
		croak 'the subscriber does not subscribe: ' . slurp_file("$self->{dir}/subscriber.log")
		  if time() - $start > $PostgreSQL::Test::Utils::timeout_default
		  || waitpid($self->{sub_pid}, POSIX::WNOHANG()) == $self->{sub_pid};
		usleep(50_000);
	}
	# The broker saves its state every second (autosave_interval): once it
	# has, the subscriber's session survives a SIGKILL of the broker, and
	# what is published after a restart waits for the subscriber even before
	# it has reconnected.
	usleep(2_500_000);
	return;
}

# Everything the subscriber received, in order.
sub messages {
	my ($self) = @_;
	return () unless $self->{out} && -e $self->{out};
	return OutboxJson::decode_lines(slurp_file($self->{out}));
}

# What the subscriber received on one topic, in its order, as
# OutboxFaults::reconcile reads deliveries: the event id is the outbox-id
# user property. With $patient (1-3: reconcile asks again while events are
# missing), first wait until the subscriber has written nothing new for
# that many seconds: the broker acknowledges a message when it takes it,
# and under load the subscriber may still be reading thousands from its
# queue.
sub deliveries {
	my ($self, $topic, $patient) = @_;
	# Given up once the file stands still for $patient seconds, which is
	# what is waited for.
	wait_while_progressing(sub { $self->{out} && -e $self->{out} ? -s $self->{out} : 0 },
		sub { 0 }, $patient) if $patient;
	my @m = $self->messages;
	return [ map { { id => property($m[$_], 'outbox-id'), value => $m[$_]{body},
				lane => $m[$_]{topic}, pos => $_ } } grep { $m[$_]{topic} eq $topic } 0 .. $#m ];
}

# A message's user property (the first of that name), or undef.
sub property {
	my ($message, $name) = @_;
	for my $p (@{ $message->{properties} }) { return $p->[1] if $p->[0] eq $name }
	return undef;
}

# The SQL creating an MQTT sink on this broker (the options as strings,
# %extra over the defaults).
sub sink_sql {
	my ($self, $name, %extra) = @_;
	my %options = (host => '127.0.0.1', port => "$self->{port}", %extra);
	my $json = join(', ', map {
		my $v = $options{$_};
		ref $v ? qq{"$_": } . JSON::PP->new->canonical->encode($v) : qq{"$_": "$v"}
	} sort keys %options);
	return "SELECT outbox.create_sink('$name', 'mqtt', '{$json}')";
}

# In $node's database postgres: the extension, sink "mqtt" on this broker
# (%sink: its options over the defaults), the route "$prefix.*" to it, and
# one event published through it. Returns whether it was, within the
# default timeout.
sub ready_sink {
	my ($self, $node, $prefix, %sink) = @_;
	$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
	$node->safe_psql('postgres', $self->sink_sql('mqtt', %sink));
	$node->safe_psql('postgres', "SELECT outbox.add_route('$prefix.*', 'mqtt')");
	$node->safe_psql('postgres', "SELECT outbox.emit('$prefix.t', '{\"warm\": 1}', 'w')");
	return defined OutboxNode::wait_until(sub {
		$node->safe_psql('postgres', q{SELECT status FROM outbox.events}) eq 'published' });
}

# SIGKILL the broker (the subscriber stays, reconnecting); graceful => 1:
# SIGTERM, on which mosquitto saves its state (what waits for the
# subscriber included) before it exits.
sub stop {
	my ($self, %o) = @_;
	local $?;    # waitpid's status must not become the test's exit status (END)
	my $pid = delete $self->{pid};
	return unless $pid;
	kill $o{graceful} ? 'TERM' : 'KILL', $pid;
	waitpid($pid, 0);
	$self->{hold} = OutboxPorts::hold($self->{port});
	return;
}

# SIGSTOP the broker by its PID: its connections stay open (the kernel
# takes their bytes) and it answers nothing until resume (SIGCONT).
# mosquitto is one thread, stopped at once.
sub pause {
	my ($self) = @_;
	croak 'the broker is not running' unless $self->{pid};
	kill 'STOP', $self->{pid};
	return;
}

sub resume {
	my ($self) = @_;
	kill 'CONT', $self->{pid} if $self->{pid};
	return;
}

sub start_again {
	my ($self) = @_;
	$self->stop;
	$self->_launch;
	return;
}

sub _stop_all {
	my ($self) = @_;
	local $?;
	$self->stop;
	if (my $pid = delete $self->{sub_pid}) {
		kill 'KILL', $pid;
		waitpid($pid, 0);
	}
	# A failed test shows what the broker and the subscriber said (their
	# directory goes with the test).
	if (!Test::More->builder->is_passing) {
		for my $log (qw(mosquitto.log subscriber.log)) {
			my $file = "$self->{dir}/$log";
			next unless -s $file;
			my @lines = split /\n/, slurp_file($file);
			splice(@lines, 0, @lines - 40) if @lines > 40;
			Test::More::diag("$log (port $self->{port}), last lines:\n" . join("\n", @lines));
		}
	}
	delete $running{ $self->{dir} };
	return;
}

sub DESTROY { $_[0]->_stop_all }

END { $_->_stop_all for values %running }

1;
