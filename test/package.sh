#!/usr/bin/env bash
# Build the Debian package (debian/) from a copy of this checkout, install it,
# and prove the installed package works: a throwaway server preloads the
# packaged outbox.so, CREATE EXTENSION makes the version outbox.control names, and an event
# emitted in a committed transaction arrives in a Redis stream.
#
#   bash test/package.sh WORKDIR
#
# Needs root (dpkg -i) and what test/install_deps.sh installs (debhelper,
# postgresql-server-dev-all among it). The package is removed again at the
# end, and the checkout's own build re-installed (`make install`), so the
# machine is left as the other suites expect it. Exit status 0 when all held.
set -euo pipefail

WORK=${1:?work directory}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/pg_major.sh
source "$REPO/test/lib/pg_major.sh"
outbox_use_postgres
# shellcheck source=lib/cluster.sh
source "$REPO/test/lib/cluster.sh"

VERSION=$(dpkg-parsechangelog -l "$REPO/debian/changelog" -S Version)
PACKAGE=postgresql-$PG_MAJOR-outbox
mkdir -p "$WORK/src"
# The checkout without what the builds and runs left in it.
tar -C "$REPO" --exclude=./.git --exclude='./build*' --exclude=./test/results \
  --exclude='*.o' --exclude='*.so' --exclude=./.deps \
  --exclude=./test/kafka/kafka_broker --exclude=./test/kafka/kafka_consume -cf - . |
  tar -C "$WORK/src" -xf -

echo "package: building $PACKAGE $VERSION (dpkg-buildpackage, noopt)"
# noopt (-O0): what this suite proves is the packaging (files, paths, the
# install, a delivery); the optimised build of the same sources is the one
# the other suites test. Optimising would cost the loaded CI machine a
# second full -O2 build (it once ran past this suite's 15 minutes).
if ! (cd "$WORK/src" && DEB_BUILD_OPTIONS="parallel=2 noopt" \
  dpkg-buildpackage -us -uc -b >"$WORK/build.log" 2>&1); then
  tail -n 60 "$WORK/build.log"
  echo "package: dpkg-buildpackage failed (log: $WORK/build.log)" >&2
  exit 1
fi
DEB=$WORK/${PACKAGE}_${VERSION}_$(dpkg --print-architecture).deb
[[ -f $DEB ]] || { echo "package: $DEB was not built; built: $(ls "$WORK"/*.deb)" >&2; exit 1; }
dpkg-deb -c "$DEB" | awk '{print "  " $6}' | grep -E '\.(so|control|sql)$'

REDIS_PID="" DIR=""
finish() {
  [[ -n $DIR ]] && { stop_cluster "$DIR"; rm -rf "$DIR"; }
  [[ -n $REDIS_PID ]] && kill "$REDIS_PID" 2>/dev/null
  if dpkg-query -W -f='${Status}' "$PACKAGE" 2>/dev/null | grep -q 'ok installed'; then
    dpkg -r "$PACKAGE" >/dev/null
    echo "package: removed $PACKAGE; re-installing the checkout's build"
    make -s -C "$REPO" install PG_CONFIG="$PG_CONFIG" >/dev/null
  fi
}
trap finish EXIT

dpkg -i "$DEB" >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; exit 1; }
so=$("$PG_CONFIG" --pkglibdir)/outbox.so
owner=$(dpkg -S "$so" | cut -d: -f1)
[[ $owner == "$PACKAGE" ]] || { echo "package: $so belongs to '$owner', not $PACKAGE" >&2; exit 1; }
echo "package: installed $PACKAGE; $so belongs to it"

REDIS_PORT=$(pick_free_port 16500)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --daemonize no >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
DIR=$(make_cluster_dir)
PORT=$(pick_free_port 54600)
start_cluster "$DIR" "$PORT" "outbox.poll_interval = 100" >/dev/null
PSQL=(psql -X -q -At -h "$DIR" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1)
"${PSQL[@]}" <<SQL
CREATE EXTENSION outbox;
SELECT outbox.create_sink('redis', 'redis', '{"port": $REDIS_PORT, "mode": "stream"}');
SELECT outbox.add_route('orders.*', 'redis', 'orders');
BEGIN;
SELECT outbox.emit('orders.created', '{"order": 1}', 'order-1') IS NOT NULL;
COMMIT;
SQL
DEFAULT_VERSION=$(sed -nE "s/^default_version = '(.*)'/\1/p" "$REPO/outbox.control")
[[ "$("${PSQL[@]}" -c "SELECT extversion FROM pg_extension WHERE extname = 'outbox'")" == "$DEFAULT_VERSION" ]] ||
  { echo "package: the installed extension is not version $DEFAULT_VERSION" >&2; exit 1; }
for ((i = 0; i < 100; i++)); do
  n=$(redis-cli -p "$REDIS_PORT" XLEN orders)
  ((n >= 1)) && break
  sleep 0.1
done
if ((n != 1)); then
  echo "package: the event did not arrive in Redis (XLEN orders = $n)" >&2
  print_server_log_tail "$DIR"
  exit 1
fi
echo "package: the packaged outbox delivered an event to Redis"
