#!/usr/bin/env bash
# The TAP suite N times in a row on a busy machine (test/README.md, "On a
# busy machine"): each run a fresh clone of REV from REPO, OUTBOX_SUITES=TAP
# with two lanes as CI runs it, against a private copy of the PostgreSQL
# tree (so that nothing else installing into the system's directories
# disturbs it), while `make clean; make -j2` of the extension loops beside
# it and keeps both cores busy.
#
#   bash test/busy_tap_runs.sh N REV [REPO] [WORKDIR]
#
# WORKDIR (default /var/tmp/outbox-busy) gets `summary` (a line per run,
# and the failed files), `runK.log` (each run's output) and `resultsK/` (a
# failed run's test/results, its TAP logs included). `touch WORKDIR/stop`
# ends the series after the current run. Needs root, the test dependencies
# (test/install_deps.sh) and PostgreSQL 15's server packages; run it with
# nothing else heavy on the machine, or say what else ran.
set -u
N=${1:?number of runs}
REV=${2:?revision}
REPO=${3:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
OUT=${4:-/var/tmp/outbox-busy}
PG=/usr/lib/postgresql/15
mkdir -p "$OUT"
rm -f "$OUT/stop"

tree=$OUT/pgtree
if [[ ! -x $tree$PG/bin/pg_config ]]; then
  mkdir -p "$tree/usr/lib/postgresql" "$tree/usr/share/postgresql" "$tree/usr/include"
  cp -a "$PG" "$tree/usr/lib/postgresql/"
  cp -a /usr/share/postgresql/15 "$tree/usr/share/postgresql/"
  cp -a /usr/include/postgresql "$tree/usr/include/"
fi

rm -rf "$OUT/loop"
{ git clone -q "$REPO" "$OUT/loop" && git -C "$OUT/loop" checkout -q "$REV"; } || exit 1
(
  cd "$OUT/loop" || exit 1
  while [[ ! -e $OUT/stop ]]; do
    make -s clean PG_CONFIG="$PG/bin/pg_config" >/dev/null 2>&1
    make -s -j2 PG_CONFIG="$PG/bin/pg_config" >/dev/null 2>&1
  done
) &
loop=$!

echo "$(date -u +%FT%TZ) $N runs of $(git -C "$REPO" rev-parse --short "$REV")" >>"$OUT/summary"
for ((i = 1; i <= N; i++)); do
  [[ -e $OUT/stop ]] && break
  rm -rf "$OUT/clone"
  { git clone -q "$REPO" "$OUT/clone" && git -C "$OUT/clone" checkout -q "$REV"; } || break
  # The npm tools of the HTTP suites, when the repository has them installed.
  [[ -d $REPO/test/http/node_tools ]] && cp -a "$REPO/test/http/node_tools" "$OUT/clone/test/http/"
  start=$(date +%s)
  (cd "$OUT/clone" && OUTBOX_SKIP_DEPS=1 OUTBOX_SUITES=TAP PG_CONFIG="$tree$PG/bin/pg_config" \
    bash test/run_all.sh >"$OUT/run$i.log" 2>&1)
  rc=$?
  echo "$(date -u +%FT%TZ) run $i: rc=$rc, $(($(date +%s) - start)) s, $(tail -n 1 "$OUT/run$i.log"), load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/summary"
  grep -E '^--- ' "$OUT/run$i.log" >>"$OUT/summary"
  if ((rc != 0)); then
    rm -rf "$OUT/results$i"
    mv "$OUT/clone/test/results" "$OUT/results$i"
  fi
done
touch "$OUT/stop"
wait "$loop"
echo "$(date -u +%FT%TZ) done" >>"$OUT/summary"
