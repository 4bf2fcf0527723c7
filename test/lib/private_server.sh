#!/usr/bin/env bash
# make installcheck's own server. The Makefile puts this in front of PGXS's
# pg_regress and pg_isolation_regress commands:
#
#   bash test/lib/private_server.sh COMMAND...
#
# starts a throwaway PostgreSQL (test/lib/cluster.sh: a new directory, a free
# port, a Unix socket only, the settings in test/regress.conf) with the
# binaries of the --bindir COMMAND names, runs COMMAND against it with PGHOST,
# PGPORT and PGUSER set, and stops and removes it however COMMAND ends. Its
# exit status is COMMAND's; on failure the end of the server's log is shown.
# As root, the server runs as the `postgres` OS user (initdb refuses root).
# `make installcheck OUTBOX_SERVER=existing` skips this and uses the server
# that PGHOST and PGPORT name.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

for arg in "$@"; do
  case $arg in
    --bindir=*) PG_BINDIR=${arg#--bindir=} PG_BINDIR=${PG_BINDIR//\'/} ;;
  esac
done
export PG_BINDIR
# shellcheck source=cluster.sh
source "$HERE/cluster.sh" || exit 1

EXTRA_CONF=()
[[ -f "$REPO/test/regress.conf" ]] && mapfile -t EXTRA_CONF <"$REPO/test/regress.conf"
reap_stale_clusters
DIR=$(make_cluster_dir) || exit 1
# An OUTBOX_ variable the server's environment has, for sinks.sql: a role
# that may not name the environment gets the same error for it as for one
# the server lacks.
export OUTBOX_REGRESS_SET=regress-secret
trap 'stop_cluster "$DIR"; rm -rf "$DIR"' EXIT
PORT=$(pick_free_port 54329)
if ! start_cluster "$DIR" "$PORT" "${EXTRA_CONF[@]}"; then
  print_server_log_tail "$DIR"
  exit 1
fi
export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres
unset PGDATABASE PGSERVICE PGOPTIONS PGPASSWORD
"$@"
status=$?
((status == 0)) || print_server_log_tail "$DIR"
exit "$status"
