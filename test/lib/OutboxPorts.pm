# Loopback ports for the test brokers: a free one to start on, and a hold
# on it while a broker is stopped, so that it can start again on it.
#
# A stopped broker's port is free for anyone: another test's broker picking
# a free port, or any client's outgoing connection (the kernel takes its
# local port from the same range), may take it, and the broker cannot
# listen there again (it exited with "Address already in use"). While held,
# the port is bound and not listening: a client connecting to it is refused,
# as by a stopped broker, and neither a bind to port 0 nor an outgoing
# connection gets it.
#
#   my $port = OutboxPorts::free_port();
#   $self->{hold} = OutboxPorts::hold($port);   # after the broker exited
#   delete $self->{hold};                         # just before it starts again
package OutboxPorts;

use strict;
use warnings;
use Carp;
use IO::Socket::INET;

sub free_port {
	my $sock = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1', LocalPort => 0)
	  or croak "no free port: $!";
	my $port = $sock->sockport;
	close $sock;
	return $port;
}

# The socket that holds $port (closed when the last reference goes), or
# undef when something took the port already. SO_REUSEADDR, as the
# broker's own sockets left in TIME_WAIT would otherwise refuse the bind.
sub hold {
	my ($port) = @_;
	return IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port, Proto => 'tcp',
		ReuseAddr => 1);
}

1;
