#!/bin/bash
# Installs the npm packages bench/sink_relay_nats.mjs (the NATS JetStream
# relay of bench/sink_drain and bench/sink_latency) is written with: the
# `nats` client and `pg` (node-postgres), pinned, into a private directory:
# DIR (default: bench/node_tools). Nothing is installed globally. Run by the
# benchmarks themselves (bench/sink_lib.sh) when they start, not by CI; they
# find the packages through OUTBOX_BENCH_NODE_TOOLS or that default directory.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
exec bash "$HERE/../test/lib/install_npm_pinned.sh" "${1:-$HERE/node_tools}" outbox-bench-tools \
  nats@2.29.3 pg@8.23.1
