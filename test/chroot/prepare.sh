#!/usr/bin/env bash
# Make a Debian chroot with one PostgreSQL major and that suite's librdkafka
# and hiredis, for running outbox's suites against them (test/chroot/run.sh).
#
#   bash test/chroot/prepare.sh SUITE MAJOR DIR
#
# SUITE is a Debian suite (trixie ships PostgreSQL 17, sid 18), DIR a new or
# empty directory (about 2 GB). Needs root and debootstrap; packages come from
# deb.debian.org, or the mirror OUTBOX_DEBIAN_MIRROR names. A DIR that already holds a finished chroot
# for SUITE and MAJOR is reused: it is kept only once every package is in.
set -euo pipefail

SUITE=${1:?suite} MAJOR=${2:?major} DIR=${3:?directory}
MIRROR=${OUTBOX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
STAMP="$DIR/.outbox-chroot-$SUITE-$MAJOR"

if [[ -f "$STAMP" ]]; then
  echo "prepare: $DIR already holds $SUITE with PostgreSQL $MAJOR"
  exit 0
fi
((EUID == 0)) || { echo "prepare: needs root (debootstrap, chroot)" >&2; exit 1; }
if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
fi

mkdir -p "$DIR"
# sid's Release file may be older than its Valid-Until on a mirror snapshot.
APT_OPTS=(-o Acquire::Check-Valid-Until=false -o APT::Install-Recommends=false -q -y)

if [[ ! -x "$DIR/usr/bin/apt-get" ]]; then
  echo "prepare: debootstrap $SUITE into $DIR"
  debootstrap --variant=minbase --no-check-gpg "$SUITE" "$DIR" "$MIRROR" >"$DIR.debootstrap.log" 2>&1 ||
    { tail -n 40 "$DIR.debootstrap.log" >&2; exit 1; }
  rm -f "$DIR.debootstrap.log"
fi

# The packages the suites need inside (the host's test/install_deps.sh list,
# less what only the host's suites use: sanitizers, fuzzing, the benchmarks).
PACKAGES=(
  build-essential g++ cmake pkg-config make
  "postgresql-$MAJOR" "postgresql-server-dev-$MAJOR"
  librdkafka-dev libhiredis-dev libipc-run-perl libio-pty-perl
  redis-server kcat googletest libgtest-dev gdb procps
)
echo "prepare: installing ${#PACKAGES[@]} packages into the $SUITE chroot"
# No service may start inside the chroot (the host owns init); policy-rc.d 101
# makes invoke-rc.d skip every start.
printf '#!/bin/sh\nexit 101\n' >"$DIR/usr/sbin/policy-rc.d"
chmod 755 "$DIR/usr/sbin/policy-rc.d"
mkdir -p "$DIR/proc"
mountpoint -q "$DIR/proc" || mount -t proc proc "$DIR/proc"
trap 'umount -l "$DIR/proc" 2>/dev/null || true' EXIT
chroot "$DIR" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get "${APT_OPTS[@]}" update >/dev/null
chroot "$DIR" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get "${APT_OPTS[@]}" install "${PACKAGES[@]}" \
  >"$DIR/tmp/apt-install.log" 2>&1 || { tail -n 40 "$DIR/tmp/apt-install.log" >&2; exit 1; }
chroot "$DIR" apt-get clean
test -x "$DIR/usr/lib/postgresql/$MAJOR/bin/pg_config" ||
  { echo "prepare: PostgreSQL $MAJOR is not in the $SUITE chroot" >&2; exit 1; }
echo "prepare: $SUITE chroot ready: PostgreSQL $("$DIR/usr/lib/postgresql/$MAJOR/bin/pg_config" --version 2>/dev/null || echo "$MAJOR")," \
  "librdkafka $(chroot "$DIR" dpkg-query -W -f='${Version}' librdkafka-dev)," \
  "hiredis $(chroot "$DIR" dpkg-query -W -f='${Version}' libhiredis-dev)"
touch "$STAMP"
