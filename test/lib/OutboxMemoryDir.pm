# A private temporary directory in memory (/dev/shm) where the machine has
# one, else in TMPDIR; removed when the test ends, unless it failed
# (PostgreSQL::Test::Utils then keeps every temporary directory, these
# too, so a failed test's store stays in memory). For what a test broker
# saves (append-only files, stores, mnesia): what it saves there still
# survives a SIGKILL of the broker, and its fsync never waits on a disk that
# another job keeps busy. A second's stall of the broker's fsync holds every
# sink of the broker and reads as the sink's fault (a Redis sink takes a
# server silent for 2 s as down, and counts the batch as failed).
package OutboxMemoryDir;

use strict;
use warnings;
use Exporter qw(import);
use File::Temp ();

our @EXPORT_OK = qw(memory_tempdir);

# Free space /dev/shm must have (KiB): Redis rewrites its append-only
# file only once it is past 64 MB (a test of 600,000 events gets there),
# and a container's /dev/shm may hold only 64 MB in all.
my $MIN_FREE_KB = 1024 * 1024;

# memory_tempdir('outbox-redis-XXXXXX'): the directory's path.
sub memory_tempdir {
	my ($template) = @_;
	return File::Temp::tempdir($template, DIR => '/dev/shm', CLEANUP => 1)
	  if -d '/dev/shm' && -w '/dev/shm' && _free_kb('/dev/shm') >= $MIN_FREE_KB;
	return File::Temp::tempdir($template, TMPDIR => 1, CLEANUP => 1);
}

# Free KiB on the file system of $dir, as df reports it (0 if unknown).
sub _free_kb {
	my ($dir) = @_;
	my $out = `df -Pk '$dir' 2>/dev/null` // '';
	return $out =~ /\n\S+\s+\d+\s+\d+\s+(\d+)/ ? $1 : 0;
}

1;
