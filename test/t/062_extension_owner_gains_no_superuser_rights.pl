# A non-superuser extension owner gains no superuser rights through the
# publisher (issue 14, finding 3). The publisher connects as the bootstrap
# superuser; it used to run its statements as that superuser too, so a
# trigger the owner put on outbox.events ran as superuser each time the
# publisher updated an event. Its SQL now runs as the extension's owner, in a
# security-restricted operation (worker_session.hpp).
#
# Setup as the README's privilege model allows: a superuser (not the
# bootstrap one) creates the extension, sinks and routes, then REASSIGN
# OWNED gives everything to `appowner`, who is no superuser. appowner then
#   - adds a row trigger on outbox.events that records current_user and
#     tries to make itself superuser (ALTER ROLE ... SUPERUSER);
#   - writes a Kafka-only file option into a sink directly (UPDATE
#     outbox.sinks, bypassing create_sink()), which the publisher must refuse
#     for a non-superuser owner.
# Events still flow, the trigger ran as appowner and failed to escalate, the
# file option was refused and the other sink kept delivering.
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
# An earlier partition the publisher (bootstrap superuser) made must become
# appowner's too: maintenance ahead creates one now, as the superuser.
$node->safe_psql('postgres', q{SELECT outbox.maintain(now() + interval '5 days')});
$node->safe_psql('postgres', 'REASSIGN OWNED BY admin TO appowner');
is($node->safe_psql('postgres', q{SELECT r.rolname FROM pg_extension e JOIN pg_roles r ON r.oid = e.extowner WHERE extname = 'outbox'}),
	'appowner', 'the extension belongs to appowner');

# Maintenance runs when a publisher starts, then every minute.
$node->restart;
ok(defined wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM pg_inherits i
	JOIN pg_class c ON c.oid = i.inhrelid
	WHERE i.inhparent = 'outbox.events'::regclass AND c.relowner <> 'appowner'::regrole}) eq '0' }),
	'every partition belongs to appowner after the next maintenance');

# appowner plants a trigger: who runs it, and can it escalate?
$node->safe_psql('postgres', q{
CREATE TABLE public.trigger_runs (who text, was_super boolean, escalation text);
CREATE FUNCTION public.spy() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE outcome text := 'refused';
BEGIN
  BEGIN
    EXECUTE 'ALTER ROLE appowner SUPERUSER';
    outcome := 'escalated';
  EXCEPTION WHEN OTHERS THEN
    outcome := 'refused: ' || SQLERRM;
  END;
  INSERT INTO public.trigger_runs
    SELECT current_user, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user), outcome;
  RETURN NEW;
END $$;
CREATE TRIGGER spy AFTER UPDATE ON outbox.events FOR EACH ROW EXECUTE FUNCTION public.spy();},
	extra_params => [ '-U', 'appowner' ]);

$node->safe_psql('postgres', q{SELECT outbox.emit('ev.a', '{"n": 1}', 'k')});
ok(defined wait_until(sub { $node->safe_psql('postgres',
	q{SELECT count(*) FROM outbox.events WHERE status <> 'published'}) eq '0' }),
	'events are published under a non-superuser owner');
is($redis->cli('LLEN', 'ev.a'), '1', 'the event reached Redis');
my $runs = $node->safe_psql('postgres', q{SELECT who || '/' || was_super || '/' || escalation FROM public.trigger_runs});
note("trigger runs: $runs");
like($runs, qr{\Aappowner/false/refused}m, "the owner's trigger ran as appowner, not as a superuser");
unlike($runs, qr/escalated/, 'and could not make its owner a superuser');
is($node->safe_psql('postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'appowner'}), 'f',
	'appowner is still no superuser');
# A file option written straight into outbox.sinks by the non-superuser owner
# is refused by the publisher; the Redis route keeps flowing.
$node->safe_psql('postgres', q{
INSERT INTO outbox.sinks (name, kind, options)
  VALUES ('k', 'kafka', '{"bootstrap.servers": "127.0.0.1:1", "ssl.ca.location": "/etc/passwd"}');
SELECT outbox.add_route('kf.*', 'k');}, extra_params => [ '-U', 'appowner' ]);
my $off = -s $node->logfile;
$node->safe_psql('postgres', q{SELECT outbox.emit('kf.a', '{"n": 2}'), outbox.emit('ev.b', '{"n": 3}')});
ok(defined wait_until(sub { $node->safe_psql('postgres',
	q{SELECT status FROM outbox.events WHERE topic = 'ev.b'}) eq 'published' }),
	'the Redis route keeps delivering');
ok(defined wait_until(sub { slurp_file($node->logfile, $off) =~ /ssl\.ca\.location.*superuser/ }),
	'the publisher refused the file option of a non-superuser owner, and said why');
is($node->safe_psql('postgres', q{SELECT status FROM outbox.events WHERE topic = 'kf.a'}), 'pending',
	'the event for that sink waits');

unlike(slurp_file($node->logfile), qr/terminated by signal/, 'no server process crashed');
$node->stop;
$redis->stop;
done_testing();
