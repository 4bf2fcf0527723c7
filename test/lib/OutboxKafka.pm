
=pod

=head1 NAME

OutboxKafka - a librdkafka mock Kafka cluster for TAP tests

=head1 SYNOPSIS

  use lib 'test/lib';     # or PERL5LIB=test/lib
  use OutboxKafka;

  my $k = OutboxKafka->start(brokers => 3, topics => ['orders:3']);
  my $bootstrap = $k->bootstrap;     # "127.0.0.1:PORT,127.0.0.1:PORT,..."

  $k->command_ok('create_topic events 1');
  is($k->command('down all'), 'OK', 'all brokers down');
  $k->command_ok('up all');
  $k->command_ok('produce_errors 2 REQUEST_TIMED_OUT');

  $k->produce(topic => 'events', key => 'k1', value => '{"a":1}',
      headers => [ [ 'ce_type', 'orders.created' ] ]) or die;

  my $msgs = $k->consume(topics => ['events'], count => 1, timeout_ms => 3000);
  is($msgs->[0]{value}, '{"a":1}');   # keys: topic partition offset key value headers

  $k->stop;                           # also done when $k goes out of scope

=head1 DESCRIPTION

Runs test/kafka/kafka_broker (built with C<make -C test/kafka> on first use) under
IPC::Run, holding its stdin and stdout: stdin is the control channel, and when the test
process dies the pipe closes and the broker exits, so no stray broker survives a test.
See the header of test/kafka/kafka_broker.cpp for the command language and for the mock
cluster's quirks (topics auto-created with 4 partitions by any Metadata request naming
them, brokers that go down keep their partition leadership, ...).

Nothing here needs PostgreSQL. The broker's stderr goes to a file: in the directory
named by the environment variable OUTBOX_KAFKA_LOG_DIR if set, else in the log directory of
PostgreSQL::Test::Utils (tmp_check/log) when that module is loaded, else a temporary file
removed at exit.

=head1 METHODS

=over

=item OutboxKafka->start(%opts)

Options: C<brokers> (default 3), C<partitions> (partition count for C<topics> entries and
C<create_topic> commands that give none, default 4), C<topics> (arrayref of
C<name[:partitions[:replication]]>, created before start returns), C<debug> (librdkafka
mock/broker debug logging into the log file), C<log> (path of the stderr log file),
C<timeout> (seconds to wait for the broker to come up, default: the environment's
PG_TEST_TIMEOUT_DEFAULT, else 180, as PostgreSQL::Test::Utils' timeout_default: generous
for a loaded machine; it only bounds a hang).

=item $k->bootstrap

The bootstrap.servers list.

=item $k->command($line [, timeout => SECONDS])

Sends one command line and returns the reply line (C<OK...> or C<ERR ...>). Dies when no
reply arrives within the timeout (default as for start) or the broker has exited.

=item $k->command_ok($line [, timeout => SECONDS])

Like command, but dies unless the reply starts with OK; returns the reply.

=item $k->consume(topics => [...], count => N, timeout_ms => T, from_end => 0, props => {}, until => sub { ... }, deadline => S)

Runs test/kafka/kafka_consume and returns an arrayref of hashes
C<{topic, partition, offset, key, value, headers =E<gt> [[name, value], ...]}> (key, value
and header values are Perl character strings decoded from UTF-8, or undef for null).
It returns after C<count> messages, or once no message arrived for C<timeout_ms>
(default 5000). Messages come in arrival order, which is offset order only per partition.

The tool's idle timeout counts from its start, its wait for the topics' metadata
included: on a loaded machine a read can end before the first message came, or early.
So a read from the beginning (no C<from_end>) is done again, the idle timeout doubled
each time (up to 60 s), until what it returned is complete or C<deadline> seconds
(default as for start) have passed; the last read is returned. Complete means: the
code ref C<until> returns true for the arrayref of messages, or, without C<until>, at
least C<count> messages when a count was given (a read without either is done once).
Each read starts from the beginning again, so the result is always one whole read.

=item $k->produce(topic => T, value => V, key => K, partition => P, headers => [[n, v], ...], props => {...})

Produces one message with kcat (each key/value/header exactly as given; undef key means
no key, a header value of undef a null header value; an empty value needs a defined key
without tabs or newlines, a kcat limitation). C<props> are librdkafka producer
properties (message.timeout.ms defaults to 10000). Returns true when the message was
delivered; in list context (ok, kcat's stderr).

=item $k->arrivals_in_emit_order($node, $where, topics => [...], others => N, db => NAME)

The events of C<outbox.events> (in database C<db>, C<postgres> unless given)
that SQL condition C<$where> selects, read back
from Kafka C<topics> (which also hold C<others> messages of other events):
each id's first arrival only, by its C<outbox-id> header. Returns (how many
events C<$where> selects, how many of them arrived, how many first arrivals
came after a later event of their key in emit order).

=item $k->stop

Sends quit, closes stdin, waits up to 30 s, then kills. Safe to call twice.

=item $k->log_file, $k->log_contents

Where the broker's stderr goes, and what it holds so far.

=back

=cut

package OutboxKafka;

use strict;
use warnings;

use Carp;
use Fcntl qw(:flock);
use File::Basename ();
use File::Spec;
use File::Temp ();
use IPC::Run ();
use OutboxJson;
use Time::HiRes ();

my $KAFKA_DIR =
  File::Spec->rel2abs(File::Basename::dirname(__FILE__) . '/../kafka');
my $instance = 0;
# How long to wait for something that must happen (the broker's start, a
# reply): PostgreSQL::Test::Utils' timeout_default, without needing it.
my $PATIENCE = ($ENV{PG_TEST_TIMEOUT_DEFAULT} // '') =~ /^\d+$/ ? $ENV{PG_TEST_TIMEOUT_DEFAULT} : 180;

# Builds the tools unless they are there and newer than their sources. The lock keeps
# parallel tests (prove -j) from running two makes in the same directory at once.
sub _ensure_built
{
	my @tools = ('kafka_broker', 'kafka_consume');
	my $fresh = sub {
		for my $t (@tools)
		{
			my $bin = "$KAFKA_DIR/$t";
			return 0 unless -x $bin;
			return 0 if -M "$KAFKA_DIR/$t.cpp" < -M $bin;
		}
		return 1;
	};
	return if $fresh->();
	open(my $lock, '>', "$KAFKA_DIR/.build-lock")
	  or croak "cannot open $KAFKA_DIR/.build-lock: $!";
	flock($lock, LOCK_EX) or croak "cannot lock $KAFKA_DIR/.build-lock: $!";
	if (!$fresh->())
	{
		my $out = '';
		IPC::Run::run([ 'make', '-C', $KAFKA_DIR ], '>&', \$out)
		  or croak "make -C $KAFKA_DIR failed:\n$out";
	}
	close($lock);
	return;
}

sub _default_log
{
	no warnings 'once';
	my $dir = $ENV{OUTBOX_KAFKA_LOG_DIR} || $PostgreSQL::Test::Utils::log_path;
	$instance++;
	if (defined $dir && -d $dir)
	{
		return ("$dir/kafka_broker_${$}_$instance.log", undef);
	}
	my $tmp = File::Temp->new(
		TEMPLATE => 'kafka_broker_XXXXXX',
		SUFFIX => '.log',
		TMPDIR => 1);
	return ($tmp->filename, $tmp);
}

sub start
{
	my ($class, %opts) = @_;
	_ensure_built();

	my @cmd = ("$KAFKA_DIR/kafka_broker");
	push @cmd, '--brokers', $opts{brokers} if defined $opts{brokers};
	push @cmd, '--partitions', $opts{partitions} if defined $opts{partitions};
	push @cmd, map { ('--topic', $_) } @{ $opts{topics} || [] };
	push @cmd, '--debug' if $opts{debug};

	my ($log, $log_keep) =
	  defined $opts{log} ? ($opts{log}, undef) : _default_log();

	my $self = bless {
		in => '',
		out => '',
		log => $log,
		log_keep => $log_keep,    # File::Temp object: removes the file at exit
		owner_pid => $$,
		brokers => $opts{brokers} || 3,
		timeout => IPC::Run::timeout($opts{timeout} || $PATIENCE),
	}, $class;

	$self->{h} = IPC::Run::start(
		\@cmd,
		'<' => \$self->{in},
		'>' => \$self->{out},
		'2>>' => $log,
		$self->{timeout});

	my $line = $self->_read_line($opts{timeout} || $PATIENCE, 'the BOOTSTRAP line');
	$line =~ /^BOOTSTRAP (\S+)$/
	  or croak "kafka_broker printed '$line' instead of BOOTSTRAP; log: $log";
	$self->{bootstrap} = $1;
	return $self;
}

sub bootstrap { return $_[0]->{bootstrap}; }
sub brokers { return $_[0]->{brokers}; }
sub log_file { return $_[0]->{log}; }

sub log_contents
{
	my ($self) = @_;
	open(my $fh, '<', $self->{log}) or return '';
	local $/;
	my $s = <$fh>;
	return defined $s ? $s : '';
}

# Pumps until a whole line is in the output buffer; removes and returns it.
sub _read_line
{
	my ($self, $secs, $what) = @_;
	my $h = $self->{h} or croak "kafka_broker is not running";
	# A broker that died must show up as an error here, not kill the test with SIGPIPE
	# when the command is written to its stdin.
	local $SIG{PIPE} = 'IGNORE';
	$self->{timeout}->start($secs);
	my $ok = eval {
		while ($self->{out} !~ /\n/)
		{
			die "kafka_broker exited\n" unless $h->pumpable;
			$h->pump;
		}
		1;
	};
	if (!$ok)
	{
		my $err = $@;
		$err = "no reply within $secs s\n" if $self->{timeout}->is_expired;
		chomp $err;
		# Either way the channel is unusable (a late reply would be taken for the answer
		# to the next command): make sure the broker is gone and say how it ended.
		delete $self->{h};
		$self->{timeout}->start(5);
		eval { $h->kill_kill(grace => 2) } if $h->pumpable;
		eval { $h->finish };
		my $st = eval { $h->full_result };
		$err .= sprintf(' (broker wait status %d: exit %d, signal %d)', $st, $st >> 8, $st & 127)
		  if defined $st;
		my $log = $self->log_contents;
		$log = '...' . substr($log, -2000) if length $log > 2000;
		croak "waiting for $what from kafka_broker: $err\nlog $self->{log}:\n$log";
	}
	$self->{out} =~ s/^([^\n]*)\n//;
	return $1;
}

sub command
{
	my ($self, $line, %opts) = @_;
	croak "command must be one line" if $line =~ /[\r\n]/;
	$self->{in} .= "$line\n";
	return $self->_read_line($opts{timeout} || $PATIENCE, "the reply to '$line'");
}

sub command_ok
{
	my ($self, $line, %opts) = @_;
	my $reply = $self->command($line, %opts);
	croak "kafka_broker: '$line' failed: $reply" unless $reply =~ /^OK\b/;
	return $reply;
}

sub consume
{
	my ($self, %opts) = @_;
	my $until = delete $opts{until};
	my $deadline = delete $opts{deadline} // $PATIENCE;
	if (!$until && defined $opts{count} && !$opts{from_end})
	{
		my $count = $opts{count};
		$until = sub { @{ $_[0] } >= $count };
	}
	croak "consume: until needs a read from the beginning" if $until && $opts{from_end};
	my $start = time();
	my $timeout_ms = defined $opts{timeout_ms} ? $opts{timeout_ms} : 5000;
	while (1)
	{
		my $msgs = $self->_consume_once(%opts, timeout_ms => $timeout_ms);
		return $msgs if !$until || $until->($msgs) || time() - $start >= $deadline;
		$timeout_ms = $timeout_ms * 2 > 60_000 ? 60_000 : $timeout_ms * 2;
	}
}

sub arrivals_in_emit_order
{
	my ($self, $node, $where, %opts) = @_;
	my $db = $opts{db} // 'postgres';
	my $count = $node->safe_psql($db, "SELECT count(*) FROM outbox.events WHERE $where");
	my $msgs = $self->consume(topics => $opts{topics}, count => $count + ($opts{others} // 0));
	my %position = map { split /\|/ } split /\n/, $node->safe_psql($db,
		"SELECT id, row_number() OVER (ORDER BY id) FROM outbox.events WHERE $where");
	my ($arrived, $disorder) = _first_arrivals($msgs, \%position);
	return ($count, $arrived, $disorder);
}

# Of consumed messages, each id's first arrival, ids in %$position only
# (id => place in emit order): (distinct ids arrived, first arrivals after a
# later event of their key).
sub _first_arrivals
{
	my ($msgs, $position) = @_;
	my (%last, %seen);
	my $disorder = 0;
	for my $m (@$msgs)
	{
		my ($id) = map { $_->[1] } grep { $_->[0] eq 'outbox-id' } @{ $m->{headers} };
		next if !defined $id || !defined $position->{$id} || $seen{$id}++;
		my $pos = $position->{$id};
		$disorder++ if defined $last{ $m->{key} } && $pos < $last{ $m->{key} };
		$last{ $m->{key} } = $pos;
	}
	return (scalar(keys %seen), $disorder);
}

sub _consume_once
{
	my ($self, %opts) = @_;
	my $topics = $opts{topics} or croak "consume needs topics => [...]";
	$topics = [$topics] unless ref $topics;
	my $timeout_ms = $opts{timeout_ms};

	my @cmd = ("$KAFKA_DIR/kafka_consume", '-b', $self->{bootstrap});
	push @cmd, map { ('-t', $_) } @$topics;
	push @cmd, '--count', $opts{count} if defined $opts{count};
	push @cmd, '--timeout-ms', $timeout_ms;
	push @cmd, '--from-end' if $opts{from_end};
	my $props = $opts{props} || {};
	push @cmd, map { ('-X', "$_=$props->{$_}") } sort keys %$props;

	my ($out, $err) = ('', '');
	local $SIG{PIPE} = 'IGNORE';
	# The tool bounds itself (its idle timeout); this only catches a hung
	# process: one that printed no message for that long. A read of tens of
	# thousands of messages may take minutes on a loaded machine, and goes on
	# as long as messages keep coming.
	my $stall = $PATIENCE + 2 * $timeout_ms / 1000;
	my $ok = eval {
		my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
		my ($seen, $since) = (0, time());
		while ($h->pumpable)
		{
			$h->pump_nb;
			if (length($out) != $seen)
			{
				($seen, $since) = (length($out), time());
			}
			elsif (time() - $since > $stall)
			{
				$h->kill_kill;
				die "no message for $stall s\n";
			}
			Time::HiRes::usleep(20_000);
		}
		$h->finish;
	};
	croak "kafka_consume failed: " . ($@ || "exit status " . ($? >> 8)) . "\n$err"
	  unless $ok;

	my $json = OutboxJson::decoder()->utf8;
	my @msgs = map { $json->decode($_) } grep { length } split /\n/, $out;
	return \@msgs;
}

sub produce
{
	my ($self, %opts) = @_;
	my $topic = $opts{topic} or croak "produce needs topic";
	croak "produce needs value" unless exists $opts{value};
	my $kcat = _which('kcat') || _which('kafkacat')
	  or croak "kcat is not installed";

	# kcat -P with a file argument sends the whole file as one message, so any bytes
	# work, except that it skips an empty file. An empty value goes through kcat's
	# key-delimiter mode instead ("key<TAB>" on stdin), which needs a key.
	my $value = _bytes($opts{value});
	my $key = defined $opts{key} ? _bytes($opts{key}) : undef;
	my ($tmp, $stdin);
	if (length $value)
	{
		$tmp = File::Temp->new(TMPDIR => 1);
		binmode($tmp);
		print $tmp $value;
		close($tmp);
	}
	else
	{
		croak "kcat cannot send an empty value without a key" unless defined $key;
		croak "with an empty value the key must not contain tabs or newlines"
		  if $key =~ /[\t\n]/;
		$stdin = "$key\t\n";
	}

	my %props = (
		'message.timeout.ms' => 10000,
		%{ $opts{props} || {} });
	my @cmd = ($kcat, '-b', $self->{bootstrap}, '-P', '-t', $topic);
	push @cmd, '-p', $opts{partition} if defined $opts{partition};
	push @cmd, '-k', $key if defined $key && defined $tmp;
	push @cmd, '-K', '\t' if defined $stdin;
	for my $hdr (@{ $opts{headers} || [] })
	{
		my ($name, $val) = @$hdr;
		croak "header name must not contain '='" if $name =~ /=/;
		push @cmd, '-H', _bytes(defined $val ? "$name=$val" : $name);
	}
	push @cmd, map { ('-X', "$_=$props{$_}") } sort keys %props;
	push @cmd, $tmp->filename if defined $tmp;

	my ($out, $err) = ('', '');
	local $SIG{PIPE} = 'IGNORE';
	my $guard =
	  IPC::Run::timeout(30 + $props{'message.timeout.ms'} / 1000);
	my $ok = eval { IPC::Run::run(\@cmd, '<', \$stdin, '>', \$out, '2>', \$err, $guard) };
	$err .= $@ if !$ok && $@;
	return wantarray ? ($ok ? 1 : 0, $err) : ($ok ? 1 : 0);
}

# Character strings go out as UTF-8; byte strings as they are.
sub _bytes
{
	my ($s) = @_;
	utf8::encode($s) if utf8::is_utf8($s);
	return $s;
}

sub _which
{
	my ($prog) = @_;
	for my $dir (File::Spec->path)
	{
		return "$dir/$prog" if -x "$dir/$prog";
	}
	return undef;
}

sub stop
{
	my ($self) = @_;
	my $h = delete $self->{h} or return;
	# quit, then EOF (finish closes stdin once it is drained), then kill.
	local $SIG{PIPE} = 'IGNORE';
	$self->{in} .= "quit\n";
	$self->{timeout}->start(30);
	eval { $h->finish; 1 } or eval { $h->kill_kill(grace => 2); 1 };
	return;
}

sub DESTROY
{
	my ($self) = @_;
	local ($@, $!, $?);
	# A forked child (e.g. a helper process of the test) holds a copy of this object:
	# only the process that started the broker may stop it.
	return unless defined $self->{owner_pid} && $self->{owner_pid} == $$;
	eval { $self->stop };
	return;
}

1;
