#!/usr/bin/env bash
# Runs a publisher under valgrind (memcheck) over a short load and checks that
# it makes no invalid memory access and leaks nothing definitely.
#
#   bash test/valgrind_publisher.sh [WORK_DIR]     # default WORK_DIR: /tmp/outbox-valgrind
#
# Background workers are forked by the postmaster without exec, so the whole
# server runs under valgrind (every child process writes its own log,
# vg.<pid>.log); only the publishers' logs are judged. The load exercises the
# publisher's paths: a Kafka sink and a Redis sink, keyed, keyless and
# headered events, each message format, a broker outage (parked events, sink
# down and back), a poison event that dies, a route change (reload), then a
# fast shutdown, at which the publishers exit normally and valgrind checks
# their heaps.
#
# What counts as a failure, in a publisher's log: any Invalid read/write/free,
# use of uninitialised memory in a conditional jump, or a "definitely lost"
# block whose stack goes through outbox.so, librdkafka or hiredis. PostgreSQL
# itself is not built for valgrind (no USE_VALGRIND), so its memory contexts
# show as still reachable at exit, which is fine. Exits non-zero on failure and
# prints the offending reports. Needs root (the server runs as `postgres`),
# valgrind, redis-server, and the outbox build installed (make install).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:-/tmp/outbox-valgrind}
export LC_ALL=C.UTF-8 LANG=C.UTF-8
# shellcheck source=test/lib/cluster.sh
source "$REPO/test/lib/cluster.sh"
PG_BIN=$PG_BINDIR  # set by cluster.sh (lib/pg_major.sh)

rm -rf "$WORK"
mkdir -p "$WORK"
chown postgres: "$WORK"
DIR=$(make_cluster_dir)
PORT=$(pick_free_port 54700)
REDIS_PORT=$(pick_free_port 16400)
BROKER_PID=""
REDIS_PID=""
PSQL=(psql -X -q -At -h "$DIR" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1)

# shellcheck disable=SC2317  # run by the trap
cleanup() {
  stop_cluster "$DIR" || true
  if [[ -n "$BROKER_PID" ]]; then kill "$BROKER_PID" 2>/dev/null || true; fi
  if [[ -n "$REDIS_PID" ]]; then kill "$REDIS_PID" 2>/dev/null || true; fi
  exec 7>&- 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

say() { printf '[valgrind %3ds] %s\n' "$SECONDS" "$*"; }

# Waits up to $2 seconds for the SQL query $1 to return 't'.
wait_for() {
  local sql=$1 timeout=$2 start=$SECONDS
  until [[ "$("${PSQL[@]}" -c "$sql" 2>/dev/null)" == t ]]; do
    if ((SECONDS - start > timeout)); then
      say "timed out waiting for: $sql"
      return 1
    fi
    sleep 0.5
  done
}

# --- brokers ----------------------------------------------------------------------
make -s -C "$REPO/test/kafka" >/dev/null
mkfifo "$WORK/broker.in"
"$REPO/test/kafka/kafka_broker" --brokers 1 --topic vg:3 <"$WORK/broker.in" >"$WORK/broker.out" 2>"$WORK/broker.err" &
BROKER_PID=$!
exec 7>"$WORK/broker.in"
for _ in $(seq 50); do grep -q BOOTSTRAP "$WORK/broker.out" && break; sleep 0.1; done
BOOTSTRAP=$(awk '/^BOOTSTRAP/ {print $2}' "$WORK/broker.out")
[[ -n "$BOOTSTRAP" ]] || { echo "valgrind: the test broker did not start" >&2; exit 1; }
broker() { echo "$*" >&7; }
redis-server --port "$REDIS_PORT" --save '' --appendonly no --bind 127.0.0.1 >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!

# --- the server, under valgrind -----------------------------------------------------
as_server_user "$PG_BIN/initdb" -D "$DIR/data" -A trust -U postgres --no-sync \
  --encoding=UTF8 --locale=C >"$DIR/initdb.log" 2>&1
cat >>"$DIR/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$DIR'
shared_preload_libraries = 'outbox'
fsync = off
synchronous_commit = off
max_connections = 20
shared_buffers = 32MB
outbox.workers = 2
outbox.poll_interval = 200
outbox.backoff_min = 50
outbox.backoff_max = 1000
outbox.max_attempts = 3
outbox.batch_size = 100
log_line_prefix = '%m [%p] '
EOF
say "starting PostgreSQL under valgrind"
as_server_user valgrind --quiet --trace-children=no --leak-check=full \
  --show-leak-kinds=definite --errors-for-leak-kinds=definite --num-callers=30 \
  --log-file="$WORK/vg.%p.log" "$PG_BIN/postgres" -D "$DIR/data" >"$WORK/server.log" 2>&1 &
wait_for "SELECT true" 240

"${PSQL[@]}" >/dev/null <<SQL
CREATE EXTENSION outbox;
SELECT outbox.create_sink('kafka', 'kafka', '{"bootstrap.servers": "$BOOTSTRAP", "message.timeout.ms": "5000", "reconnect.backoff.max.ms": "500"}');
SELECT outbox.create_sink('redis', 'redis', '{"host": "127.0.0.1", "port": $REDIS_PORT, "mode": "stream"}');
SELECT outbox.add_route('vg', 'kafka');
SELECT outbox.add_route('vg.ce', 'kafka', 'vg', 'cloudevents');
SELECT outbox.add_route('vg.dbz', 'kafka', 'vg', 'debezium');
SELECT outbox.add_route('vr.*', 'redis', 'vr');
SQL
wait_for "SELECT count(*) = 2 FROM outbox.workers" 240
PUBLISHERS=$("${PSQL[@]}" -c "SELECT string_agg(pid::text, ' ') FROM outbox.workers")
say "publishers: $PUBLISHERS"

# emit TOPIC N: N events, keyed (17 keys) but every fifth keyless, every third
# with a header.
emit() {
  "${PSQL[@]}" -c "SELECT count(outbox.emit('$1', jsonb_build_object('n', i, 's', repeat('x', i % 50)),
      CASE WHEN i % 5 = 0 THEN NULL ELSE 'k' || (i % 17) END,
      CASE WHEN i % 3 = 0 THEN jsonb_build_object('h', 'v' || i) END))
    FROM generate_series(1, $2) i" >/dev/null
}
pending_zero="SELECT count(*) = 0 FROM outbox.events WHERE status = 'pending'"

say "load: Kafka raw, CloudEvents, Debezium; Redis stream"
emit vg 300
emit vg.ce 100
emit vg.dbz 100
emit vr.a 300
wait_for "$pending_zero" 300

say "a broker outage: events park, the sink comes back"
broker down all
emit vg 200
sleep 8
broker up all
wait_for "$pending_zero" 300

say "a poison event (the broker refuses it) dies; a route change reloads"
broker produce_errors 10 MSG_SIZE_TOO_LARGE
emit vg 1
wait_for "SELECT count(*) >= 1 FROM outbox.events WHERE status = 'dead'" 300 || true
"${PSQL[@]}" -c "SELECT outbox.remove_route('vr.*')" -c "SELECT outbox.add_route('vr.*', 'redis', 'vr2')" >/dev/null
emit vr.b 100
wait_for "$pending_zero" 300

PUBLISHED=$("${PSQL[@]}" -c "SELECT count(*) FROM outbox.events WHERE status = 'published'")
say "published $PUBLISHED events; fast shutdown"
as_server_user "$PG_BIN/pg_ctl" -D "$DIR/data" -m fast -w -t 300 stop >/dev/null

# --- judge the publishers' logs -------------------------------------------------------
status=0
for pid in $PUBLISHERS; do
  log=$WORK/vg.$pid.log
  if [[ ! -f "$log" ]]; then
    echo "valgrind: no log for publisher $pid" >&2
    status=1
    continue
  fi
  # Each report is a block of lines starting with ==pid== and ending with an
  # empty ==pid== line.
  bad=$(awk -v RS='==[0-9]+== \n' '
      /Invalid (read|write|free)|Mismatched free|uninitialised value|Conditional jump/ { print; print "----"; next }
      /definitely lost/ && /outbox\.so|librdkafka|libhiredis/ { print; print "----" }' "$log")
  if [[ -n "$bad" ]]; then
    echo "valgrind: publisher $pid:" >&2
    echo "$bad" >&2
    status=1
  else
    say "publisher $pid: no invalid access, no definite leak in outbox, librdkafka or hiredis"
  fi
done
if ((PUBLISHED < 1000)); then
  echo "valgrind: only $PUBLISHED events were published" >&2
  status=1
fi
exit $status
