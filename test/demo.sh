#!/usr/bin/env bash
# The demo command: installs what is missing, builds and installs outbox,
# starts a throwaway PostgreSQL with the extension preloaded, a local Redis
# and a local Kafka-protocol broker (test/kafka/kafka_broker, librdkafka's
# mock cluster), emits events in committed and rolled-back transactions (and
# a rolled-back savepoint), and shows what arrived at each broker.
#
#   bash test/demo.sh
#
# It installs only what it needs (test/install_deps.sh demo). Ports: the
# first free one at or above OUTBOX_DEMO_PG_PORT (54400; PostgreSQL listens
# on a Unix socket only, the port names it) and OUTBOX_DEMO_REDIS_PORT (6390);
# the Kafka brokers take OUTBOX_DEMO_KAFKA_PORT and the two after it when it is
# set, random free ports otherwise.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Installing missing packages"
bash test/install_deps.sh demo
# shellcheck source=lib/pg_major.sh
source "$REPO/test/lib/pg_major.sh"
outbox_use_postgres

step "Building and installing outbox, and the test broker"
make -s -j2 >/dev/null
make -s install >/dev/null
make -s -C test/kafka >/dev/null
echo "installed $(ls "$(pg_config --pkglibdir)"/outbox.so)"

# shellcheck source=lib/cluster.sh
source "$REPO/test/lib/cluster.sh"
DIR=$(make_cluster_dir)
PORT=$(pick_free_port "${OUTBOX_DEMO_PG_PORT:-54400}")
REDIS_PORT=$(pick_free_port "${OUTBOX_DEMO_REDIS_PORT:-6390}")
REDIS_DIR=$(mktemp -d)
cleanup() {
  stop_cluster "$DIR"
  rm -rf "$DIR"
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$REDIS_DIR"
}
trap cleanup EXIT

step "Starting Redis on port $REDIS_PORT"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$REDIS_DIR" --daemonize yes --logfile "$REDIS_DIR/redis.log" >/dev/null
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$REDIS_PORT" ping

step "Starting a Kafka-protocol broker (3 brokers on loopback)"
# The broker reads control commands on stdin and exits when it closes.
BROKER_ARGS=()
[[ -n ${OUTBOX_DEMO_KAFKA_PORT:-} ]] && BROKER_ARGS=(--port "$OUTBOX_DEMO_KAFKA_PORT")
coproc BROKER { exec "$REPO/test/kafka/kafka_broker" "${BROKER_ARGS[@]}"; }
read -r -u "${BROKER[0]}" _ BOOTSTRAP
echo "bootstrap.servers = $BOOTSTRAP"
echo "create_topic orders 3" >&"${BROKER[1]}"
read -r -u "${BROKER[0]}" _

step "Starting PostgreSQL $PG_MAJOR with shared_preload_libraries = 'outbox'"
start_cluster "$DIR" "$PORT"
psql_demo() { psql -X -h "$DIR" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }

step "CREATE EXTENSION outbox: a publisher starts for this database"
psql_demo -c "CREATE EXTENSION outbox"
psql_demo -e -c "SELECT outbox.create_sink('kafka', 'kafka', '{\"bootstrap.servers\": \"$BOOTSTRAP\"}')" \
  -c "SELECT outbox.add_route('orders.*', 'kafka', 'orders')" \
  -c "SELECT outbox.create_sink('redis', 'redis', '{\"port\": $REDIS_PORT, \"mode\": \"stream\", \"maxlen\": 10000}')" \
  -c "SELECT outbox.add_route('orders.created', 'redis', 'orders-stream')"
sleep 1
psql_demo -c "SELECT pid, backend_type, datname FROM pg_stat_activity WHERE backend_type LIKE 'outbox%'"

step "An order and its events, committed together"
psql_demo -e <<'SQL'
CREATE TABLE orders (id int PRIMARY KEY, total numeric, paid boolean DEFAULT false);
BEGIN;
INSERT INTO orders VALUES (1, 42.50);
SELECT outbox.emit('orders.created', '{"order_id": 1, "total": 42.50}', 'order-1',
                   '{"source": "demo"}');
UPDATE orders SET paid = true WHERE id = 1;
SELECT outbox.emit('orders.paid', '{"order_id": 1}', 'order-1');
COMMIT;
SQL

step "An order that rolls back: its event vanishes with it"
psql_demo -e <<'SQL'
BEGIN;
INSERT INTO orders VALUES (2, 10.00);
SELECT outbox.emit('orders.created', '{"order_id": 2, "total": 10.00}', 'order-2');
ROLLBACK;
SQL

step "A savepoint rolled back inside a committed transaction"
psql_demo -e <<'SQL'
BEGIN;
INSERT INTO orders VALUES (3, 7.00);
SELECT outbox.emit('orders.created', '{"order_id": 3, "total": 7.00}', 'order-3');
SAVEPOINT discount;
SELECT outbox.emit('orders.discounted', '{"order_id": 3}', 'order-3');
ROLLBACK TO SAVEPOINT discount;
COMMIT;
SQL

step "Published: orders 1 and 3, nothing of order 2 or the discount"
echo "(routes: orders.created -> Redis stream orders-stream, exact pattern; other orders.* -> Kafka topic orders)"
for _ in $(seq 50); do
  [[ $(psql_demo -Atc "SELECT count(*) FROM outbox.events WHERE status = 'pending'") == 0 ]] && break
  sleep 0.1
done
psql_demo -c "SELECT topic, key, payload, status, published_at - created_at AS latency FROM outbox.events ORDER BY id"
psql_demo -c "SELECT * FROM outbox.stats"

step "What arrived at Kafka (topic orders: the orders.paid event)"
"$REPO/test/kafka/kafka_consume" -b "$BOOTSTRAP" -t orders --timeout-ms 2000

step "What arrived at Redis (stream orders-stream: the orders.created events)"
redis-cli -p "$REDIS_PORT" XRANGE orders-stream - +

step "Done"
