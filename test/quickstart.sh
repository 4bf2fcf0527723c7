#!/usr/bin/env bash
# The README's Quick start, run as a user pastes it: every fenced block of the
# section, in order, taken from README.md itself (so the text and this test
# cannot drift apart). A `sh` block runs in bash from the source tree's root,
# a `sql` block in psql connected to a server that preloads outbox (as the
# reader's own psql would be), and a `text` block is what the `sh` block
# before it must print, read modulo event ids, Redis stream entry ids and
# timestamps.
#
#   bash test/quickstart.sh
#
# The blocks name the ports a reader would use (Redis on 6379, Kafka on
# 9092): they run in a network, PID and mount namespace of this test's own,
# with a loopback of its own, so those ports are free and nothing the blocks
# start (a daemonized redis-server, a broker in the background) outlives the
# test. Needs root (unshare, and the server runs as the `postgres` OS user)
# and the extension installed (make install).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
README=${OUTBOX_README:-$REPO/README.md}

if [[ ${OUTBOX_QUICKSTART_NAMESPACE:-} != 1 ]]; then
  ((EUID == 0)) || { echo "quickstart: needs root (unshare)" >&2; exit 1; }
  exec unshare --net --pid --fork --kill-child --mount --mount-proc --propagation private \
    env OUTBOX_QUICKSTART_NAMESPACE=1 bash "${BASH_SOURCE[0]}" "$@"
fi
ip link set lo up

# shellcheck source=lib/pg_major.sh
source "$REPO/test/lib/pg_major.sh"
outbox_use_postgres
WORK=$(mktemp -d /tmp/outbox-quickstart.XXXXXX)
chmod 755 "$WORK"
# Clusters under a base of this test's own: another run's reap of stale
# clusters cannot take a PID of this namespace for a dead one of its own.
export CLUSTER_TMP_BASE=$WORK
# shellcheck source=lib/cluster.sh
source "$REPO/test/lib/cluster.sh"
DIR=$(make_cluster_dir)
finish() {
  stop_cluster "$DIR" || true
  kill -KILL -1 2>/dev/null || true # the brokers the blocks started
  rm -rf "$WORK"
}
trap finish EXIT

# The section's blocks, one file each: NN.sh, NN.sql, NN.text.
python3 - "$README" "$WORK/blocks" <<'PY'
import os, re, sys
readme, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
lines = open(readme, encoding="utf-8").read().split("\n")
try:
    start = lines.index("## Quick start")
except ValueError:
    sys.exit("quickstart: README.md has no '## Quick start' section")
section = []
for line in lines[start + 1:]:
    if line.startswith("## "):
        break
    section.append(line)
n, block, lang = 0, None, None
for line in section:
    fence = re.match(r"^```(\w*)\s*$", line)
    if fence and block is None:
        block, lang = [], fence.group(1) or "text"
    elif line.startswith("```") and block is not None:
        n += 1
        if lang not in ("sh", "sql", "text"):
            sys.exit(f"quickstart: block {n} is ```{lang}: only sh, sql and text are run or read")
        with open(os.path.join(out, f"{n:02d}.{lang}"), "w", encoding="utf-8") as f:
            f.write("\n".join(block) + "\n")
        block = None
    elif block is not None:
        block.append(line)
if block is not None:
    sys.exit("quickstart: a fenced block is not closed")
if n == 0:
    sys.exit("quickstart: the Quick start has no fenced block")
PY

PORT=$(pick_free_port 5432)
start_cluster "$DIR" "$PORT" >/dev/null
# What a reader's psql finds on its own: their server, as a superuser.
export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS PGSERVICE PGPASSWORD

# Event ids, stream entry ids and times differ from run to run.
normalize() {
  sed -E \
    -e 's/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/<uuid>/g' \
    -e 's/"[0-9]{13}-[0-9]+"/"<entry-id>"/g' \
    -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9:.]+([+-][0-9:]+|Z)?/<time>/g'
}

status=0
last_out=""
cd "$REPO"
for block in "$WORK"/blocks/*; do
  name=$(basename "$block")
  case $name in
    *.sh)
      echo "----- $name (sh) -----"
      cat "$block"
      last_out=$WORK/$name.out
      if ! timeout 300 bash -eo pipefail "$block" >"$last_out" 2>"$WORK/$name.err"; then
        echo "quickstart: block $name failed:"
        cat "$last_out" "$WORK/$name.err"
        status=1
        break
      fi
      cat "$last_out"
      ;;
    *.sql)
      echo "----- $name (sql, psql as a superuser) -----"
      if ! timeout 300 psql -X -v ON_ERROR_STOP=1 -f "$block" >"$WORK/$name.out" 2>&1; then
        echo "quickstart: block $name failed:"
        cat "$WORK/$name.out"
        status=1
        break
      fi
      cat "$WORK/$name.out"
      ;;
    *.text)
      [[ -n $last_out ]] || continue # output shown for a block this test does not run
      if ! diff -u <(normalize <"$block") <(normalize <"$last_out") >"$WORK/$name.diff"; then
        echo "quickstart: what the sh block before $name printed is not what the README shows:"
        cat "$WORK/$name.diff"
        status=1
      fi
      last_out=""
      ;;
  esac
done
if ((status != 0)); then
  print_server_log_tail "$DIR" 30
  exit 1
fi
echo "quickstart: every block of the README's Quick start ran as written, and printed what it shows"
