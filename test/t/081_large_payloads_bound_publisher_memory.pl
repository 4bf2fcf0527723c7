# An application role that may only call emit() cannot make the publisher
# hold more than outbox.max_batch_bytes per batch (a claim used to read up to
# outbox.batch_size rows whatever they weighed, so 1000 events of 1 MiB,
# compressed to almost nothing in the table, cost the publisher gigabytes).
#
# The emit()-only role commits events of 900 kB (a payload of repeated
# characters: a few kB each in the table) in one transaction, twice, and the
# publisher's peak RSS (VmHWM) must grow by far less than the events weigh:
# with the default outbox.max_batch_bytes (4 MB) and batches_in_flight (4)
# a window holds about 20 of them, whatever their number. Every event is
# published (what the broker got, and in which order, other tests check).
#
# The same bound holds for events that are small as stored jsonb and large
# as the JSON text the publisher holds and sends: jsonb keeps a number's
# exponent, so [1e100000, ...] takes 150 bytes in the table and 900 kB as
# text. The claims weigh the text (an earlier build weighed the jsonb, took
# a whole outbox.batch_size of them per claim, and held hundreds of MB); and
# the jsonb too, for payloads of many small numbers, larger as jsonb than as
# text.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxKafka;
use OutboxNode qw(outbox_node wait_until wait_while_progressing kafka_sink_sql);

my $kafka = OutboxKafka->start(topics => ['big:1']);
my $node = outbox_node('bigmem', '');
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', kafka_sink_sql('k', $kafka->bootstrap, 'message.timeout.ms' => '30000'));
$node->safe_psql('postgres', q{SELECT outbox.add_route('big', 'k')});
$node->safe_psql('postgres', 'CREATE ROLE app LOGIN');
$node->safe_psql('postgres', 'GRANT USAGE ON SCHEMA outbox TO app');
$node->safe_psql('postgres', 'GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb) TO app');
$node->safe_psql('postgres', q{SELECT outbox.emit('big', '{"warm":1}')});
my $unpub = sub {
	$node->safe_psql('postgres', "SELECT count(*) FROM outbox.events WHERE status <> 'published'");
};
ok(defined wait_until(sub { $unpub->() eq '0' }), 'warm-up event published');
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox publisher'");
sub peak_mb {
	my ($kb) = slurp_file("/proc/$pid/status") =~ /VmHWM:\s+(\d+)/;
	return $kb / 1024;
}
my $base = peak_mb();
note(sprintf('publisher %d: peak RSS %.0f MB after warm-up', $pid, $base));

my $total = 0;
for my $n (150, 300) {
	$node->safe_psql('postgres', qq{DO \$\$ BEGIN FOR i IN 1 .. $n LOOP
		PERFORM outbox.emit('big', jsonb_build_object('i', $total + i, 'pad', repeat('x', 900000)), 'k');
		END LOOP; END \$\$}, extra_params => [ '-U', 'app' ]);
	$total += $n;
	# (As long as they keep going out: a loaded machine takes minutes.)
	ok(defined wait_while_progressing($unpub, sub { $_[0] eq '0' }), "$n events of 900 kB published");
	note(sprintf('after %d events of 900 kB (%.0f MB): publisher peak RSS %.0f MB (+%.0f MB)',
		$total, $total * 0.9, peak_mb(), peak_mb() - $base));
}
my $grew = peak_mb() - $base;
# 20 events of 900 kB in a window, each held as jsonb, as JSON text and in
# librdkafka's queue: about 55 MB; 450 events would be 1.2 GB.
cmp_ok($grew, '<', 160, sprintf('the publisher grew %.0f MB for %.0f MB of events', $grew, $total * 0.9));
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM outbox.workers WHERE last_batch_size > 20}), '0',
	'the last cycle took at most 4 batches of 5 such events (4 MB each)');

# Small as jsonb, 900 kB as text: the peak grows no further than for the
# events above (a high-water mark: only what goes past their peak shows).
my $base_numbers = peak_mb();
$node->safe_psql('postgres', q{DO $$ BEGIN FOR i IN 1 .. 300 LOOP
	PERFORM outbox.emit('big', ('[' || repeat('1e100000,', 8) || '1e100000]')::jsonb, 'k');
	END LOOP; END $$}, extra_params => [ '-U', 'app' ]);
is($node->safe_psql('postgres', q{SELECT max(pg_column_size(payload)) < 1000 AND min(octet_length(payload::text)) > 900000
	FROM outbox.events WHERE payload::text LIKE '[1000%'}), 't',
	'300 events of under 1 kB as jsonb and 900 kB as text');
ok(defined wait_while_progressing($unpub, sub { $_[0] eq '0' }), 'they are published');
my $grew_numbers = peak_mb() - $base_numbers;
cmp_ok($grew_numbers, '<', 160, sprintf('the publisher grew %.0f MB more for 270 MB of them as text',
	$grew_numbers));
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM outbox.workers WHERE last_batch_size > 20}), '0',
	'the last cycle took at most 4 batches of 5 such events');

# Many small numbers: 60 kB as text, six times that as jsonb, and a string
# per number while the text is made. The claims weigh the jsonb and the text
# as held (an earlier build weighed the text alone, took about 70 of them per
# claim, and kept every number's string for the whole cycle).
$base_numbers = peak_mb();
$node->safe_psql('postgres', q{DO $$ BEGIN FOR i IN 1 .. 300 LOOP
	PERFORM outbox.emit('big', ('[' || repeat('0,', 29999) || '0]')::jsonb, 'k');
	END LOOP; END $$}, extra_params => [ '-U', 'app' ]);
ok(defined wait_while_progressing($unpub, sub { $_[0] eq '0' }), '300 events of 30,000 numbers published');
$grew_numbers = peak_mb() - $base_numbers;
cmp_ok($grew_numbers, '<', 160, sprintf('the publisher grew %.0f MB more for them', $grew_numbers));

$node->stop;
$kafka->stop;
done_testing();
