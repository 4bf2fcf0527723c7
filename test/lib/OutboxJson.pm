# The JSON decoder the TAP files' broker readers use for what they read back
# (tens of thousands of lines in a fault suite): JSON::XS when installed
# (install_deps.sh and chroot/prepare.sh install libjson-xs-perl), else
# JSON::PP, the core module with the same interface and results. JSON::PP
# took about 0.2 ms of CPU a line here, JSON::XS a hundredth of that: a fault
# suite's reconciliation of 27,000 messages spent seconds of CPU in the
# decoder alone, which on a loaded 2-core machine is minutes of wall time.
package OutboxJson;

use strict;
use warnings;

our $CLASS = eval { require JSON::XS; 'JSON::XS' } // do { require JSON::PP; 'JSON::PP' };

# A decoder object: OutboxJson::decoder()->utf8(1)->decode($line).
sub decoder { return $CLASS->new }

# The records of a JSON-lines file read while its writer may be appending:
# only lines ended by a newline, as the last may be half written (a read
# beside a write sees what the write copied so far, and a decode of the
# half died, ending the test file).
sub decode_lines {
	my ($text) = @_;
	$text =~ s/[^\n]*\z//;
	my $json = decoder()->utf8(1);
	return map { $json->decode($_) } grep { length } split /\n/, $text;
}

1;
