# shellcheck shell=bash
# Throwaway PostgreSQL clusters for tests and the demo. Source this file:
#
#   source test/lib/cluster.sh
#   dir=$(make_cluster_dir)            # mktemp -d, owned by the server's OS user
#   port=$(pick_free_port 54329)
#   start_cluster "$dir" "$port" "outbox.poll_interval = 100"
#   psql -h "$dir" -p "$port" -U postgres -c 'select 1'
#   stop_cluster "$dir"
#
# Why it looks like this:
# - initdb refuses to run as root, so when we are root the server runs as the
#   `postgres` OS user (created by Debian's postgresql-NN package); clients
#   (psql, pg_regress) can still run as root and connect with -U postgres.
# - The server listens only on a Unix socket inside its own directory
#   (listen_addresses = ''), so it can never collide with Debian's "main"
#   cluster on 5432 or with another test run; the port only names the socket.
# - Each cluster directory records the PID of the script that owns it, so a
#   later run can find and stop clusters whose owner died (kill -9, CI timeout)
#   without touching clusters of runs that are still going.

if [[ -z ${PG_BINDIR:-} ]]; then
  # shellcheck source=pg_major.sh
  source "$(dirname "${BASH_SOURCE[0]}")/pg_major.sh"
  outbox_use_postgres || return 1
fi
CLUSTER_OS_USER=${CLUSTER_OS_USER:-postgres}
# Short base so socket paths stay under the 107-byte sun_path limit.
CLUSTER_TMP_BASE=${CLUSTER_TMP_BASE:-/tmp}

# Run a command as the server's OS user (directly when we are not root).
as_server_user() {
  if ((EUID == 0)); then
    # runuser keeps the environment; cd to / so a cwd that the user cannot
    # read (e.g. /root) does not make initdb or pg_ctl complain.
    (cd / && runuser -u "$CLUSTER_OS_USER" -- "$@")
  else
    "$@"
  fi
}

# Create an empty cluster directory owned by the server's user; print its path.
make_cluster_dir() {
  local dir
  dir=$(mktemp -d "$CLUSTER_TMP_BASE/outbox-pg.XXXXXX") || return 1
  chmod 0755 "$dir"
  if ((EUID == 0)); then chown "$CLUSTER_OS_USER:" "$dir" || return 1; fi
  echo $$ >"$dir/owner.pid"  # claim it at once, before reap_stale_clusters can see it
  echo "$dir"
}

# True when something already uses PORT: a TCP listener on loopback or a
# PostgreSQL socket lock file in the usual socket directories.
port_in_use() {
  local port=$1 d
  for d in /tmp /var/run/postgresql; do
    [[ -e "$d/.s.PGSQL.$port" || -e "$d/.s.PGSQL.$port.lock" ]] && return 0
  done
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
  return 1
}

# Print the first port at or above START (default 54329) that nothing uses.
pick_free_port() {
  local port=${1:-54329} last=$((${1:-54329} + 200))
  while ((port < last)); do
    if ! port_in_use "$port"; then
      echo "$port"
      return 0
    fi
    port=$((port + 1))
  done
  echo "pick_free_port: no free port in ${1:-54329}..$last" >&2
  return 1
}

# start_cluster DIR PORT [EXTRA_CONF_LINE...]
# initdb into DIR/data and start the server with outbox preloaded, logging to
# DIR/server.log. Extra lines are appended last, so they can override the
# defaults (e.g. "shared_preload_libraries = ''").
start_cluster() {
  local dir=$1 port=$2
  shift 2
  if [[ -z "$dir" || -z "$port" ]]; then
    echo "usage: start_cluster DIR PORT [extra conf lines...]" >&2
    return 2
  fi
  mkdir -p "$dir"
  if ((EUID == 0)); then chown "$CLUSTER_OS_USER:" "$dir" || return 1; fi
  echo $$ >"$dir/owner.pid"

  # Re-using a directory: stop whatever still runs there and start afresh.
  stop_cluster "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir/data"

  # --no-sync/fsync=off: nothing here needs to survive a power cut.
  # C locale and UTF8: expected outputs must not depend on the machine's locale.
  as_server_user "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres \
    --no-sync --encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
    echo "start_cluster: initdb failed:" >&2
    cat "$dir/initdb.log" >&2
    return 1
  }

  {
    echo ""
    echo "# Added by test/lib/cluster.sh"
    echo "port = $port"
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$dir'"
    echo "shared_preload_libraries = 'outbox'"
    echo "fsync = off"
    echo "full_page_writes = off"
    echo "synchronous_commit = off"
    echo "logging_collector = off"
    echo "log_line_prefix = '%m [%p] %q%a %u@%d '"
    local line
    for line in "$@"; do echo "$line"; done
  } >>"$dir/data/postgresql.conf"

  if ! as_server_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" \
    -w -t 60 start >"$dir/pg_ctl.log" 2>&1; then
    echo "start_cluster: server did not start; last lines of $dir/server.log:" >&2
    tail -n 40 "$dir/server.log" >&2 2>/dev/null || cat "$dir/pg_ctl.log" >&2
    return 1
  fi
  echo "start_cluster: PostgreSQL running in $dir (socket $dir, port $port)"
}

# stop_cluster DIR: fast shutdown, falling back to immediate. Safe to call on a
# directory whose server is not running or which does not exist.
stop_cluster() {
  local dir=$1
  [[ -n "$dir" && -f "$dir/data/postmaster.pid" ]] || return 0
  as_server_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
    as_server_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1
}

# Stop and remove cluster directories left behind by runs that no longer exist
# (their owner.pid names a dead process). Clusters of live runs are untouched.
reap_stale_clusters() {
  local dir pid
  for dir in "$CLUSTER_TMP_BASE"/outbox-pg.*; do
    [[ -d "$dir" ]] || continue
    pid=$(cat "$dir/owner.pid" 2>/dev/null || true)
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then continue; fi
    echo "reap_stale_clusters: removing leftover $dir"
    stop_cluster "$dir" || true
    rm -rf "$dir"
  done
}

# Print the last N (default 60) lines of DIR's server log, for failure reports.
print_server_log_tail() {
  local dir=$1 n=${2:-60}
  [[ -f "$dir/server.log" ]] || return 0
  echo "----- last $n lines of $dir/server.log -----"
  tail -n "$n" "$dir/server.log"
  echo "----- end of server log -----"
}
