# A non-superuser extension owner gains no superuser rights, and neither
# does the code outbox runs. outbox's tables, partitions and functions belong
# to role outbox_writer (src/catalog/writer_role.cpp); emit() writes and the
# publisher runs its statements as it, in a security-restricted operation.
#
# Setup as the README's privilege model allows: a superuser (not the
# bootstrap one) creates the extension, sinks and routes, then REASSIGN
# OWNED gives what it owns to `appowner`, who is no superuser: the
# extension, not outbox's tables. Then
#   - the tables and every partition (one made ahead by the superuser too)
#     stay, or become, outbox_writer's;
#   - appowner cannot put a trigger on outbox.events or write outbox.sinks
#     directly, and still manages sinks and routes through the functions,
#     which refuse it the options that make the server open files;
#   - a trigger a superuser puts on outbox.events (UPDATE, which the
#     publisher runs) records who runs it: outbox_writer, no superuser, and
#     its attempt to make that role a superuser fails.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxRedis;
use OutboxNode qw(outbox_node wait_until);

my $redis = OutboxRedis->start();
my $node = outbox_node('owner', '');
$node->safe_psql('postgres', q{
CREATE ROLE admin LOGIN SUPERUSER;
CREATE ROLE appowner LOGIN NOSUPERUSER;
GRANT CREATE ON DATABASE postgres TO appowner;
GRANT CREATE ON SCHEMA public TO appowner;});
$node->safe_psql('postgres', 'CREATE EXTENSION outbox', extra_params => [ '-U', 'admin' ]);
$node->safe_psql('postgres', "SELECT outbox.create_sink('r', 'redis', '{\"port\": " . $redis->port
	  . ", \"mode\": \"list\"}')", extra_params => [ '-U', 'admin' ]);
$node->safe_psql('postgres', q{SELECT outbox.add_route('ev.*', 'r')}, extra_params => [ '-U', 'admin' ]);
# A partition made ahead by the superuser, by hand.
$node->safe_psql('postgres', q{SELECT outbox.maintain(now() + interval '5 days')});
$node->safe_psql('postgres', 'REASSIGN OWNED BY admin TO appowner');
is($node->safe_psql('postgres', q{SELECT r.rolname FROM pg_extension e JOIN pg_roles r ON r.oid = e.extowner WHERE extname = 'outbox'}),
	'appowner', 'the extension belongs to appowner');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_class
	WHERE relnamespace = 'outbox'::regnamespace AND relkind IN ('r', 'p', 'v')
	  AND relowner <> 'outbox_writer'::regrole}), '0',
	'every table, partition and view of outbox is outbox_writer\'s, not appowner\'s');

# appowner plants nothing on outbox's tables and writes none of them.
my ($rc, $out, $err) = $node->psql('postgres', q{
CREATE FUNCTION public.appowner_spy() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER spy AFTER UPDATE ON outbox.events FOR EACH ROW EXECUTE FUNCTION public.appowner_spy();},
	extra_params => [ '-U', 'appowner' ]);
like($err, qr/permission denied for table events|must be owner of (relation|table) events/,
	'appowner cannot put a trigger on outbox.events');
($rc, $out, $err) = $node->psql('postgres', q{INSERT INTO outbox.sinks (name, kind, options)
  VALUES ('k', 'kafka', '{"bootstrap.servers": "127.0.0.1:1", "ssl.ca.location": "/etc/passwd"}')},
	extra_params => [ '-U', 'appowner' ]);
like($err, qr/permission denied for table sinks/, 'nor write outbox.sinks directly');
($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.create_sink('k', 'kafka',
  '{"bootstrap.servers": "127.0.0.1:1", "ssl.ca.location": "/etc/passwd"}')},
	extra_params => [ '-U', 'appowner' ]);
like($err, qr/ssl\.ca\.location" may only be set by a superuser/,
	'create_sink() refuses it the options that open files');
$node->safe_psql('postgres', q{SELECT outbox.add_route('ev2.*', 'r')}, extra_params => [ '-U', 'appowner' ]);
is($node->safe_psql('postgres', q{SELECT sink FROM outbox.routes WHERE pattern = 'ev2.*'}), 'r',
	'and it manages routes through the functions');

# A superuser's trigger shows who the publisher runs as.
$node->safe_psql('postgres', q{
CREATE TABLE public.trigger_runs (who text, was_super boolean, escalation text);
GRANT INSERT ON public.trigger_runs TO outbox_writer;
CREATE FUNCTION public.spy() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE outcome text := 'refused';
BEGIN
  BEGIN
    EXECUTE format('ALTER ROLE %I SUPERUSER', current_user);
    outcome := 'escalated';
  EXCEPTION WHEN OTHERS THEN
    outcome := 'refused: ' || SQLERRM;
  END;
  INSERT INTO public.trigger_runs
    SELECT current_user, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user), outcome;
  RETURN NEW;
END $$;
CREATE TRIGGER spy AFTER UPDATE ON outbox.events FOR EACH ROW EXECUTE FUNCTION public.spy();});

# Maintenance runs when a publisher starts, then every minute.
$node->restart;
$node->safe_psql('postgres', q{SELECT outbox.emit('ev.a', '{"n": 1}', 'k')});
ok(defined wait_until(sub { $node->safe_psql('postgres',
	q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}) eq '0' }),
	'events are published under a non-superuser owner');
is($redis->cli('LLEN', 'ev.a'), '1', 'the event reached Redis');
my $runs = $node->safe_psql('postgres', q{SELECT who || '/' || was_super || '/' || escalation FROM public.trigger_runs});
note("trigger runs: $runs");
like($runs, qr{\Aoutbox_writer/false/refused}m, 'the publisher ran the trigger as outbox_writer, not as a superuser');
unlike($runs, qr/escalated/, 'which could not make itself a superuser');
is($node->safe_psql('postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'outbox_writer'}), 'f',
	'outbox_writer is still no superuser');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	WHERE i.inhparent = 'outbox.events'::regclass AND c.relowner <> 'outbox_writer'::regrole}), '0',
	'every partition is outbox_writer\'s');

# A file option a superuser wrote into outbox.sinks while the extension's
# owner is no superuser is refused by the publisher; the Redis route keeps
# flowing.
$node->safe_psql('postgres', q{
INSERT INTO outbox.sinks (name, kind, options)
  VALUES ('k', 'kafka', '{"bootstrap.servers": "127.0.0.1:1", "ssl.ca.location": "/etc/passwd"}');
SELECT outbox.add_route('kf.*', 'k');});
my $off = -s $node->logfile;
$node->safe_psql('postgres', q{SELECT outbox.emit('kf.a', '{"n": 2}'), outbox.emit('ev.b', '{"n": 3}')});
ok(defined wait_until(sub { $node->safe_psql('postgres',
	q{SELECT status FROM outbox.events WHERE topic = 'ev.b'}) eq 'published' }),
	'the Redis route keeps delivering');
ok(defined wait_until(sub { slurp_file($node->logfile, $off) =~ /ssl\.ca\.location.*superuser/ }),
	'the publisher refused the file option while the owner is no superuser, and said why');
is($node->safe_psql('postgres', q{SELECT status FROM outbox.events WHERE topic = 'kf.a'}), 'pending',
	'the event for that sink waits');

unlike(slurp_file($node->logfile), qr/terminated by signal/, 'no server process crashed');
$node->stop;
$redis->stop;
done_testing();
