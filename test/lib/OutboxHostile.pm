# Hostile input for outbox's SQL functions, and what the contract says each
# call must do with it. Pure Perl (no PostgreSQL), used by
# t/060_hostile_input_fails_cleanly.pl:
#
# - generators of strings (quotes, backslashes, SQL, JSON and format-string
#   fragments, control characters, multi-byte, combining, RTL, emoji and
#   noncharacter Unicode, look-alikes of the allowed characters, empty, long
#   and over 1 MiB) and of JSON texts with a descriptor of what each one is
#   (shape, object members after jsonb's last-key-wins, or why it is not JSON);
# - the naming rules of the contract, written independently of the C++;
# - a model of sinks and routes that says, for each call, which outcomes are
#   allowed: success, and/or a set of SQLSTATEs each with a pattern its
#   message must match (the argument it names);
# - SQL literal writers in every quoting style (for the psql batch).
#
# All randomness comes from Perl's rand(), so srand($seed) makes it repeatable.
package OutboxHostile;

use strict;
use warnings;
use Exporter 'import';
use Math::BigInt;

our @EXPORT_OK = qw(
  topic_ok pattern_ok sink_name_ok kafka_target_ok
  pick chance valid_run rand_str hostile hostile_short insert_bad
  jnull jbad jstr jnum jlit jarr jobj gen_json
  gen_topic gen_route_topic gen_payload gen_headers gen_key
  gen_sink_name gen_kind gen_options gen_pattern gen_target
  new_model expect apply best_route glob_match headers_ok key_size_ok headers_size_ok
  sql_literal show huge_budget
  KAFKA_ANY_PROPS);

# ---------------------------------------------------------------------------
# The contract's rules.
# ---------------------------------------------------------------------------

# 1 to 249 characters of [A-Za-z0-9._-] (no /i, no \w: ASCII only).
sub topic_ok { my ($s) = @_; return defined $s && $s =~ /\A[A-Za-z0-9._-]{1,249}\z/ }

# A topic in which '*' may also appear.
sub pattern_ok { my ($s) = @_; return defined $s && $s =~ /\A[A-Za-z0-9._*-]{1,249}\z/ }

# 1 to 63 characters of [A-Za-z0-9._-].
sub sink_name_ok { my ($s) = @_; return defined $s && $s =~ /\A[A-Za-z0-9._-]{1,63}\z/ }

# A Kafka target is a valid topic that Kafka can create: not "." nor "..".
sub kafka_target_ok { my ($s) = @_; return topic_ok($s) && $s ne '.' && $s ne '..' }

# ---------------------------------------------------------------------------
# Random strings.
# ---------------------------------------------------------------------------

sub pick { return $_[ int rand @_ ] }
sub chance { return rand() < $_[0] }

my @TOPIC_CHARS = ('A' .. 'Z', 'a' .. 'z', '0' .. '9', '.', '_', '-');
sub valid_run {
	my ($n, @alpha) = @_;
	@alpha = @TOPIC_CHARS unless @alpha;
	return join '', map { $alpha[ int rand @alpha ] } 1 .. $n if $n <= 512;
	# Long runs: a random block repeated (cheap; its randomness is not the point).
	my $block = join '', map { $alpha[ int rand @alpha ] } 1 .. 512;
	return substr($block x (int($n / 512) + 1), 0, $n);
}

# Every ASCII character but NUL that the rules refuse.
my @ASCII_BAD = grep { !/[A-Za-z0-9._-]/ } map { chr } 1 .. 127;

# Non-ASCII characters worth trying, many of them look-alikes of allowed ones
# (a locale-aware isalnum() or a case-folding comparison would take them).
my @UNICODE = (
	"\x{80}", "\x{85}", "\x{9f}", "\x{a0}", "\x{ad}", "\x{e9}", "\x{df}",
	"\x{301}",                           # combining acute accent
	"\x{202e}", "\x{202c}", "\x{200f}",  # RTL override, pop, RTL mark
	"\x{5d0}", "\x{627}",                # Hebrew alef, Arabic alef
	"\x{1f600}", "\x{200d}", "\x{200b}", # emoji, zero-width joiner and space
	"\x{ffff}", "\x{fffe}", "\x{feff}", "\x{fffd}", "\x{10ffff}", "\x{1fffe}",
	"\x{2028}", "\x{2029}",
	"\x{130}", "\x{131}",                # Turkish dotted I, dotless i
	"\x{ff21}", "\x{ff41}", "\x{ff10}",  # fullwidth A, a, 0
	"\x{661}", "\x{966}",                # Arabic-Indic one, Devanagari zero
	"\x{2024}", "\x{ff0e}", "\x{2e}\x{338}",  # one dot leader, fullwidth full stop
	"\x{2010}", "\x{2011}", "\x{2212}", "\x{ff0d}", "\x{ff3f}", "\x{2017}",
	"\x{212a}", "\x{17f}",               # Kelvin sign (folds to k), long s
	"\x{435}", "\x{3b1}", "\x{4e2d}", "\x{1d400}", "\x{e0041}");
my @BAD_CHARS = (@ASCII_BAD, @UNICODE);

# Whole strings that have broken quoting, escaping or formatting somewhere.
my @SPECIAL = (
	'', ' ', '  ', "'", "''", '"', '""', '\\', '\\\\', "\\'", "'\\", "\\\\'",
	"'; DROP TABLE public.canary; --",
	"x'); DROP TABLE outbox.sinks; --",
	"\"; DROP SCHEMA outbox CASCADE; --",
	"'||(SELECT pg_terminate_backend(pg_backend_pid()))||'",
	"1; SELECT pg_sleep(10)", "' OR '1'='1", "/* x */", "-- x", ';', 'a;b',
	'$$', '$$; DROP TABLE public.canary; $$', '$q$', '$1', '$$$$',
	"E'\\x41'", "E'\\\\'", "E'\\''", "U&'\\0041'", "U&'\\0000'",
	'\\.', '\\N', '\\copy x from program \'id\'', '\\! id', ':foo', ":'foo'", ':"foo"',
	'%s', '%s%s%s%s%s%n', '%n%n%n%n', '%x%x%x%p', '%1$s', '%-2147483647s', '%.*s',
	'%', '%%', '{0}', '${HOME}', '`id`', '$(id)',
	'{}', '[]', '{"a":', 'null', 'NULL', 'true', '{"a":"b"}', '[1,2', '\\u0000',
	'\\ud800', '1e999', 'NaN', '-0', '"\\"',
	"\t", "\n", "\r\n", "\r", "a\nb", "\x01", "\x07", "\x08", "\x0b", "\x0c",
	"\x1b[31mred\x1b[0m", "\x1f", "\x7f",
	"\x{e9}", "e\x{301}", "a\x{300}\x{301}\x{302}\x{303}\x{304}", "\x{202e}abc\x{202c}",
	"\x{5d0}\x{5d1}\x{5d2}", "\x{627}\x{644}\x{639}", "\x{1f600}",
	"\x{1f469}\x{200d}\x{1f469}\x{200d}\x{1f467}", "\x{ffff}", "\x{fffe}", "\x{feff}",
	"\x{10ffff}", "\x{2028}\x{2029}", "zam\x{f3}wienia", "\x{130}stanbul",
	"\x{ff21}\x{ff22}", "\x{661}\x{662}", "ord\x{435}rs", "orders\x{2024}created",
	"\x{212a}afka", "orders.created\n", "\norders.created", " orders.created",
	"orders.created ", "orders\tcreated", "orders/created", "orders.*", '*', '**', '.', '..',
	'-', '_', 'a b');

sub rand_char {
	my $r = rand;
	return $TOPIC_CHARS[ int rand @TOPIC_CHARS ] if $r < 0.45;
	return $ASCII_BAD[ int rand @ASCII_BAD ] if $r < 0.65;
	return $UNICODE[ int rand @UNICODE ] if $r < 0.80;
	return chr(0x80 + int rand 0x780) if $r < 0.88;     # two-byte UTF-8
	if ($r < 0.95) {                                    # three bytes, no surrogates
		my $c;
		do { $c = 0x800 + int rand 0xf800 } while $c >= 0xd800 && $c <= 0xdfff;
		return chr $c;
	}
	return chr(0x10000 + int rand 0x100000);            # four bytes
}

sub rand_str { my ($max) = @_; return join '', map { rand_char() } 1 .. int rand($max + 1) }

sub insert_bad {
	my ($s) = @_;
	my $bad = chance(0.7) ? pick(@BAD_CHARS) : pick(@SPECIAL);
	substr($s, int rand(length($s) + 1), 0) = $bad;
	return $s;
}

# Strings of 1 MiB and more are costly to carry around: each generator call
# may use one only while the budget lasts.
my $huge_left = 0;
sub huge_budget { $huge_left = $_[0] }

sub long_str {
	my $len = pick(300, 1000, 4096, 10_000, 10_000, 65_536);
	my $r = rand;
	return valid_run($len) if $r < 0.3;
	return insert_bad(valid_run($len)) if $r < 0.5;
	return pick("\x{e9}", "\x{1f600}", "e\x{301}", "'", '\\', "\x{ffff}", 'ab', "\n") x $len
	  if $r < 0.8;
	my $block = join '', map { rand_char() } 1 .. 512;
	return substr($block x (int($len / 512) + 1), 0, $len);
}

sub huge_str {
	return undef unless $huge_left > 0;
	$huge_left--;
	my $n = 1_048_576 + pick(-2, -1, 0, 1, 1000);
	return pick('x' x $n, "\x{e9}" x ($n >> 1), "\x{1f600}" x ($n >> 2),
		("'\\" x ($n >> 1)), insert_bad('x' x $n));
}

# Any hostile string (may be long, rarely over 1 MiB).
sub hostile {
	my $r = rand;
	return pick(@SPECIAL) if $r < 0.35;
	return rand_str(24) if $r < 0.60;
	return insert_bad(valid_run(1 + int rand 20)) if $r < 0.80;
	return pick(@SPECIAL) . pick(@SPECIAL) if $r < 0.90;
	return long_str() if $r < 0.985;
	return huge_str() // rand_str(8);
}

# A hostile string short enough to nest inside JSON many times.
sub hostile_short {
	my $r = rand;
	return pick(@SPECIAL) if $r < 0.4;
	return rand_str(16) if $r < 0.8;
	return insert_bad(valid_run(1 + int rand 12));
}

# ---------------------------------------------------------------------------
# JSON texts with descriptors: {text} is what is sent (undef: SQL NULL);
# {err} lists the SQLSTATEs PostgreSQL's jsonb input raises for it; else
# {shape} is object/array/string/number/bool/null, {str} a string's value,
# {num} a number's text as numeric_out prints it (undef when the model does
# not decide), {pairs} an object's members in order (duplicates included).
# ---------------------------------------------------------------------------

my %SHORT_ESCAPE = (8 => '\\b', 9 => '\\t', 10 => '\\n', 12 => '\\f', 13 => '\\r');

sub json_string {
	my ($s) = @_;
	my $q = $s;
	$q =~ s/([\\"])/\\$1/g;
	$q =~ s{([\x00-\x1f])}{
		(exists $SHORT_ESCAPE{ord $1} && chance(0.7)) ? $SHORT_ESCAPE{ord $1}
		  : sprintf('\\u%04x', ord $1)}ge;
	$q =~ s{/}{\\/}g if chance(0.1);
	if (length($q) < 100_000 && chance(0.3)) {
		$q =~ s{([^\x00-\x7e])}{
			my $o = ord $1;
			$o > 0xffff
			  ? sprintf('\\u%04x\\u%04X', 0xd800 + (($o - 0x10000) >> 10), 0xdc00 + (($o - 0x10000) & 0x3ff))
			  : sprintf(chance(0.5) ? '\\u%04x' : '\\u%04X', $o)}ge;
	}
	return qq{"$q"};
}

sub ws { return chance(0.75) ? '' : pick(' ', "\t", "\n", "\r\n", '   ') }

sub jnull { return { text => undef } }
sub jbad { my ($text, @codes) = @_; return { text => $text, err => [ @codes ? @codes : '22P02' ] } }
sub jstr { my ($s) = @_; return { text => json_string($s), shape => 'string', str => $s } }
sub jnum { my ($text, $out) = @_; return { text => $text, shape => 'number', num => $out } }
sub jlit { my ($v) = @_; return { text => $v, shape => $v eq 'null' ? 'null' : 'bool' } }

sub jarr {
	my (@el) = @_;
	return { text => '[' . ws() . join(ws() . ',' . ws(), map { $_->{text} } @el) . ws() . ']',
		shape => 'array' };
}

# jobj([key, descriptor], ...)
sub jobj {
	my (@pairs) = @_;
	my $text = '{' . ws()
	  . join(ws() . ',' . ws(), map { json_string($_->[0]) . ws() . ':' . ws() . $_->[1]{text} } @pairs)
	  . ws() . '}';
	return { text => $text, shape => 'object', pairs => \@pairs };
}

# The members jsonb keeps: the last value of each key.
sub members {
	my ($d) = @_;
	my %m;
	$m{ $_->[0] } = $_->[1] for @{ $d->{pairs} };
	return \%m;
}

# JSON numbers and how numeric_out prints them.
my @NUMBERS = (
	[ '0', '0' ], [ '-0', '0' ], [ '1', '1' ], [ '-1', '-1' ], [ '3.14', '3.14' ],
	[ '1e3', '1000' ], [ '1E2', '100' ], [ '6.379e3', '6379' ], [ '1.0e1', '10' ],
	[ '6379', '6379' ], [ '65535', '65535' ], [ '65536', '65536' ], [ '-0.0', '0.0' ],
	[ '6379.0', '6379.0' ], [ '6379.5', '6379.5' ], [ '1e20', '100000000000000000000' ],
	[ '2147483647', '2147483647' ], [ '2147483648', '2147483648' ],
	[ '9223372036854775807', '9223372036854775807' ],
	[ '9223372036854775808', '9223372036854775808' ],
	[ '-9223372036854775809', '-9223372036854775809' ],
	[ '123456789012345678901234567890', '123456789012345678901234567890' ],
	[ '1.5e+300', '15' . ('0' x 299) ], [ '1e-400', '0.' . ('0' x 400) ], [ '-2.5E-3', '-0.0025' ], [ '0.1', '0.1' ]);

# Texts PostgreSQL refuses as jsonb, with the SQLSTATE it raises.
my @BAD_JSON = (
	[''], [' '], ["{'a': 'b'}"], ['{"a": 1,}'], ['[1, 2'], ['{"a"}'], ['{"a" 1}'], ['NaN'],
	['Infinity'], ['-Infinity'], ['undefined'], ['{a: 1}'], ['"unterminated'],
	["\"raw\x01control\""], ["\"tab\there\""], ['"bad \\x escape"'], ['"\\u12"'],
	[ '"\\u0000"', '22P05' ], [ '{"k": "\\u0000"}', '22P05' ], [ '{"k\\u0000": "v"}', '22P05' ],
	['"\\ud800"'], ['"\\udc00"'], ['"\\ud83d\\u0041"'], [ '1e1000000', '22003' ], ['01'],
	['-01'], ['+1'], ['.5'], ['1.'], ['0x10'], ['[1,,2]'], ['{"a":1}{"b":2}'],
	["// c\n{}"], ['/* c */ {}'], ["'; DROP TABLE public.canary; --"], ['$$'], ['%s%n'],
	['{"a": "b"} x'], ['tru'], ['nul'], ['[[[[['], ['{"a":'], ['"\\'], ['[1]]'],
	['{"a":1}}'], ["\x{a0}{}"], ["\x{feff}{}"], ['1e'], ['-'], ['True'], ['NULL'],
	['{"a" : 1 : 2}'], ["{\"a\": \"\x{1f600}\x1f\"}"],
	[ ('[' x 100_000) . (']' x 100_000), '54001' ],
	[ ('{"a":' x 100_000) . '1' . ('}' x 100_000), '54001' ]);

sub bad_json { my $b = pick(@BAD_JSON); return jbad(@$b) }

sub gen_json {
	my ($depth) = @_;
	my $r = rand;
	if ($depth > 0 && $r < 0.25) {
		my @keys = map { hostile_short() } 0 .. int rand 5;
		push @keys, $keys[0] if @keys && chance(0.1);    # a duplicate key
		return jobj(map { [ $_, gen_json($depth - 1) ] } @keys);
	}
	return jarr(map { gen_json($depth - 1) } 1 .. int rand 5) if $depth > 0 && $r < 0.40;
	return jstr(hostile_short()) if $r < 0.70;
	return jnum(@{ pick(@NUMBERS) }) if $r < 0.85;
	return jlit(pick('true', 'false', 'null'));
}

# ---------------------------------------------------------------------------
# Arguments.
# ---------------------------------------------------------------------------

sub gen_topic {
	my $r = rand;
	return undef if $r < 0.04;
	return valid_run(1 + int rand 30) if $r < 0.40;
	return valid_run(pick(1, 248, 249, 249, 250, 251, 300)) if $r < 0.50;
	return pick('.', '..', '-', '_', '...', '-_.', '0') if $r < 0.53;
	return hostile();
}

# Topics from a small alphabet, so that they often match route patterns.
sub gen_route_topic {
	my $r = rand;
	return join('', map { pick('a', 'b', '.', '-') } 0 .. int rand 6) if $r < 0.75;
	return undef if $r < 0.78;
	return pick('a*', 'a b', "a\n", "\x{e9}", '*', '', "a\x{0301}") if $r < 0.85;
	return valid_run(pick(249, 250, 10_000)) if $r < 0.88;
	return hostile_short();
}

sub gen_payload {
	my $r = rand;
	return jnull() if $r < 0.03;
	return bad_json() if $r < 0.08;
	return gen_json(int rand 5) if $r < 0.75;
	return jstr(hostile()) if $r < 0.85;
	if ($r < 0.88) {
		my $n = pick(100, 1000, 3000);
		return { text => ('[' x $n) . (']' x $n), shape => 'array' };
	}
	if ($r < 0.92) {
		my @values = map { jstr(hostile_short()) } 1 .. 20;
		return jobj(map { [ "k$_", $values[ $_ % 20 ] ] } 1 .. pick(100, 2000));
	}
	return jnum(@{ pick(@NUMBERS) }) if $r < 0.96;
	return jlit(pick('true', 'false', 'null'));
}

sub gen_key {
	my $r = rand;
	return undef if $r < 0.3;
	return valid_run(1 + int rand 20) if $r < 0.45;
	return hostile();
}

sub gen_headers {
	my $r = rand;
	return jnull() if $r < 0.30;
	return bad_json() if $r < 0.38;
	if ($r < 0.48) {    # not an object
		return pick(jarr(), jarr(jstr('a')), jstr(hostile_short()), jnum(@{ pick(@NUMBERS) }),
			jlit('null'), jlit('true'), jarr(jobj([ 'a', jstr('b') ])));
	}
	my @pairs;
	if (chance(0.03)) {    # many members: a few hostile keys among plain ones
		my @values = map { jstr(hostile_short()) } 1 .. 20;
		@pairs = map { [ chance(0.02) ? hostile_short() : "h$_", $values[ $_ % 20 ] ] } 1 .. pick(300, 2000);
	} else {
		@pairs = map { [ hostile_short(), jstr(chance(0.05) ? hostile() : hostile_short()) ] } 1 .. int rand 6;
	}
	if (@pairs && chance(0.1)) {    # a duplicate key, either value last
		my $dup = pick(@pairs)->[0];
		my $other = chance(0.5) ? jnum('1', '1') : jstr('v');
		splice @pairs, int rand(@pairs + 1), 0, [ $dup, $other ];
	}
	if (chance(0.25)) {    # one value that is not a string
		my $bad = pick(jnum(@{ pick(@NUMBERS) }), jlit('true'), jlit('false'), jlit('null'),
			jobj([ 'x', jstr('y') ]), jarr(jstr('x')), jarr(), jobj());
		splice @pairs, int rand(@pairs + 1), 0, [ hostile_short(), $bad ];
	}
	return jobj(@pairs);
}

my @NAME_POOL = ((map { "s$_" } 0 .. 14), 'k.main', 'r.main', 'kafka-1', 'redis_2', 'A-z.0_9',
	'x' x 63, '.', '..', '-');

sub gen_sink_name {
	my $r = rand;
	return pick(@NAME_POOL) if $r < 0.55;
	return undef if $r < 0.58;
	return valid_run(1 + int rand 63) if $r < 0.66;
	return valid_run(pick(63, 64, 65, 300)) if $r < 0.72;
	return insert_bad(pick(@NAME_POOL)) if $r < 0.85;
	return hostile();
}

sub gen_kind {
	my $r = rand;
	return 'kafka' if $r < 0.45;
	return 'redis' if $r < 0.90;
	return pick(undef, '', 'Kafka', 'REDIS', ' kafka', 'redis ', "kafka\n", 'rabbitmq', 'kafka;',
		"redis'", hostile_short());
}

use constant KAFKA_ANY_PROPS =>
  [qw(bootstrap.servers client.id sasl.username sasl.password)];
my %KAFKA_ENUM = (
	'acks'               => [qw(all -1 0 1)],
	'compression.type'   => [qw(none gzip snappy lz4 zstd)],
	'enable.idempotence' => [qw(true false)],
	'linger.ms'          => [qw(0 5 1000)]);
# Never allowed in a sink (the allowlist refuses every property it does not
# list; these are some librdkafka knows).
my %KAFKA_REFUSED = map { $_ => 1 } qw(plugin.library.paths interceptors opaque
  ssl.engine.location ssl.providers sasl.kerberos.kinit.cmd transactional.id group.id log.queue);

# A key no librdkafka property has: it holds a character outside [a-z0-9._].
sub unknown_key {
	my $k = hostile_short();
	$k = "X-$k" if $k =~ /\A[a-z0-9._]*\z/;
	return $k;
}

sub any_value {
	my $r = rand;
	return jnum(@{ pick(@NUMBERS) }) if $r < 0.5;
	return pick(jlit('true'), jlit('null'), jarr(jstr('x')), jobj([ 'a', jstr('b') ]));
}

sub kafka_pairs {
	my @pairs;
	my $r = rand;
	if ($r < 0.85) {
		push @pairs, [ 'bootstrap.servers', jstr(chance(0.5) ? '127.0.0.1:9092' : hostile() || 'h') ];
	} elsif ($r < 0.92) {
		push @pairs, [ 'bootstrap.servers', chance(0.5) ? jstr('') : any_value() ];
	}
	for (1 .. int rand 4) {
		my $s = rand;
		if ($s < 0.35) {
			push @pairs, [ pick(@{ KAFKA_ANY_PROPS() }), jstr(hostile()) ];
		} elsif ($s < 0.65) {
			my $k = pick(sort keys %KAFKA_ENUM);
			push @pairs, [ $k, jstr(chance(0.6) ? pick(@{ $KAFKA_ENUM{$k} }) : 'bad' . hostile_short()) ];
		} elsif ($s < 0.75) {
			push @pairs, [ pick(sort keys %KAFKA_REFUSED), jstr('x') ];
		} elsif ($s < 0.90) {
			push @pairs, [ unknown_key(), jstr(hostile_short()) ];
		} else {
			push @pairs, [ pick(@{ KAFKA_ANY_PROPS() }, sort keys %KAFKA_ENUM), any_value() ];
		}
	}
	@pairs = reverse @pairs if chance(0.2);
	return @pairs;
}

sub redis_int_value {
	my $r = rand;
	return jnum(@{ pick(@NUMBERS) }) if $r < 0.3;
	return jstr(pick('0', '1', '6379', '65535', '65536', '-1', '-0', '007', '2147483647',
			'2147483648', '9223372036854775807', '9223372036854775808', '99999999999999999999')) if $r < 0.7;
	return jstr(pick('', ' 1', '1 ', '+1', '-', '0x10', '1e3', '63 79', '1.5', "1\n", "\x{661}",
			"\x{ff11}", hostile_short())) if $r < 0.92;
	return any_value();
}

sub redis_pairs {
	my @pairs;
	for (0 .. int rand 4) {
		my $k = chance(0.88) ? pick(qw(host port db password mode maxlen)) : unknown_key();
		my $v;
		if ($k eq 'host') {
			$v = chance(0.85) ? jstr(pick('127.0.0.1', 'localhost', '', hostile())) : any_value();
		} elsif ($k eq 'password') {
			$v = chance(0.85) ? jstr(hostile()) : any_value();
		} elsif ($k eq 'mode') {
			$v = chance(0.85)
			  ? jstr(pick('stream', 'publish', 'list', 'list', 'Stream', 'queue', ' list', hostile_short()))
			  : any_value();
		} elsif ($k eq 'port' || $k eq 'db' || $k eq 'maxlen') {
			$v = redis_int_value();
		} else {
			$v = jstr(hostile_short());
		}
		push @pairs, [ $k, $v ];
	}
	return @pairs;
}

# Options for create_sink: mostly an object for the given kind (or the other
# kind), sometimes SQL NULL, bad JSON, or JSON that is no object.
sub gen_options {
	my ($kind) = @_;
	my $r = rand;
	return jnull() if $r < 0.03;
	return bad_json() if $r < 0.07;
	return pick(jarr(), jarr(jobj([ 'host', jstr('h') ])), jstr('{}'), jnum('1', '1'), jlit('null'),
		jlit('true')) if $r < 0.12;
	my $as = chance(0.85) && defined $kind && ($kind eq 'kafka' || $kind eq 'redis')
	  ? $kind : pick('kafka', 'redis');
	return jobj($as eq 'kafka' ? kafka_pairs() : redis_pairs());
}

my @PATTERN_POOL = ('*', 'a*', '*.b', 'a.*', 'a.b', '**', '*a*', 'orders.*', 'a-*-b');

sub gen_pattern {
	my $r = rand;
	return join('', map { pick('a', 'b', '.', '-', '*') } 0 .. int rand 6) if $r < 0.6;
	return pick(@PATTERN_POOL) if $r < 0.68;
	return undef if $r < 0.71;
	return valid_run(pick(248, 249, 250), 'a', '*') if $r < 0.76;
	return insert_bad(pick(@PATTERN_POOL)) if $r < 0.86;
	return hostile();
}

sub gen_target {
	my $r = rand;
	return undef if $r < 0.4;
	return join('', map { pick('a', 'b', '.', '-') } 0 .. int rand 6) if $r < 0.6;
	return pick('.', '..', '', 'any key: with spaces {and} braces', 'k*') if $r < 0.7;
	return valid_run(pick(249, 250)) if $r < 0.73;
	return hostile();
}

# ---------------------------------------------------------------------------
# The model: sinks and routes as the contract says they are after each call.
# ---------------------------------------------------------------------------

sub new_model { return { sinks => {}, routes => {} } }

# '*' matches any run of characters: first and last pieces anchor, middle
# pieces are found leftmost in order (greedy-leftmost is exact for '*'-only
# globs, and linear, unlike a backtracking regex on a 10k topic).
sub glob_match {
	my ($p, $t) = @_;
	my @seg = split /\*/, $p, -1;
	return $p eq $t if @seg == 1;
	my $first = shift @seg;
	my $last = pop @seg;
	return 0 if length($first) + length($last) > length($t);
	return 0 unless substr($t, 0, length $first) eq $first;
	return 0 unless substr($t, length($t) - length($last)) eq $last;
	my ($pos, $end) = (length $first, length($t) - length($last));
	for my $s (@seg) {
		next if $s eq '';
		my $i = index($t, $s, $pos);
		return 0 if $i < 0 || $i + length($s) > $end;
		$pos = $i + length $s;
	}
	return 1;
}

# An exact pattern beats any wildcard; then the longer pattern; then the
# smaller in byte order (patterns are ASCII, so code point order is byte order).
sub beats {
	my ($x, $y) = @_;
	my ($xe, $ye) = (index($x, '*') < 0 ? 1 : 0, index($y, '*') < 0 ? 1 : 0);
	return $xe if $xe != $ye;
	return length($x) > length($y) if length($x) != length($y);
	return $x lt $y;
}

sub best_route {
	my ($m, $topic) = @_;
	my $best;
	for my $p (keys %{ $m->{routes} }) {
		next unless glob_match($p, $topic);
		$best = $p if !defined $best || beats($p, $best);
	}
	return undef unless defined $best;
	my $r = $m->{routes}{$best};
	return [ $best, $r->{sink}, $r->{target} // $topic ];
}

# emit()'s size limits (names.hpp): a key of at most 4096 bytes; headers of
# at most 16384 bytes as jsonb's text. The text is estimated (jsonb's
# output: '{"k": "v", ...}', JSON escapes, UTF-8): 'ok', 'over', or 'near'
# when within 64 bytes of the limit, where the contract's rule is not
# decided by this estimate.
sub key_size_ok {
	my ($k) = @_;
	return 1 unless defined $k;
	my $copy = $k;
	utf8::encode($copy);
	return length($copy) <= 4096;
}

sub json_text_bytes {
	my ($s) = @_;
	my $n = 2;    # the quotes
	for my $ch (split //, $s) {
		my $o = ord $ch;
		if ($ch eq '"' || $ch eq "\\" || $ch eq "\b" || $ch eq "\f" || $ch eq "\n" || $ch eq "\r"
			|| $ch eq "\t") {
			$n += 2;
		} elsif ($o < 0x20) {
			$n += 6;
		} else {
			$n += $o < 0x80 ? 1 : $o < 0x800 ? 2 : $o < 0x10000 ? 3 : 4;
		}
	}
	return $n;
}

sub headers_size_ok {
	my ($d) = @_;
	return 'ok' unless defined $d && ($d->{shape} // '') eq 'object';
	my $m = members($d);
	my @keys = keys %$m;
	my $len = 2 + (@keys ? 2 * (@keys - 1) : 0);
	for my $k (@keys) {
		my $v = $m->{$k};
		$len += json_text_bytes($k) + 2 + (defined $v->{str} ? json_text_bytes($v->{str}) : 16);
	}
	return 'near' if abs($len - 16384) <= 64;
	return $len <= 16384 ? 'ok' : 'over';
}

sub headers_ok {
	my ($d) = @_;
	return 0 unless ($d->{shape} // '') eq 'object';
	my $m = members($d);
	return !grep { $_->{shape} ne 'string' } values %$m;
}

# 'valid', 'invalid', or 'either' when the contract does not decide.
sub kafka_verdict {
	my ($d) = @_;
	my $m = members($d);
	for my $k (keys %$m) {
		my $v = $m->{$k};
		return 'invalid' if $v->{shape} ne 'string' || $KAFKA_REFUSED{$k};
		next if grep { $_ eq $k } @{ KAFKA_ANY_PROPS() };
		return 'invalid' unless $KAFKA_ENUM{$k} && grep { $_ eq $v->{str} } @{ $KAFKA_ENUM{$k} };
	}
	my $b = $m->{'bootstrap.servers'};
	return 'invalid' unless $b && $b->{str} ne '';
	return 'valid';
}

sub redis_verdict {
	my ($d) = @_;
	my $m = members($d);
	my %range = (port => [ 1, 65535 ], db => [ 0, 2147483647 ], maxlen => [ 1, '9223372036854775807' ]);
	my ($either, $maxlen) = (0, 0);
	for my $k (keys %$m) {
		my $v = $m->{$k};
		my $numeric = exists $range{$k};
		return 'invalid' unless $numeric || grep { $_ eq $k } qw(host password mode);
		return 'invalid' unless $v->{shape} eq 'string' || ($numeric && $v->{shape} eq 'number');
		if ($k eq 'host') {
			return 'invalid' if $v->{str} eq '';
		} elsif ($k eq 'mode') {
			return 'invalid' unless grep { $_ eq $v->{str} } qw(stream publish list);
		} elsif ($numeric) {
			my $text = $v->{shape} eq 'number' ? $v->{num} : $v->{str};
			# A number like 6379.0 is an integer not written as one: in
			# range, the contract says neither way.
			my $dotzero = $v->{shape} eq 'number' && $text =~ /\A-?[0-9]+\.0+\z/a;
			return 'invalid' unless $text =~ /\A-?[0-9]+\z/a || $dotzero;
			(my $int = $text) =~ s/\..*//s;
			my $n = Math::BigInt->new($int);
			return 'invalid' if $n < $range{$k}[0] || $n > Math::BigInt->new($range{$k}[1]);
			$either = 1 if $dotzero;
			$maxlen = 1 if $k eq 'maxlen';
		}
	}
	my $mode = $m->{mode} ? $m->{mode}{str} : 'stream';
	return 'invalid' if $maxlen && $mode ne 'stream';
	return $either ? 'either' : 'valid';
}

# What a call may do. $c: {phase, fn, a => [texts], j => {argindex => descriptor},
# maxp}; $plen: octet_length(payload::text) as PostgreSQL computed it.
# Returns {ok => success allowed, errs => [[sqlstate, message regex], ...],
# route => [pattern, sink, target] or undef (route_for)}.
sub expect {
	my ($m, $c, $plen) = @_;
	my ($fn, $a, $phase) = ($c->{fn}, $c->{a}, $c->{phase});
	my (@errs, $ok);
	$ok = 1;
	my $must = sub { push @errs, [@_]; $ok = 0 };    # an error the call must raise
	my $may = sub { push @errs, [@_] };              # an error the call may raise

	# jsonb arguments are cast from text before the call.
	my @json_err = map { @{ $c->{j}{$_}{err} } } grep { $c->{j}{$_}{err} } sort keys %{ $c->{j} };
	$may->($_, qr/./s) for @json_err;
	if ($phase eq 'app_plain') {    # no EXECUTE on any outbox function
		$must->('42501', qr/permission denied/);
		return { ok => 0, errs => \@errs };
	}
	return { ok => 0, errs => \@errs } if @json_err;
	my $admin = $phase ne 'app_granted';    # app_granted: EXECUTE on all, not the owner

	if ($fn =~ /^emit/) {
		my ($t, $p, $k, $h) = @$a;
		$must->('22023', qr/topic/) unless topic_ok($t);
		$must->('22023', qr/payload/) if !defined $p;
		$must->('22023', qr/payload/) if defined $plen && $plen > $c->{maxp};
		$must->('22023', qr/headers/) if defined $h && !headers_ok($c->{j}{3});
		$must->('22023', qr/key is too large/) unless key_size_ok($k);
		if (defined $h && headers_ok($c->{j}{3})) {
			my $size = headers_size_ok($c->{j}{3});
			$must->('22023', qr/headers are too large/) if $size eq 'over';
			$may->('22023', qr/headers are too large/) if $size eq 'near';
		}
	} elsif ($fn eq 'create_sink') {
		my ($n, $k, $o) = @$a;
		$must->('22023', qr/name/) unless sink_name_ok($n);
		my $kind_ok = defined $k && ($k eq 'kafka' || $k eq 'redis');
		$must->('22023', qr/kind/) unless $kind_ok;
		my $d = $c->{j}{2};
		if (!defined $o || $d->{shape} ne 'object') {
			$must->('22023', qr/options/);
		} elsif ($kind_ok) {
			my $v = $k eq 'kafka' ? kafka_verdict($d) : redis_verdict($d);
			$must->('22023', qr/invalid options for \Q$k\E sink/) if $v eq 'invalid';
			$may->('22023', qr/invalid options for \Q$k\E sink/) if $v eq 'either';
		}
		$must->('42710', qr/already exists/) if $admin && defined $n && $m->{sinks}{$n};
	} elsif ($fn eq 'drop_sink') {
		my ($n) = @$a;
		if (!defined $n) {
			$must->('22023', qr/name/);
		} elsif ($admin) {
			if (!$m->{sinks}{$n}) {
				$must->('42704', qr/does not exist/);
				$may->('22023', qr/name/) unless sink_name_ok($n);
			} elsif (grep { $_->{sink} eq $n } values %{ $m->{routes} }) {
				$must->('2BP01', qr/route/);
			}
		}
	} elsif ($fn eq 'add_route' || $fn eq 'add_route2') {
		my ($p, $s, $t) = @$a;
		$must->('22023', qr/pattern/) unless pattern_ok($p);
		$must->('22023', qr/sink/) unless defined $s;
		if ($admin && defined $s) {
			if (!$m->{sinks}{$s}) {
				$must->('42704', qr/does not exist/);
			} elsif (defined $t) {
				my $good = $m->{sinks}{$s}{kind} eq 'kafka' ? kafka_target_ok($t) : length($t) > 0;
				$must->('22023', qr/target/) unless $good;
			}
		}
		$must->('42710', qr/already exists/) if $admin && defined $p && $m->{routes}{$p};
	} elsif ($fn eq 'remove_route' || $fn eq 'pause' || $fn eq 'resume') {
		my ($p) = @$a;
		if (!defined $p) {
			$must->('22023', qr/pattern/);
		} elsif ($admin && !$m->{routes}{$p}) {
			$must->('42704', qr/no route/);
			$may->('22023', qr/pattern/) unless pattern_ok($p);
		}
	} elsif ($fn eq 'route_for') {
		my ($t) = @$a;
		if (!defined $t) {
			$must->('22023', qr/topic/);
		} else {
			$may->('22023', qr/topic/) unless topic_ok($t);
		}
	} else {
		die "unknown function $fn";
	}
	$must->('42501', qr/permission denied/) if !$admin && $fn !~ /^emit/;
	my %e = (ok => $ok, errs => \@errs);
	$e{route} = best_route($m, $a->[0]) if $fn eq 'route_for' && $ok;
	return \%e;
}

# A call succeeded: change the model as it changed the catalog.
sub apply {
	my ($m, $c) = @_;
	my ($fn, $a) = ($c->{fn}, $c->{a});
	if ($fn eq 'create_sink') {
		$m->{sinks}{ $a->[0] } = { kind => $a->[1], case => $c->{id} };
	} elsif ($fn eq 'drop_sink') {
		delete $m->{sinks}{ $a->[0] };
	} elsif ($fn eq 'add_route' || $fn eq 'add_route2') {
		$m->{routes}{ $a->[0] } = { sink => $a->[1], target => $a->[2], paused => 0 };
	} elsif ($fn eq 'remove_route') {
		delete $m->{routes}{ $a->[0] };
	} elsif ($fn eq 'pause' || $fn eq 'resume') {
		$m->{routes}{ $a->[0] }{paused} = $fn eq 'pause' ? 1 : 0 if $m->{routes}{ $a->[0] };
	}
}

# ---------------------------------------------------------------------------
# SQL literals in every quoting style (standard_conforming_strings = on).
# ---------------------------------------------------------------------------

sub sql_literal {
	my ($s, $style) = @_;
	return 'NULL' unless defined $s;
	$style //= pick(qw(standard standard escape dollar unicode));
	if ($style eq 'standard') {
		(my $q = $s) =~ s/'/''/g;
		return "'$q'";
	}
	if ($style eq 'escape') {
		my $q = $s;
		$q =~ s/\\/\\\\/g;
		$q =~ s/'/chance(0.5) ? "\\'" : "''"/ge;
		$q =~ s/([\x01-\x1f\x7f])/sprintf('\\x%02x', ord $1)/ge;
		$q =~ s{([^\x00-\x7f])}{ord($1) > 0xffff ? sprintf('\\U%08X', ord $1) : sprintf('\\u%04x', ord $1)}ge
		  if length($q) < 100_000 && chance(0.5);
		return "E'$q'";
	}
	if ($style eq 'dollar') {
		# The string ends at the first "$tag$": no "$tag" may occur in it.
		my $tag = pick('', 'q', 'x_1', 'body', 'T');
		my $n = 0;
		$tag = 'h' . $n++ while index($s, "\$$tag") >= 0;
		return "\$$tag\$$s\$$tag\$";
	}
	if ($style eq 'unicode') {
		my $q = $s;
		$q =~ s/\\/\\\\/g;
		$q =~ s/'/''/g;
		$q =~ s{([^\x20-\x7e])}{ord($1) > 0xffff ? sprintf('\\+%06X', ord $1) : sprintf('\\%04X', ord $1)}ge;
		return "U&'$q'";
	}
	die "unknown literal style $style";
}

# A string for a failure message: printable ASCII, cut, with its length.
sub show {
	my ($s) = @_;
	return 'NULL' unless defined $s;
	my $t = substr($s, 0, 80);
	$t =~ s/([^\x20-\x7e])/sprintf('\\x{%x}', ord $1)/ge;
	my $cut = length($t) > 80 || length($s) > 80;
	return "'" . substr($t, 0, 80) . "'" . ($cut ? sprintf('...(%d chars)', length $s) : '');
}

1;
