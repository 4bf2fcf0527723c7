# Hostile input fails cleanly.
#
# Thousands of generated calls of outbox.emit(), create_sink(), drop_sink(),
# add_route(), remove_route(), pause(), resume() and route_for() with quotes,
# backslashes, SQL, JSON and format-string fragments, control characters,
# multi-byte, combining, RTL, emoji and noncharacter Unicode, look-alikes of
# the allowed characters, empty, NULL, long and over-1-MiB strings, and jsonb
# of every wrong shape. For every call, either
# - a clean ERROR with the SQLSTATE the contract gives (22023 with a message
#   naming the argument; 42710, 42704, 2BP01; 42501 for roles that do not
#   own the extension; 22P02/22P05/22003/54001 when the text is no jsonb at
#   all) and a message that is valid UTF-8, or
# - success, with exactly the input stored: an event's row equals its
#   arguments, a sink and a route read back verbatim, and route_for()
#   returns the route the contract's precedence picks (computed here).
# A topic, sink name or pattern is accepted iff the contract's rule, written
# here in Perl, allows it. The server never crashes, no input causes a syntax
# error, and nothing but the intended rows changes: the catalog (relations of
# every schema, schemas, functions, triggers, roles, databases, extensions)
# is the same after the run, and a canary table survives.
#
# Most calls run server-side in a PL/pgSQL loop that catches each error; a
# smaller batch goes through psql as separate statements without any
# exception wrapper, with every literal quoting style, plus the ways a
# client can try to smuggle a NUL byte in (PostgreSQL text cannot hold one:
# the client must get a clean error) and a LATIN1 client.
#
# Deterministic: the seed is printed; rerun one with OUTBOX_HOSTILE_SEED=<n>.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use Encode qw(encode_utf8 decode_utf8);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use OutboxHostile qw(
  topic_ok pattern_ok sink_name_ok kafka_target_ok
  pick chance valid_run hostile hostile_short
  jnull jbad jstr jnum jlit jarr jobj
  gen_topic gen_route_topic gen_payload gen_headers gen_key
  gen_sink_name gen_kind gen_options gen_pattern gen_target
  new_model expect apply best_route headers_ok key_size_ok headers_size_ok
  sql_literal show huge_budget);

my $seed = $ENV{OUTBOX_HOSTILE_SEED} // 20261121;
die "OUTBOX_HOSTILE_SEED must be a number\n" unless $seed =~ /\A[0-9]+\z/;
diag("hostile input seed $seed (rerun with OUTBOX_HOSTILE_SEED=$seed)");
srand($seed);
my $t0 = time;

my $N_SUPER = 10000;     # random calls by the superuser, server-side
my $N_GRANTED = 400;     # by a role granted EXECUTE on everything, not the owner
my $N_PLAIN = 60;        # by a role with no privilege at all
my $N_CLIENT = 400;      # through psql, one statement each
my $MAXP = 1_048_576;    # outbox.max_payload_bytes default (1MB)

# ---------------------------------------------------------------------------
# The node: outbox not preloaded, so nothing is ever delivered anywhere.
# ---------------------------------------------------------------------------

my $node = PostgreSQL::Test::Cluster->new('hostile');
$node->init;
# ERRORs are what this test makes by the thousand: keep them (and 1 MiB
# statements) out of the log, which is read for crashes (LOG level and up).
$node->append_conf('postgresql.conf', <<'EOF');
log_statement = none
log_min_messages = log
log_min_error_statement = panic
EOF
$node->start;
my $db = 'hostile';
# UTF8 whatever the environment's locale, so multi-byte input is real.
$node->safe_psql('postgres',
	"CREATE DATABASE $db ENCODING 'UTF8' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'");
$node->safe_psql($db, 'CREATE EXTENSION outbox');

$node->safe_psql($db, <<'EOF');
CREATE ROLE app_plain;
CREATE ROLE app_granted;
-- A careless grant: EXECUTE on everything. Sinks and routes must still refuse.
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox TO app_granted;

CREATE TABLE public.canary (x int);
INSERT INTO public.canary VALUES (42);

CREATE TABLE public.hostile_cases (
    id int PRIMARY KEY, phase text NOT NULL, fn text NOT NULL,
    a1 text, a2 text, a3 text, a4 text, maxp int NOT NULL);
CREATE TABLE public.hostile_results (
    id int PRIMARY KEY, sqlstate text NOT NULL, message text, ret uuid,
    rf_n int, rf_pattern text, rf_sink text, rf_target text,
    readback text, plen int);
GRANT SELECT ON public.hostile_cases TO PUBLIC;
GRANT INSERT ON public.hostile_results TO PUBLIC;

-- octet_length(payload::text), the contract's measure, or NULL if no jsonb.
CREATE FUNCTION public.hostile_plen(t text) RETURNS int LANGUAGE plpgsql AS $f$
BEGIN
    RETURN octet_length(t::jsonb::text);
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END
$f$;

-- Runs one phase's cases in id order, each in its own subtransaction, and
-- records what happened. Arguments are passed as values, never as SQL text.
CREATE PROCEDURE public.hostile_run(p_phase text) LANGUAGE plpgsql AS $proc$
DECLARE
    c public.hostile_cases;
    v_super bool := (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user);
    v_maxp int := -1;
    v_done int := 0;
    v_state text; v_msg text; v_ret uuid; v_n int; v_p text; v_s text; v_t text;
    v_rb text; v_plen int;
BEGIN
    IF v_super THEN
        PERFORM outbox.publisher_preloaded();  -- loads the library and its settings
    END IF;
    FOR c IN SELECT * FROM public.hostile_cases WHERE phase = p_phase ORDER BY id LOOP
        v_state := '00000'; v_msg := NULL; v_ret := NULL; v_n := NULL; v_p := NULL;
        v_s := NULL; v_t := NULL; v_rb := NULL; v_plen := NULL;
        IF v_super AND c.maxp <> v_maxp THEN
            PERFORM set_config('outbox.max_payload_bytes', c.maxp::text, false);
            v_maxp := c.maxp;
        END IF;
        IF c.fn LIKE 'emit%' THEN
            v_plen := public.hostile_plen(c.a2);
        END IF;
        BEGIN
            CASE c.fn
            WHEN 'emit' THEN
                v_ret := outbox.emit(c.a1, c.a2::jsonb, c.a3, c.a4::jsonb);
            WHEN 'emit2' THEN
                v_ret := outbox.emit(c.a1, c.a2::jsonb);
            WHEN 'emit_named' THEN
                v_ret := outbox.emit(headers => c.a4::jsonb, key => c.a3,
                                     payload => c.a2::jsonb, topic => c.a1);
            WHEN 'create_sink' THEN
                PERFORM outbox.create_sink(c.a1, c.a2, c.a3::jsonb);
                SELECT CASE WHEN count(*) <> 1 THEN 'rows: ' || count(*)
                            WHEN bool_and(kind = c.a2 AND options = c.a3::jsonb
                                          AND options::text = c.a3::jsonb::text) THEN 'ok'
                            ELSE 'kind or options differ' END
                  INTO v_rb FROM outbox.sinks WHERE name = c.a1 COLLATE "C";
            WHEN 'drop_sink' THEN
                PERFORM outbox.drop_sink(c.a1);
                SELECT CASE WHEN count(*) = 0 THEN 'ok' ELSE 'still there' END
                  INTO v_rb FROM outbox.sinks WHERE name = c.a1 COLLATE "C";
            WHEN 'add_route', 'add_route2' THEN
                IF c.fn = 'add_route' THEN
                    PERFORM outbox.add_route(c.a1, c.a2, c.a3);
                ELSE
                    PERFORM outbox.add_route(c.a1, c.a2);
                END IF;
                SELECT CASE WHEN count(*) <> 1 THEN 'rows: ' || count(*)
                            WHEN bool_and(sink = c.a2 COLLATE "C"
                                          AND target IS NOT DISTINCT FROM c.a3 COLLATE "C"
                                          AND NOT paused) THEN 'ok'
                            ELSE 'sink, target or paused differ' END
                  INTO v_rb FROM outbox.routes WHERE pattern = c.a1 COLLATE "C";
            WHEN 'remove_route' THEN
                PERFORM outbox.remove_route(c.a1);
                SELECT CASE WHEN count(*) = 0 THEN 'ok' ELSE 'still there' END
                  INTO v_rb FROM outbox.routes WHERE pattern = c.a1 COLLATE "C";
            WHEN 'pause', 'resume' THEN
                IF c.fn = 'pause' THEN
                    PERFORM outbox.pause(c.a1);
                ELSE
                    PERFORM outbox.resume(c.a1);
                END IF;
                SELECT CASE WHEN count(*) = 1 AND bool_and(paused = (c.fn = 'pause')) THEN 'ok'
                            ELSE 'paused not set' END
                  INTO v_rb FROM outbox.routes WHERE pattern = c.a1 COLLATE "C";
            WHEN 'route_for' THEN
                SELECT count(*), max(pattern), max(sink), max(target)
                  INTO v_n, v_p, v_s, v_t FROM outbox.route_for(c.a1);
            END CASE;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
        END;
        INSERT INTO public.hostile_results
        VALUES (c.id, v_state, v_msg, v_ret, v_n, v_p, v_s, v_t, v_rb, v_plen);
        v_done := v_done + 1;
        IF v_done % 250 = 0 THEN
            COMMIT;  -- a crash loses at most this many results
        END IF;
    END LOOP;
END
$proc$;
EOF

# Everything that must not change, taken after the test's own objects exist.
my $CATALOG_SQL = <<'EOF';
SELECT format('relation %s.%s %s %s', n.nspname, c.relname, c.relkind, c.relfilenode)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname !~ '^pg_(temp|toast_temp)'
UNION ALL SELECT format('schema %s', nspname) FROM pg_namespace
UNION ALL SELECT format('function %s %s %s', p.oid::regprocedure, p.proowner, p.proacl)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
UNION ALL SELECT format('trigger %s on %s', tgname, tgrelid::regclass) FROM pg_trigger
UNION ALL SELECT format('role %s %s', rolname, rolsuper) FROM pg_roles
UNION ALL SELECT format('database %s', datname) FROM pg_database
UNION ALL SELECT format('extension %s %s', extname, extversion) FROM pg_extension
ORDER BY 1
EOF
my $catalog_before = $node->safe_psql($db, $CATALOG_SQL);

# ---------------------------------------------------------------------------
# The cases.
# ---------------------------------------------------------------------------

my @cases;
my $last_maxp = $MAXP;

sub add_case {
	my ($phase, $fn, $args, $json, $maxp) = @_;
	$last_maxp = $maxp if defined $maxp;
	push @cases, { id => scalar(@cases) + 1, phase => $phase, fn => $fn, a => $args,
		j => $json // {}, maxp => $last_maxp };
	return $cases[-1];
}

sub emit_case {
	my ($phase, $fn, $topic, $payload, $key, $headers, $maxp) = @_;
	$headers //= jnull();
	return add_case($phase, $fn, [ $topic, $payload->{text}, $key, $headers->{text} ],
		{ 1 => $payload, 3 => $headers }, $maxp // $MAXP);
}

sub sink_case {
	my ($phase, $name, $kind, $options) = @_;
	return add_case($phase, 'create_sink', [ $name, $kind, $options->{text} ], { 2 => $options });
}

sub random_case {
	my ($phase) = @_;
	my $r = rand;
	my $fn =
	    $r < 0.36 ? 'emit'
	  : $r < 0.43 ? 'emit2'
	  : $r < 0.50 ? 'emit_named'
	  : $r < 0.62 ? 'create_sink'
	  : $r < 0.66 ? 'drop_sink'
	  : $r < 0.76 ? 'add_route'
	  : $r < 0.79 ? 'add_route2'
	  : $r < 0.83 ? 'remove_route'
	  : $r < 0.85 ? 'pause'
	  : $r < 0.87 ? 'resume'
	  :             'route_for';
	if ($fn =~ /^emit/) {
		my $maxp = $phase eq 'super' && chance(0.2) ? 1 + int rand 300 : $MAXP;
		my ($key, $headers) = $fn eq 'emit2' ? (undef, jnull()) : (gen_key(), gen_headers());
		return emit_case($phase, $fn, gen_topic(), gen_payload(), $key, $headers, $maxp);
	}
	if ($fn eq 'create_sink') {
		my $kind = gen_kind();
		return sink_case($phase, gen_sink_name(), $kind, gen_options($kind));
	}
	return add_case($phase, $fn, [ gen_sink_name() ]) if $fn eq 'drop_sink';
	return add_case($phase, $fn, [ gen_pattern(), gen_sink_name(), gen_target() ]) if $fn eq 'add_route';
	return add_case($phase, $fn, [ gen_pattern(), gen_sink_name() ]) if $fn eq 'add_route2';
	return add_case($phase, $fn, [ gen_route_topic() ]) if $fn eq 'route_for';
	return add_case($phase, $fn, [ gen_pattern() ]);
}

# Fixed cases first (the same for every seed): boundaries and known traps.
{
	my $S = 'super';
	sink_case($S, 'k.main', 'kafka', jobj([ 'bootstrap.servers', jstr('127.0.0.1:9092') ]));
	sink_case($S, 'r.main', 'redis', jobj());
	sink_case($S, 'x' x 63, 'redis', jobj());
	sink_case($S, 'x' x 64, 'redis', jobj());
	sink_case($S, 'r.bad', 'redis', jobj([ 'mode', jstr('list') ], [ 'maxlen', jnum('5', '5') ]));
	sink_case($S, "'; DROP TABLE public.canary; --", 'redis', jobj());
	sink_case($S, 'k.huge', 'kafka', jobj([ 'bootstrap.servers', jstr('h' x 1_048_600) ],
			[ 'sasl.password', jstr("'; DROP TABLE public.canary; --\\\x{1f600}") ]));
	sink_case($S, 'r.huge', 'redis', jobj([ 'password', jstr("\x{e9}" x 600_000) ]));
	# Long multi-byte option keys and values quoted back in the error: the
	# message must stay valid UTF-8 wherever it is cut.
	for my $pre ('', 'a', 'ab', 'abc') {
		sink_case($S, 'k.cut', 'kafka',
			jobj([ 'bootstrap.servers', jstr('h:1') ], [ $pre . ("\x{e9}" x 600), jstr('x') ]));
		sink_case($S, 'k.cut', 'kafka',
			jobj([ 'bootstrap.servers', jstr('h:1') ], [ $pre . ("\x{1f600}" x 300), jstr('x') ]));
		sink_case($S, 'r.cut', 'redis', jobj([ 'port', jstr($pre . ("\x{e9}" x 600)) ]));
		sink_case($S, 'r.cut', 'redis', jobj([ 'mode', jstr($pre . ("\x{20ac}" x 400)) ]));
		sink_case($S, 'r.cut', 'redis', jobj([ $pre . ("\x{1f600}" x 300), jstr('x') ]));
	}

	my $obj = sub { my ($text, @pairs) = @_; return { text => $text, shape => 'object', pairs => \@pairs } };
	emit_case($S, 'emit', 't' x 249, jobj());
	emit_case($S, 'emit', 't' x 250, jobj());
	emit_case($S, 'emit', $_, jobj())
	  for ('', '.', '..', 'Az09._-', "\x{212a}afka", "\x{ff21}", "abc\n", "\nabc", 'a b', "t\x{301}",
		valid_run(10_000), 'a' x 1_048_577, "'; DROP TABLE public.canary; --", '%s%n');
	# The payload limit counts bytes of JSON text, not characters.
	emit_case($S, 'emit', 'p.edge', jstr('x' x ($MAXP - 2)));
	emit_case($S, 'emit', 'p.edge', jstr('x' x ($MAXP - 1)));
	emit_case($S, 'emit', 'p.edge', jstr("\x{e9}" x (($MAXP - 2) / 2)));
	emit_case($S, 'emit', 'p.edge', jstr("\x{e9}" x (($MAXP - 2) / 2 + 1)));
	emit_case($S, 'emit', 'p.small', $obj->('{"a": 1}', [ 'a', jnum('1', '1') ]), undef, undef, 8);
	emit_case($S, 'emit', 'p.small', $obj->('{"a": 12}', [ 'a', jnum('12', '12') ]), undef, undef, 8);
	emit_case($S, 'emit', 'p.deep', { text => ('[' x 3000) . (']' x 3000), shape => 'array' });
	emit_case($S, 'emit', 'p.deep', jbad(('[' x 100_000) . (']' x 100_000), '54001'));
	emit_case($S, 'emit', 'p.null', jnull());
	emit_case($S, 'emit', 'p.json_null', jlit('null'));
	# Headers: jsonb keeps the last of duplicate keys.
	emit_case($S, 'emit', 'h.dup', jobj(), 'k',
		$obj->('{"a": 1, "a": "x"}', [ 'a', jnum('1', '1') ], [ 'a', jstr('x') ]));
	emit_case($S, 'emit', 'h.dup', jobj(), 'k',
		$obj->('{"a": "x", "a": 1}', [ 'a', jstr('x') ], [ 'a', jnum('1', '1') ]));
	emit_case($S, 'emit', 'h.big', jobj(), 'k', jobj([ 'big', jstr('v' x 1_048_600) ]));
	emit_case($S, 'emit', 'h.many', jobj(), 'k', jobj(map { [ "h$_", jstr("$_") ] } 1 .. 10_000));
	emit_case($S, 'emit', 'h.many', jobj(), 'k',
		jobj((map { [ "h$_", jstr("$_") ] } 1 .. 10_000), [ "\x{e9}" x 200, jnum('1', '1') ]));
	emit_case($S, 'emit', 'h.shape', jobj(), undef, $_)
	  for (jlit('null'), jarr(), jstr('h'), jnum('1', '1'), jobj([ 'o', jobj() ]),
		jobj([ '%s%n', jstr("'; DROP TABLE public.canary; --") ]));
	emit_case($S, 'emit', 'k.huge', jobj(), "\x{1f600}" x 300_000);

	add_case($S, 'add_route', [ 'fixed.*', 'k.main', undef ]);
	add_case($S, 'add_route', [ '*' x 249, 'r.main', 'x' x 1_048_600 ]);
	add_case($S, 'route_for', [ 'anything' ]);
	add_case($S, 'remove_route', [ '*' x 249 ]);
	add_case($S, 'add_route', [ '*' x 250, 'r.main', undef ]);
	add_case($S, 'add_route', [ "fixed.$_", 'k.main', $_ ]) for ('.', '..', '', 'a b', 't' x 250);
	add_case($S, 'add_route', [ "fixed.r$_", 'r.main', (undef, '', "a\nb", '.', "\x{1f600}")[$_] ])
	  for 0 .. 4;
	add_case($S, 'add_route', [ 'fixed.nosink', $_, undef ])
	  for (undef, '', 'nope', "'; DROP TABLE public.canary; --");
	add_case($S, 'route_for', [ $_ ]) for ('fixed.x', 'fixed.', valid_run(10_000), '', 'fixed.*');
	add_case($S, 'drop_sink', [ $_ ]) for ('k.main', 'nope', "k.main'--", '', undef);
	add_case($S, $_, [ 'fixed.*' ]) for ('pause', 'route_for', 'resume', 'pause');
	add_case($S, 'remove_route', [ $_ ]) for ('fixed.*', 'fixed.*', "fixed.*'", undef);
}

# Random cases.
huge_budget(10);
random_case('super') for 1 .. $N_SUPER;
huge_budget(2);
random_case('app_granted') for 1 .. $N_GRANTED;
huge_budget(0);
random_case('app_plain') for 1 .. $N_PLAIN;
huge_budget(2);
random_case('client') for 1 .. $N_CLIENT;

my %by_id = map { $_->{id} => $_ } @cases;
note(sprintf('%d cases generated in %.1f s', scalar @cases, time - $t0));

# ---------------------------------------------------------------------------
# Load them with COPY (text format: backslash, tab, newline and CR escaped;
# \N is NULL) from a file the server reads.
# ---------------------------------------------------------------------------

sub copy_field {
	my ($v) = @_;
	return '\\N' unless defined $v;
	my $b = encode_utf8($v);
	$b =~ s/\\/\\\\/g;
	$b =~ s/\t/\\t/g;
	$b =~ s/\n/\\n/g;
	$b =~ s/\r/\\r/g;
	return $b;
}

sub sql_quote { my ($s) = @_; $s =~ s/'/''/g; return "'$s'" }

my $tmp = PostgreSQL::Test::Utils::tempdir('hostile');
sub copy_in {
	my ($table, $rows) = @_;
	my $file = "$tmp/$table.copy";
	open my $fh, '>:raw', $file or die "$file: $!";
	print $fh join("\t", map { copy_field($_) } @$_), "\n" for @$rows;
	close $fh or die "$file: $!";
	$node->safe_psql($db, "COPY public.$table FROM " . sql_quote($file) . " WITH (ENCODING 'UTF8')");
}
copy_in('hostile_cases',
	[ map { [ $_->{id}, $_->{phase}, $_->{fn}, @{ $_->{a} }[ 0 .. 3 ], $_->{maxp} ] } @cases ]);
is($node->safe_psql($db, 'SELECT count(*) FROM public.hostile_cases'), scalar(@cases),
	'every case loaded');

# ---------------------------------------------------------------------------
# Server-side phases.
# ---------------------------------------------------------------------------

for my $phase ('super', 'app_granted', 'app_plain') {
	my $role = $phase eq 'super' ? '' : "SET ROLE $phase;\n";
	my ($out, $err) = ('', '');
	my $started = time;
	my $rc = $node->psql($db, "${role}CALL public.hostile_run('$phase');",
		stdout => \$out, stderr => \$err, on_error_stop => 1,
		timeout => $PostgreSQL::Test::Utils::timeout_default);
	is($rc, 0, "the $phase phase ran to its end") or diag(substr($err, 0, 2000));
	note(sprintf('%s phase: %.1f s', $phase, time - $started));
}

# ---------------------------------------------------------------------------
# The psql batch: one statement per case, no exception wrapper.
# ---------------------------------------------------------------------------

sub client_statement {
	my ($c) = @_;
	my @l = map { sql_literal($_) } @{ $c->{a} };
	my $cast = sub { my ($i) = @_; return $l[$i] . (chance(0.5) ? '::jsonb' : '') };
	my $fn = $c->{fn};
	return "SELECT outbox.emit($l[0], @{[ $cast->(1) ]}, $l[2], @{[ $cast->(3) ]}) AS id \\gset r_"
	  if $fn eq 'emit';
	return "SELECT outbox.emit($l[0], @{[ $cast->(1) ]}) AS id \\gset r_" if $fn eq 'emit2';
	return "SELECT outbox.emit(topic => $l[0], payload => @{[ $cast->(1) ]}, key => $l[2],"
	  . " headers => @{[ $cast->(3) ]}) AS id \\gset r_"
	  if $fn eq 'emit_named';
	return "SELECT outbox.create_sink($l[0], $l[1], @{[ $cast->(2) ]});" if $fn eq 'create_sink';
	return "SELECT outbox.add_route($l[0], $l[1], $l[2]);" if $fn eq 'add_route';
	return "SELECT outbox.add_route($l[0], $l[1]);" if $fn eq 'add_route2';
	return "SELECT count(*) AS n, "
	  . join(', ', map { "coalesce('x' || encode(textsend(max($_)), 'hex'), '-') AS $_" }
		  qw(pattern sink target))
	  . " FROM outbox.route_for($l[0]) \\gset r_"
	  if $fn eq 'route_for';
	return "SELECT outbox.$fn($l[0]);";
}

# Run a psql script of statements, each followed by a marker line with its
# SQLSTATE; returns ({marker => [fields]}, stdout, stderr).
sub run_marked {
	my ($statements, $prelude) = @_;    # [[marker, sql], ...]
	my $script = ($prelude // '') . "\\o /dev/null\n";
	for my $s (@$statements) {
		$script .= "\\set r_$_ -\n" for qw(id n pattern sink target);
		$script .= "$s->[1]\n\\echo '\@\@' $s->[0] :SQLSTATE :r_id :r_n :r_pattern :r_sink :r_target\n";
	}
	my ($out, $err) = ('', '');
	$node->psql($db, encode_utf8($script), stdout => \$out, stderr => \$err, on_error_stop => 0,
		timeout => $PostgreSQL::Test::Utils::timeout_default);
	my %seen;
	for my $line (split /\n/, $out) {
		next unless $line =~ /\A\@\@ (\S+) (.*)\z/;
		$seen{$1} = [ split / /, $2 ];
	}
	return (\%seen, $out, $err);
}

my @client = grep { $_->{phase} eq 'client' } @cases;
my $client_started = time;
my ($client_seen, undef, $client_err) =
  run_marked([ map { [ $_->{id}, client_statement($_) ] } @client ], "SET client_encoding = 'UTF8';\n");
note(sprintf('psql batch: %.1f s', time - $client_started));
is(scalar(grep { exists $client_seen->{ $_->{id} } } @client), scalar @client,
	'psql batch: every statement ran on its own and the session survived them all');
ok($client_err !~ /server closed the connection|connection to server was lost|terminating connection/,
	'psql batch: the connection never dropped');
{
	my $copy = $client_err;
	ok(utf8::decode($copy), 'psql batch: everything psql printed about the errors is valid UTF-8');
}

# Client results join the server-side ones (hex fields decoded).
sub unhex { my ($h) = @_; return undef if !defined $h || $h eq '-'; $h =~ s/\Ax//;
	return decode_utf8(pack 'H*', $h) }
copy_in('hostile_results', [
	map {
		my $f = $client_seen->{ $_->{id} };
		$f ? [ $_->{id}, $f->[0], undef, ($f->[1] // '-') eq '-' ? undef : $f->[1],
			($f->[2] // '-') eq '-' ? undef : $f->[2], unhex($f->[3]), unhex($f->[4]), unhex($f->[5]),
			undef, undef ] : ()
	} @client ]);
$node->safe_psql($db, <<'EOF');
UPDATE public.hostile_results r SET plen = public.hostile_plen(c.a2)
  FROM public.hostile_cases c
 WHERE c.id = r.id AND c.phase = 'client' AND c.fn LIKE 'emit%';
EOF

# NUL: PostgreSQL text cannot hold it, so every way a client may try to pass
# one must end in a clean error (and leave nothing behind).
my @nul = (
	[ q{SELECT outbox.emit(E'orders\000created', '{}')}, '22021' ],
	[ q{SELECT outbox.emit('t.nul', '{}', E'k\x00')}, '22021' ],
	[ q{SELECT outbox.emit(chr(0), '{}')}, '54000' ],
	[ q{SELECT outbox.emit('t.nul', '{}', 'a' || chr(0))}, '54000' ],
	[ q{SELECT outbox.emit('t.nul', '"\u0000"')}, '22P05' ],
	[ q{SELECT outbox.emit('t.nul', '{}', NULL, '{"h": "a\u0000b"}')}, '22P05' ],
	[ q{SELECT outbox.emit('t.nul', '{}', NULL, '{"h\u0000": "v"}')}, '22P05' ],
	[ q{SELECT outbox.create_sink(convert_from('\x6100'::bytea, 'UTF8'), 'redis', '{}')}, '22021' ],
	[ q{SELECT outbox.create_sink('r.nul', 'redis', '{"password": "\u0000"}')}, '22P05' ],
	[ q{SELECT outbox.add_route(E'a\000*', 'r.main')}, '22021' ],
	[ q{SELECT * FROM outbox.route_for(E'\000')}, '22021' ],
	[ q{SELECT outbox.drop_sink(chr(0))}, '54000' ]);
my ($nul_seen) = run_marked([ map { [ "nul$_", "$nul[$_][0];" ] } 0 .. $#nul ]);
my @nul_bad = map { "$nul[$_][0]: got " . ($nul_seen->{"nul$_"}[0] // 'nothing') . ", want $nul[$_][1]" }
  grep { ($nul_seen->{"nul$_"}[0] // '') ne $nul[$_][1] } 0 .. $#nul;
is(scalar @nul_bad, 0, 'psql: a NUL sent by escape, chr(0) or \u0000 is refused with 22021, 54000 or 22P05')
  or diag(join "\n", @nul_bad);

# A LATIN1 client: long multi-byte text quoted back in an error must still
# convert, so the client gets the 22023 and not an encoding error instead.
my @latin1 = (
	q{SELECT outbox.create_sink('r.enc', 'redis', jsonb_build_object('port', 'a' || repeat(chr(233), 600)))},
	q{SELECT outbox.create_sink('r.enc', 'redis', jsonb_build_object('port', repeat(chr(233), 600)))},
	q{SELECT outbox.create_sink('r.enc', 'redis', jsonb_build_object('a' || repeat(chr(233), 600), 'x'))},
	q{SELECT outbox.create_sink('k.enc', 'kafka', jsonb_build_object('bootstrap.servers', 'h:1', repeat(chr(233), 600), 'x'))},
	q{SELECT outbox.create_sink('k.enc', 'kafka', jsonb_build_object('bootstrap.servers', 'h:1', 'a' || repeat(chr(233), 600), 'x'))},
	q{SELECT outbox.emit(repeat(chr(233), 100), '{}')},
	q{SELECT outbox.emit('a' || repeat(chr(233), 100), '{}')},
	q{SELECT outbox.emit('t', '{}', NULL, jsonb_build_object('a' || repeat(chr(233), 100), 1))},
	q{SELECT outbox.add_route('a' || repeat(chr(233), 100), 'r.main')});
my ($latin1_seen) = run_marked([ map { [ "enc$_", "$latin1[$_];" ] } 0 .. $#latin1 ],
	"SET client_encoding = 'LATIN1';\n");
my @latin1_bad = map { "$latin1[$_]: got " . ($latin1_seen->{"enc$_"}[0] // 'nothing') . ', want 22023' }
  grep { ($latin1_seen->{"enc$_"}[0] // '') ne '22023' } 0 .. $#latin1;
is(scalar @latin1_bad, 0,
	'psql with client_encoding LATIN1: errors quoting long multi-byte input still arrive as 22023')
  or diag(join "\n", @latin1_bad);

# ---------------------------------------------------------------------------
# Results.
# ---------------------------------------------------------------------------

my %res;
for my $line (split /\n/, $node->safe_psql($db, <<'EOF')) {
SELECT id, sqlstate, coalesce('x' || encode(textsend(message), 'hex'), '-'),
       coalesce(ret::text, '-'), coalesce(rf_n::text, '-'),
       coalesce('x' || encode(textsend(rf_pattern), 'hex'), '-'),
       coalesce('x' || encode(textsend(rf_sink), 'hex'), '-'),
       coalesce('x' || encode(textsend(rf_target), 'hex'), '-'),
       coalesce(readback, '-'), coalesce(plen::text, '-')
  FROM public.hostile_results ORDER BY id
EOF
	my @f = split /\|/, $line, -1;
	my $msg_bytes = $f[2] eq '-' ? undef : pack('H*', substr($f[2], 1));
	$res{ $f[0] } = {
		state => $f[1], msg_bytes => $msg_bytes,
		ret => $f[3] eq '-' ? undef : $f[3], rf_n => $f[4] eq '-' ? undef : $f[4],
		rf => [ map { unhex($_) } @f[ 5 .. 7 ] ],
		readback => $f[8] eq '-' ? undef : $f[8], plen => $f[9] eq '-' ? undef : $f[9] };
}

# Every accepted emit, compared with its arguments by the server (bytes for
# text: COLLATE "C"; jsonb both as values and as text).
my %stored;
for my $line (split /\n/, $node->safe_psql($db, <<'EOF')) {
SELECT r.id,
       CASE WHEN count(e.id) <> 1 THEN 'rows with the returned id: ' || count(e.id)
            WHEN NOT bool_and(e.topic = c.a1 COLLATE "C") THEN 'topic differs'
            WHEN NOT bool_and(e.key IS NOT DISTINCT FROM c.a3 COLLATE "C") THEN 'key differs'
            WHEN NOT bool_and(e.payload = c.a2::jsonb AND e.payload::text = c.a2::jsonb::text)
                 THEN 'payload differs'
            WHEN NOT bool_and(e.headers IS NOT DISTINCT FROM c.a4::jsonb
                              AND e.headers::text IS NOT DISTINCT FROM c.a4::jsonb::text)
                 THEN 'headers differ'
            WHEN NOT bool_and(e.status = 'pending' AND e.attempts = 0
                              AND e.published_at IS NULL AND e.last_error IS NULL)
                 THEN 'not a fresh pending event'
            WHEN NOT bool_and(substr(r.ret::text, 15, 1) = '7') THEN 'id is no UUIDv7'
            ELSE 'ok' END
  FROM public.hostile_results r
  JOIN public.hostile_cases c USING (id)
  LEFT JOIN outbox.events e ON e.id = r.ret
 WHERE r.ret IS NOT NULL
 GROUP BY r.id
EOF
	my ($id, $verdict) = split /\|/, $line, 2;
	$stored{$id} = $verdict;
}

# Walk the cases in the order they ran, with the model following what
# actually happened (so one wrong outcome is reported once, not cascaded).
my $model = new_model();
my (%fail, %tally);
my ($accepted_emits, $topic_checked, $server_side) = (0, 0, 0);
sub describe {
	my ($c) = @_;
	return "#$c->{id} $c->{phase} $c->{fn}(" . join(', ', map { show($_) } @{ $c->{a} }) . ")"
	  . ($c->{fn} =~ /^emit/ && $c->{maxp} != $MAXP ? " max_payload_bytes=$c->{maxp}" : '');
}
sub fail_case { my ($group, $c, $why) = @_; push @{ $fail{$group} }, describe($c) . ": $why" }

for my $c (@cases) {
	my $fn = $c->{fn};
	my $group = $fn =~ /^emit/ ? 'emit' : $fn =~ /sink/ ? 'sinks' : $fn eq 'route_for' ? 'route_for' : 'routes';
	$server_side++ if $c->{phase} ne 'client';
	my $r = $res{ $c->{id} };
	if (!$r) {
		fail_case('survived', $c, 'no result: the call (or one before it) killed the session');
		next;
	}
	my $state = $r->{state};
	my $msg = defined $r->{msg_bytes} ? $r->{msg_bytes} : '';
	$tally{$fn}{$state}++;
	fail_case('syntax', $c, "SQLSTATE $state: $msg") if $state eq '42601' || $state =~ /\AXX/;
	if (defined $r->{msg_bytes}) {
		my $copy = $r->{msg_bytes};
		fail_case('utf8', $c, sprintf('%s message of %d bytes is not valid UTF-8 (ends %s)',
				$state, length $copy, unpack('H*', substr($copy, -8))))
		  unless utf8::decode($copy);
		$msg = $copy;
	}
	my $e = expect($model, $c, $r->{plen});
	if ($fn =~ /^emit/ && $c->{phase} ne 'app_plain') {
		# The topic rule on its own: all else valid, accepted iff the rule holds.
		my ($t, $p, undef, $h) = @{ $c->{a} };
		my $rest_ok = defined $p && !grep { $_->{err} } values %{ $c->{j} };
		$rest_ok &&= defined $r->{plen} && $r->{plen} <= $c->{maxp};
		$rest_ok &&= !defined $h || (headers_ok($c->{j}{3}) && headers_size_ok($c->{j}{3}) eq 'ok');
		$rest_ok &&= key_size_ok($c->{a}[2]);
		if ($rest_ok) {
			$topic_checked++;
			fail_case('topic', $c, ($state eq '00000' ? 'accepted' : "refused ($state)")
				  . ' but the rule says ' . (topic_ok($t) ? 'valid' : 'invalid'))
			  if ($state eq '00000') != (topic_ok($t) ? 1 : 0);
		}
	}
	if ($state eq '00000') {
		if (!$e->{ok}) {
			fail_case($group, $c, 'succeeded; the contract wants '
				  . join(' or ', map { $_->[0] } @{ $e->{errs} }));
		}
		if ($fn =~ /^emit/) {
			$accepted_emits++;
			if (!defined $r->{ret}) {
				fail_case('stored', $c, 'no id returned');
			} elsif (($stored{ $c->{id} } // 'missing') ne 'ok') {
				fail_case('stored', $c, $stored{ $c->{id} } // 'not found');
			}
		} elsif ($fn eq 'route_for') {
			my $want = defined $c->{a}[0] ? best_route($model, $c->{a}[0]) : undef;
			my $got = $r->{rf_n} ? $r->{rf} : undef;
			my $fmt = sub { $_[0] ? join(' | ', map { show($_) } @{ $_[0] }) : 'no route' };
			fail_case('route_for', $c, 'returned ' . $fmt->($got) . ', precedence gives ' . $fmt->($want))
			  if ($r->{rf_n} // -1) != ($want ? 1 : 0)
			  || ($want && grep { ($got->[$_] // "\0") ne $want->[$_] } 0 .. 2);
		} elsif ($c->{phase} ne 'client' && ($r->{readback} // '') ne 'ok') {
			fail_case($group, $c, 'succeeded but reads back wrong: ' . ($r->{readback} // 'nothing'));
		}
		apply($model, $c);
	} else {
		my @same = grep { $_->[0] eq $state } @{ $e->{errs} };
		my $short = length($msg) > 300 ? substr($msg, 0, 300) . '...' : $msg;
		$short =~ s/([^\x20-\x7e])/sprintf('\\x{%x}', ord $1)/ge;
		if (!@same) {
			fail_case($group, $c, "failed with $state ($short); the contract wants "
				  . join(' or ', ($e->{ok} ? ('success') : ()), map { $_->[0] } @{ $e->{errs} }));
		} elsif ($c->{phase} ne 'client' && !grep { $msg =~ $_->[1] } @same) {
			fail_case($group, $c, "$state message does not name the argument: $short");
		}
	}
}

sub report {
	my ($group, $name) = @_;
	my $f = $fail{$group} // [];
	is(scalar @$f, 0, $name) and return;
	diag(scalar(@$f) . " failure(s), seed $seed; the first ones:");
	diag($_) for @$f[ 0 .. ($#$f < 14 ? $#$f : 14) ];
}

note("outcomes per function: "
	  . join('; ', map { my $f = $_; "$f " . join(',', map { "$_=$tally{$f}{$_}" } sort keys %{ $tally{$f} }) }
		  sort keys %tally));
report('survived', "the server answered all " . scalar(@cases) . " calls ($server_side server-side)");
report('syntax', 'no input caused a syntax error (42601) or an internal error (XX...)');
report('utf8', 'every error message is valid UTF-8, however long the input it quotes');
report('topic', "emit() accepts a topic iff it is 1..249 characters of [A-Za-z0-9._-] ($topic_checked calls)");
report('emit', 'emit(): accepted iff topic, payload and headers follow the contract, else 22023 naming the'
	  . ' argument (or the jsonb input error, or 42501 without EXECUTE)');
report('stored', "emit(): each of the $accepted_emits accepted events is stored exactly as given, pending,"
	  . ' with a UUIDv7 id');
report('sinks', 'create_sink()/drop_sink(): accepted iff the contract allows it and read back verbatim;'
	  . ' else 22023/42710/42704/2BP01/42501');
report('routes', 'add_route()/remove_route()/pause()/resume(): accepted iff the contract allows it and read'
	  . ' back verbatim; else 22023/42710/42704/42501');
report('route_for', "route_for(): the route the contract's precedence picks, target resolved");

# ---------------------------------------------------------------------------
# Nothing else changed.
# ---------------------------------------------------------------------------

is($node->safe_psql($db, 'SELECT count(*) FROM outbox.events'), $accepted_emits,
	'outbox.events holds the accepted events and nothing else');

sub hex_of { my ($s) = @_; return defined $s ? 'x' . unpack('H*', encode_utf8($s)) : '-' }
is($node->safe_psql($db, q{SELECT 'x' || encode(textsend(name), 'hex') || ' ' || kind
                             FROM outbox.sinks ORDER BY 1}),
	join("\n", sort map { hex_of($_) . ' ' . $model->{sinks}{$_}{kind} } keys %{ $model->{sinks} }),
	'outbox.sinks holds exactly the sinks that were accepted and not dropped');
my @sink_cases = map { $_->{case} } values %{ $model->{sinks} };
is(@sink_cases ? $node->safe_psql($db, 'SELECT count(*) FROM (VALUES ('
			. join('), (', @sink_cases) . ')) m(id) JOIN public.hostile_cases c USING (id)'
			. ' LEFT JOIN outbox.sinks s ON s.name = c.a1 COLLATE "C"'
			. ' WHERE s.name IS NULL OR s.kind <> c.a2 OR s.options::text <> c.a3::jsonb::text') : 0,
	0, "every sink's options are still the ones it was created with");
is($node->safe_psql($db, q{SELECT 'x' || encode(textsend(pattern), 'hex') || ' x'
                             || encode(textsend(sink), 'hex') || ' '
                             || coalesce('x' || encode(textsend(target), 'hex'), '-') || ' '
                             || CASE WHEN paused THEN 't' ELSE 'f' END
                             FROM outbox.routes ORDER BY 1}),
	join("\n", sort map {
		my $r = $model->{routes}{$_};
		join ' ', hex_of($_), hex_of($r->{sink}), hex_of($r->{target}), $r->{paused} ? 't' : 'f'
	} keys %{ $model->{routes} }),
	'outbox.routes holds exactly the routes that were accepted and not removed');

is($node->safe_psql($db, $CATALOG_SQL), $catalog_before,
	'no relation, schema, function, trigger, role, database or extension was created, dropped or rewritten');
is($node->safe_psql($db, 'SELECT x FROM public.canary'), '42', 'the canary table and its row survived');

is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server still answers');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|was terminated by exception|exited with exit code [1-9]|PANIC|TRAP:|
	all\ server\ processes\ terminated|database\ system\ was\ interrupted/x,
	'the server log shows no crashed backend');

$node->stop;
note(sprintf('total %.1f s', time - $t0));
done_testing();
