#!/usr/bin/env bash
# Run outbox's suites against another PostgreSQL major, inside a Debian chroot
# made by test/chroot/prepare.sh (that suite's PostgreSQL, librdkafka, hiredis).
#
#   bash test/chroot/run.sh CHROOT MAJOR ISOLATION
#
# A copy of this checkout goes to a private directory inside the chroot, and
# test/run_all.sh runs there with OUTBOX_SUITES="regression isolation
# TAP_publisher": the PGXS and fault injection builds, the regression and
# isolation suites, and the publisher's TAP suites (fault suites included)
# with the server's default_transaction_isolation at ISOLATION
# (OUTBOX_CHROOT_SUITES names others). Its exit status is that run's; the
# failed tests it names are copied to the file OUTBOX_CHROOT_FAILURES names,
# and it keeps to OUTBOX_CHROOT_BUDGET seconds. Needs root (chroot, mount,
# unshare).
#
# The run lives in a mount and PID namespace of its own: what it mounts
# (/proc, /dev/shm, /dev/pts) is seen by nobody else, and every process it
# started inside is gone when it returns, however it ends (its namespace's
# first process exits last and takes the rest with it). So two runs, of one
# checkout or two, can share one chroot at once. The chroot shares the host's
# network: the suites pick free ports as they do on the host.
set -euo pipefail

CHROOT=$(cd "${1:?chroot directory}" && pwd -P)
MAJOR=${2:?major}
ISOLATION=${3:?default_transaction_isolation for the publisher suites}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

((EUID == 0)) || { echo "chroot/run: needs root" >&2; exit 1; }
[[ $CHROOT != / ]] || { echo "chroot/run: / is not a chroot" >&2; exit 1; }
[[ -x "$CHROOT/usr/lib/postgresql/$MAJOR/bin/pg_config" ]] ||
  { echo "chroot/run: $CHROOT has no PostgreSQL $MAJOR (test/chroot/prepare.sh)" >&2; exit 1; }

if [[ ${OUTBOX_CHROOT_NAMESPACE:-} != "$CHROOT" ]]; then
  # --kill-child: this process's end (a timeout's signal, even SIGKILL)
  # sends TERM to the namespace's first process, which ends the run and with
  # it every process of the namespace.
  exec unshare --mount --pid --fork --kill-child=TERM --propagation private \
    env OUTBOX_CHROOT_NAMESPACE="$CHROOT" bash "${BASH_SOURCE[0]}" "$@"
fi

# From here on: PID 1 of a private PID namespace, in a private mount namespace.
WORK_IN=$(mktemp -d "$CHROOT/tmp/outbox-run.XXXXXX")
WORK=${WORK_IN#"$CHROOT"} # the same directory as the chroot sees it

# Stop whatever still runs (a server a failed test left behind) before its
# files go: `kill -1` from a PID namespace's first process reaches every
# other process of the namespace and nothing outside it.
finish() {
  kill -KILL -1 2>/dev/null || true
  sleep 0.2
  rm -rf --one-file-system "$WORK_IN"
}
trap finish EXIT
trap 'exit 143' TERM INT HUP

mount_in() { # mount_in TARGET mount-arguments...
  local target=$CHROOT/$1
  shift
  mkdir -p "$target"
  mount "$@" "$target"
}
mount_in proc -t proc proc # this namespace's processes only
mount_in dev/shm -t tmpfs -o mode=1777,size=2g tmpfs # PostgreSQL's dynamic shared memory
mount_in dev/pts --bind /dev/pts                      # IO::Pty (interactive psql in TAP)

# The checkout without what the host's builds and runs left in it.
tar -C "$REPO" --exclude=./.git --exclude='./build*' --exclude=./test/results \
  --exclude='*.o' --exclude='*.so' --exclude=./.deps \
  --exclude=./test/kafka/kafka_broker --exclude=./test/kafka/kafka_consume -cf - . |
  tar -C "$WORK_IN" -xf -

status=0
chroot "$CHROOT" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root TERM=dumb LC_ALL=C.UTF-8 LANG=C.UTF-8 \
  OUTBOX_SKIP_DEPS=1 OUTBOX_PG_MAJOR="$MAJOR" \
  OUTBOX_SUITES="${OUTBOX_CHROOT_SUITES:-regression isolation TAP_publisher}" \
  OUTBOX_TAP_ISOLATION="$ISOLATION" OUTBOX_TAP_FILES="${OUTBOX_TAP_FILES:-}" \
  OUTBOX_FAILURES_FILE="$WORK/failures.txt" OUTBOX_RUN_BUDGET="${OUTBOX_CHROOT_BUDGET:-3300}" \
  bash "$WORK/test/run_all.sh" &
# In the background and waited for: a trapped TERM interrupts `wait` at
# once, where it would wait for a foreground command to end.
wait $! || status=$?
# The failed tests, by name, for the outer run's summary.
if [[ -n ${OUTBOX_CHROOT_FAILURES:-} && -s "$WORK_IN/failures.txt" ]]; then
  cp "$WORK_IN/failures.txt" "$OUTBOX_CHROOT_FAILURES"
fi
exit "$status"
