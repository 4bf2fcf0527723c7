# A throwaway webhook receiver for TAP tests (test/http/receiver.py on
# python3-aiohttp): started on a free loopback port with a directory of its
# own, told how to answer through its rules file, and read back through its
# record of every request. Signatures and CloudEvents are checked by the
# npm reference libraries (test/http/verify.js, installed by
# test/http/install_node_tools.sh). Every receiver started is killed when
# the test ends (the END block; PR_SET_PDEATHSIG if the test dies).
#
#   my $http = OutboxHttp->start;
#   $node->safe_psql('postgres', $http->sink_sql('hooks', path => '/hooks/{target}'));
#   $http->rules(fail_ids => { $id => 500 }, down_paths => { '/hooks/b' => 503 });
#   my @got = $http->received;          # { path, headers => {...}, body, status, at }
#   my @checked = $http->verified($secret);   # { signature => 'valid', cloudevent => ... }
#   $http->stop;  $http->start_again;   # SIGKILL, then the same port
package OutboxHttp;

use strict;
use warnings;
use Carp;
use Config;
use File::Temp qw(tempdir);
use FindBin;
use IO::Socket::INET;
use OutboxPorts;
use PostgreSQL::Test::Cluster;
use IPC::Run ();
use JSON::PP ();
use OutboxJson;
use POSIX ();
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time usleep);

# A secret in Standard Webhooks form: 32 bytes 0x01..0x20.
our $SECRET = 'whsec_AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=';

my %running;


# A file of test/http/: beside this module in a copy of test/, else in the
# repository under test (OUTBOX_REPO).
sub _tool_file {
	my ($name) = @_;
	my @candidates = ("$FindBin::RealBin/../http/$name");
	push @candidates, "$ENV{OUTBOX_REPO}/test/http/$name" if $ENV{OUTBOX_REPO};
	my ($file) = grep { -r $_ } @candidates;
	croak "$name not found (looked at @candidates)" unless $file;
	return $file;
}

# The npm packages' directory: OUTBOX_HTTP_NODE_TOOLS, else test/http/node_tools.
# Under CI (OUTBOX_REQUIRE_TOOLS or CI set) a missing one fails the test
# loudly; elsewhere the checks that need it are skipped with a reason.
sub node_tools {
	my @candidates = grep { defined && length } ($ENV{OUTBOX_HTTP_NODE_TOOLS});
	push @candidates, "$FindBin::RealBin/../http/node_tools";
	push @candidates, "$ENV{OUTBOX_REPO}/test/http/node_tools" if $ENV{OUTBOX_REPO};
	my ($dir) = grep { -d "$_/node_modules/standardwebhooks" && -d "$_/node_modules/cloudevents" }
	  @candidates;
	return $dir;
}

sub start {
	my ($class) = @_;
	my $self = bless {
		port => PostgreSQL::Test::Cluster::get_free_port(),
		dir => tempdir('outbox-http-XXXXXX', TMPDIR => 1, CLEANUP => 1),
	}, $class;
	$self->_launch;
	return $self;
}

# A receiver over TLS offering HTTP/2 (test/http/h2_receiver.js on Node's
# http2 module), its certificate (for 127.0.0.1) signed by a CA of the
# test's own: ca_pem is that CA's PEM text, other_ca_pem another CA's. It
# answers every request 200 after a short delay and records what
# received.jsonl holds for receiver.py, plus each request's HTTP version,
# connection and how many requests that connection had open at once.
sub start_tls {
	my ($class) = @_;
	my $self = bless {
		port => PostgreSQL::Test::Cluster::get_free_port(),
		dir => tempdir('outbox-https-XXXXXX', TMPDIR => 1, CLEANUP => 1),
		tls => 1,
	}, $class;
	my $d = $self->{dir};
	my $openssl = sub {
		my ($stdout, $stderr) = ('', '');
		IPC::Run::run([ 'openssl', @_ ], '<', \undef, '>', \$stdout, '2>', \$stderr)
		  or croak "openssl @_[0 .. 1]: $stderr";
	};
	for my $ca ('ca', 'other_ca') {
		$openssl->('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
			'-subj', "/CN=outbox test $ca", '-keyout', "$d/$ca.key", '-out', "$d/$ca.pem");
	}
	$openssl->('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=127.0.0.1',
		'-keyout', "$d/server.key", '-out', "$d/server.csr");
	open(my $ext, '>', "$d/server.ext") or croak "cannot write $d/server.ext: $!";
	print $ext "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n";
	close $ext;
	$openssl->('x509', '-req', '-in', "$d/server.csr", '-CA', "$d/ca.pem", '-CAkey', "$d/ca.key",
		'-CAcreateserial', '-days', '2', '-extfile', "$d/server.ext", '-out', "$d/server.pem");
	$self->{ca_pem} = slurp_file("$d/ca.pem");
	$self->{other_ca_pem} = slurp_file("$d/other_ca.pem");
	$self->_launch;
	return $self;
}

sub ca_pem { return $_[0]{ca_pem} }
sub other_ca_pem { return $_[0]{other_ca_pem} }
sub port { return $_[0]{port} }

sub url {
	my ($self, $path) = @_;
	return ($self->{tls} ? 'https' : 'http') . "://127.0.0.1:$self->{port}" . ($path // '/');
}
sub running { return defined $_[0]{pid} }

sub _launch {
	my ($self) = @_;
	my $receiver = _tool_file($self->{tls} ? 'h2_receiver.js' : 'receiver.py');
	delete $self->{hold};    # the port, held while it was stopped (OutboxPorts)
	unlink "$self->{dir}/ready";
	my $pid = fork();
	croak "fork: $!" unless defined $pid;
	if ($pid == 0) {
		syscall(157, 1, 9) if $Config{archname} =~ /^x86_64-linux/;
		open(STDOUT, '>>', "$self->{dir}/receiver.log") or POSIX::_exit(127);
		open(STDERR, '>&', \*STDOUT) or POSIX::_exit(127);
		exec($self->{tls} ? ('node', $receiver, $self->{port}, $self->{dir})
			: ('/usr/bin/python3', $receiver, $self->{port}, $self->{dir}))
		  or POSIX::_exit(127);
	}
	$self->{pid} = $pid;
	$running{ $self->{dir} } = $self;
	my $start = time();
	while (time() - $start < $PostgreSQL::Test::Utils::timeout_default) {
		croak "receiver exited: " . slurp_file("$self->{dir}/receiver.log")
		  if waitpid($pid, POSIX::WNOHANG()) == $pid;
		if ($self->{tls}) {    # h2_receiver.js says when it listens
			return if -e "$self->{dir}/ready";
			usleep(50_000);
			next;
		}
		my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $self->{port});
		if ($sock) {
			print $sock "GET /_ready HTTP/1.0\r\n\r\n";
			my $answer = join('', <$sock>);
			close $sock;
			return if $answer =~ m{^HTTP/1\.\d 200};
		}
		usleep(50_000);
	}
	croak 'the receiver does not answer';
}

# How it answers from now on (receiver.py's rules; none: 200 at once).
sub rules {
	my ($self, %rules) = @_;
	my $file = "$self->{dir}/rules.json";
	open(my $fh, '>', "$file.new") or croak "cannot write $file: $!";
	print $fh JSON::PP->new->encode(\%rules);
	close $fh;
	rename("$file.new", $file) or croak "rename: $!";
	return;
}

# Every request recorded, oldest first (status 0: dropped unanswered).
sub received {
	my ($self) = @_;
	my $file = "$self->{dir}/received.jsonl";
	return () unless -e $file;
	return OutboxJson::decode_lines(slurp_file($file));
}

# The answered (2xx) requests only.
sub delivered { return grep { $_->{status} >= 200 && $_->{status} < 300 } $_[0]->received }

# The 2xx requests to one path as OutboxFaults' reconciliation reads
# deliveries: [ { id (webhook-id), value (body), lane (the path), pos } ].
sub deliveries {
	my ($self, $path) = @_;
	my @got = $self->delivered;
	return [ map { { id => $got[$_]{headers}{'webhook-id'}, value => $got[$_]{body},
				lane => $path, pos => $_ } } grep { $got[$_]{path} eq $path } 0 .. $#got ];
}

sub forget { unlink "$_[0]{dir}/received.jsonl"; return }

# What the reference libraries make of every recorded request (verify.js);
# dies when they are not installed.
sub verified {
	my ($self, $secret) = @_;
	my $tools = node_tools() or croak 'the npm test tools are not installed '
	  . '(test/http/install_node_tools.sh)';
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run([ 'node', _tool_file('verify.js'), $tools, "$self->{dir}/received.jsonl",
			defined $secret ? ($secret) : () ],
		'<', \undef, '>', \$stdout, '2>', \$stderr)
	  or croak "verify.js: $stderr";
	my $json = JSON::PP->new->utf8(1);
	return map { $json->decode($_) } grep { length } split /\n/, $stdout;
}

# The SQL creating an HTTP sink posting to this receiver (path => the URL's
# path, '/hooks/{target}' by default; %extra: more options).
sub sink_sql {
	my ($self, $name, %extra) = @_;
	my $path = delete $extra{path} // '/hooks/{target}';
	my %options = (url => $self->url($path), %extra);
	my $json = JSON::PP->new->canonical->encode(\%options);
	$json =~ s/'/''/g;
	return "SELECT outbox.create_sink('$name', 'http', '$json')";
}

# SIGKILL (the receiver's record stays); start_again: the same port.
sub stop {
	my ($self) = @_;
	delete $running{ $self->{dir} };
	if (my $pid = delete $self->{pid}) {
		kill 'KILL', $pid;
		waitpid($pid, 0);
		$self->{hold} = OutboxPorts::hold($self->{port});
	}
	return;
}

sub start_again { $_[0]->stop; $_[0]->_launch; return }

sub DESTROY { $_[0]->stop }

END { $_->stop for values %running }

1;
