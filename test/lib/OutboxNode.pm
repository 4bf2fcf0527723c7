# Helpers shared by the TAP tests: a PostgreSQL::Test::Cluster node with
# outbox preloaded, polling with a deadline, and reading what arrived.
package OutboxNode;

use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT_OK = qw(outbox_node wait_until kafka_sink_sql pending_count);

# A started node with outbox preloaded and quick publisher settings.
# Extra postgresql.conf lines may be passed as a string.
sub outbox_node {
	my ($name, $extra_conf, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%opts);
	$node->append_conf('postgresql.conf', <<"EOF");
shared_preload_libraries = 'outbox'
outbox.poll_interval = '200ms'
outbox.backoff_min = '50ms'
outbox.backoff_max = '1s'
log_min_messages = 'info'
EOF
	$node->append_conf('postgresql.conf', $extra_conf) if defined $extra_conf;
	$node->start;
	return $node;
}

# Poll $check (a code ref) until it returns true or $timeout seconds pass.
# Returns the elapsed seconds, or undef on timeout.
sub wait_until {
	my ($check, $timeout) = @_;
	$timeout //= 30;
	my $start = time();
	while (time() - $start < $timeout) {
		return time() - $start if $check->();
		usleep(50_000);
	}
	return undef;
}

# SQL creating a Kafka sink on the test broker with fast test timeouts.
sub kafka_sink_sql {
	my ($name, $bootstrap, %extra) = @_;
	my %options = (
		'bootstrap.servers' => $bootstrap,
		'message.timeout.ms' => '3000',
		'topic.metadata.refresh.interval.ms' => '1000',
		'reconnect.backoff.max.ms' => '1000',  # quick reconnects after an outage
		%extra);
	my $json = join(', ', map { qq{"$_": "$options{$_}"} } sort keys %options);
	return "SELECT outbox.create_sink('$name', 'kafka', '{$json}')";
}

sub pending_count {
	my ($node, $db, $where) = @_;
	$where = $where ? "AND $where" : '';
	return $node->safe_psql($db // 'postgres',
		"SELECT count(*) FROM outbox.events WHERE status = 'pending' $where");
}

1;
