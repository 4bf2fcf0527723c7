#!/usr/bin/env bash
# The demo command: installs what is missing, builds and installs outbox,
# starts a throwaway PostgreSQL with the extension preloaded, emits events in
# committed and rolled-back transactions (and a rolled-back savepoint), and
# shows what the event store kept.
#
#   bash test/demo.sh
#
# Today it stops at the event store: the publisher that delivers events to
# Kafka and Redis is the next piece of work (see README "Status"); this
# script will then also start a local Redis and the test Kafka broker and
# show what arrived at each.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
export PATH=/usr/lib/postgresql/15/bin:$PATH
export PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Installing missing packages"
bash test/install_deps.sh

step "Building and installing outbox"
make -s -j2 >/dev/null
make -s install >/dev/null
echo "installed $(ls "$(pg_config --pkglibdir)"/outbox.so)"

# shellcheck source=lib/cluster.sh
source "$REPO/test/lib/cluster.sh"
DIR=$(make_cluster_dir)
PORT=$(pick_free_port 54400)
trap 'stop_cluster "$DIR"; rm -rf "$DIR"' EXIT

step "Starting PostgreSQL 15 with shared_preload_libraries = 'outbox'"
start_cluster "$DIR" "$PORT"
psql_demo() { psql -X -h "$DIR" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }

step "CREATE EXTENSION outbox"
psql_demo -c "CREATE EXTENSION outbox"

step "An order and its event, committed together"
psql_demo -e <<'SQL'
CREATE TABLE orders (id int PRIMARY KEY, total numeric);
BEGIN;
INSERT INTO orders VALUES (1, 42.50);
SELECT outbox.emit('orders.created', '{"order_id": 1, "total": 42.50}', 'order-1',
                   '{"source": "demo"}');
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

step "What the event store kept (orders 1 and 3; nothing of order 2 or the discount)"
psql_demo -c "SELECT id, topic, key, payload, status FROM outbox.events ORDER BY id"
psql_demo -c "SELECT * FROM outbox.stats"
psql_demo -c "SELECT * FROM outbox.partitions"

step "Where events will go: a sink and a route"
psql_demo -e <<'SQL'
SELECT outbox.create_sink('kafka', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092"}');
SELECT outbox.add_route('orders.*', 'kafka');
SELECT * FROM outbox.route_for('orders.created');
SQL

step "Done"
echo "Events wait as 'pending' until the publisher (next release) delivers them."
