#!/bin/bash
# Installs the npm packages bench/sink_relay_nats.mjs (the NATS JetStream
# relay of bench/sink_drain and bench/sink_latency) is written with: the
# `nats` client and `pg` (node-postgres), pinned, into a private directory:
# DIR (default: bench/node_tools). Nothing is installed globally. Run by
# test/install_deps.sh; the scripts find the packages through
# OUTBOX_BENCH_NODE_TOOLS or that default directory.
set -euo pipefail
DIR=${1:-$(cd "$(dirname "$0")" && pwd)/node_tools}
NATS=2.29.3
PG=8.23.1
mkdir -p "$DIR"
if [[ -f $DIR/.installed ]] && [[ $(cat "$DIR/.installed") == "$NATS $PG" ]]; then
  exit 0
fi
cd "$DIR"
[[ -f package.json ]] || echo '{"name": "outbox-bench-tools", "private": true}' >package.json
npm install --no-audit --no-fund --save-exact --ignore-scripts "nats@$NATS" "pg@$PG" >/dev/null
echo "$NATS $PG" >.installed
