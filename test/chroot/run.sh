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
# with the server's default_transaction_isolation at ISOLATION (OUTBOX_CHROOT_SUITES names others). Its exit status is that
# run's. Needs root (chroot, mount).
#
# The chroot shares the host's network: the suites pick free ports as they do
# on the host, so this can run beside another run. Everything it mounts
# (/proc, /dev/shm, /dev/pts) and every process it started inside is gone
# when it returns, however it ends.
set -euo pipefail

CHROOT=$(cd "${1:?chroot directory}" && pwd -P)  # as /proc/PID/root and findmnt name it
MAJOR=${2:?major}
ISOLATION=${3:?default_transaction_isolation for the publisher suites}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

((EUID == 0)) || { echo "chroot/run: needs root" >&2; exit 1; }
# The clean-up kills every process whose root is CHROOT: never the host's.
[[ $CHROOT != / ]] || { echo "chroot/run: / is not a chroot" >&2; exit 1; }
[[ -x "$CHROOT/usr/lib/postgresql/$MAJOR/bin/pg_config" ]] ||
  { echo "chroot/run: $CHROOT has no PostgreSQL $MAJOR (test/chroot/prepare.sh)" >&2; exit 1; }

WORK_IN=$(mktemp -d "$CHROOT/tmp/outbox-run.XXXXXX")
WORK=${WORK_IN#"$CHROOT"}  # the same directory as the chroot sees it
MOUNTS=()

# Stop whatever still runs inside (a server a failed test left behind), then
# unmount, innermost first. Without this the mounts would pin the chroot.
finish() {
  local pid root pass
  for pass in TERM KILL; do
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
      root=$(readlink "/proc/$pid/root" 2>/dev/null || true)
      [[ $root == "$CHROOT" ]] && kill "-$pass" "$pid" 2>/dev/null || true
    done
    [[ $pass == TERM ]] && sleep 2
  done
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTS[$i]}" 2>/dev/null || umount -l "${MOUNTS[$i]}" 2>/dev/null || true
  done
  rm -rf --one-file-system "$WORK_IN"
}
trap finish EXIT

mount_in() {  # mount_in TARGET mount-arguments...
  local target=$CHROOT/$1
  shift
  mkdir -p "$target"
  mountpoint -q "$target" && return 0
  mount "$@" "$target"
  MOUNTS+=("$target")
}
mount_in proc -t proc proc
mount_in dev/shm -t tmpfs -o mode=1777,size=2g tmpfs # PostgreSQL's dynamic shared memory
mount_in dev/pts --bind /dev/pts                      # IO::Pty (interactive psql in TAP)

# The checkout without what the host's builds and runs left in it.
tar -C "$REPO" --exclude=./.git --exclude='./build*' --exclude=./test/results \
  --exclude='*.o' --exclude='*.so' --exclude=./.deps \
  --exclude=./test/kafka/kafka_broker --exclude=./test/kafka/kafka_consume -cf - . |
  tar -C "$WORK_IN" -xf -

chroot "$CHROOT" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root TERM=dumb LC_ALL=C.UTF-8 LANG=C.UTF-8 \
  OUTBOX_SKIP_DEPS=1 OUTBOX_PG_MAJOR="$MAJOR" \
  OUTBOX_SUITES="${OUTBOX_CHROOT_SUITES:-regression isolation TAP_publisher}" \
  OUTBOX_TAP_ISOLATION="$ISOLATION" OUTBOX_TAP_FILES="${OUTBOX_TAP_FILES:-}" \
  bash "$WORK/test/run_all.sh"
