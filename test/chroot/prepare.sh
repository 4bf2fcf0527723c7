#!/usr/bin/env bash
# Make a Debian chroot with one PostgreSQL major and that suite's librdkafka
# and hiredis, for running outbox's suites against them (test/chroot/run.sh).
#
#   bash test/chroot/prepare.sh SUITE MAJOR DIR
#
# SUITE is a Debian suite (trixie ships PostgreSQL 17, sid 18), DIR a new or
# empty directory (about 2 GB). Needs root and debootstrap. Packages come
# from the mirror OUTBOX_DEBIAN_MIRROR names, else from the Debian mirror
# this machine's own apt sources use (its main archive, not its security
# archive): the repository names no mirror, so a machine whose only route
# out is its configured mirror still works. A DIR that already holds a
# finished chroot for SUITE and MAJOR is reused: it is kept only once every
# package is in.
set -euo pipefail

SUITE=${1:?suite} MAJOR=${2:?major} DIR=${3:?directory}

# The first URI of an enabled `deb` source of this machine whose suites are
# not a security or backports archive: deb822 stanzas in sources.list.d/*.sources,
# then one-line entries in sources.list and sources.list.d/*.list.
host_debian_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk '
      function flush() {
        if (!done && types ~ /(^| )deb( |$)/ && enabled != "no" && suites != "" &&
            suites !~ /-(security|backports)/ && uris != "") {
          split(uris, u, " "); print u[1]; done = 1; exit
        }
        types = ""; suites = ""; uris = ""; enabled = ""
      }
      /^[ \t]*$/ { flush(); next }
      /^#/ { next }
      { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
        if (key == "types") types = $0; else if (key == "suites") suites = $0
        else if (key == "uris") uris = $0; else if (key == "enabled") enabled = tolower($0) }
      END { flush() }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    # deb [options] URI SUITE COMPONENTS...
    sed -nE 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+)[[:space:]]+([^[:space:]]+).*/\2 \3/p' "$f" |
      awk '$2 !~ /-(security|backports)/ { print $1 }'
  done
}
MIRROR=${OUTBOX_DEBIAN_MIRROR:-$(host_debian_mirror | head -n 1)}
if [[ -z $MIRROR ]]; then
  echo "prepare: no Debian mirror in this machine's apt sources; set OUTBOX_DEBIAN_MIRROR" >&2
  exit 1
fi
STAMP="$DIR/.outbox-chroot-$SUITE-$MAJOR"

# The packages the suites need inside (the host's test/install_deps.sh list,
# less what only the host's suites use: sanitizers, fuzzing, the benchmarks).
PACKAGES=(
  build-essential g++ cmake pkg-config make
  "postgresql-$MAJOR" "postgresql-server-dev-$MAJOR"
  librdkafka-dev libhiredis-dev libipc-run-perl libio-pty-perl libjson-xs-perl
  librabbitmq-dev libnats-dev libmosquitto-dev libcurl4-openssl-dev
  rabbitmq-server nats-server mosquitto python3-pika python3-paho-mqtt python3-aiohttp
  redis-server kcat googletest libgtest-dev gdb procps nodejs openssl
)

# The stamp holds the package list the chroot was finished with: a chroot
# kept from a run whose list differed gets the missing packages, not a new
# debootstrap.
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "${PACKAGES[*]}" ]]; then
  echo "prepare: $DIR already holds $SUITE with PostgreSQL $MAJOR"
  exit 0
fi
((EUID == 0)) || { echo "prepare: needs root (debootstrap, chroot)" >&2; exit 1; }

# Two runs on one machine may prepare the same kept chroot at once: the
# second waits for the first and then finds it finished. The /proc that apt's
# scripts need is mounted in a mount namespace of this script's own, so
# nothing stays mounted however it ends.
if [[ ${OUTBOX_CHROOT_NAMESPACE:-} != "prepare:$DIR" ]]; then
  mkdir -p "$(dirname "$DIR")"
  exec 9>"$DIR.lock"
  flock 9
  exec unshare --mount --propagation private \
    env OUTBOX_CHROOT_NAMESPACE="prepare:$DIR" bash "${BASH_SOURCE[0]}" "$@"
fi
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "${PACKAGES[*]}" ]]; then
  echo "prepare: $DIR already holds $SUITE with PostgreSQL $MAJOR (made by another run meanwhile)"
  exit 0
fi
if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
fi

# sid's Release file may be older than its Valid-Until on a mirror snapshot.
APT_OPTS=(-o Acquire::Check-Valid-Until=false -o APT::Install-Recommends=false -q -y)

# A debootstrap that did not finish (killed, out of disk) leaves a tree apt
# cannot be trusted in: it starts again from nothing.
BOOTSTRAPPED="$DIR/.outbox-debootstrap-$SUITE"
if [[ ! -f "$BOOTSTRAPPED" ]]; then
  if [[ -d "$DIR" ]]; then rm -rf --one-file-system "$DIR"; fi
  mkdir -p "$DIR"
  echo "prepare: debootstrap $SUITE from $MIRROR into $DIR"
  debootstrap --variant=minbase --no-check-gpg "$SUITE" "$DIR" "$MIRROR" >"$DIR.debootstrap.log" 2>&1 ||
    { tail -n 40 "$DIR.debootstrap.log" >&2; exit 1; }
  rm -f "$DIR.debootstrap.log"
  touch "$BOOTSTRAPPED"
fi

echo "prepare: installing ${#PACKAGES[@]} packages into the $SUITE chroot"
# No service may start inside the chroot (the host owns init); policy-rc.d 101
# makes invoke-rc.d skip every start.
printf '#!/bin/sh\nexit 101\n' >"$DIR/usr/sbin/policy-rc.d"
chmod 755 "$DIR/usr/sbin/policy-rc.d"
mkdir -p "$DIR/proc"
mount -t proc proc "$DIR/proc"
chroot "$DIR" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get "${APT_OPTS[@]}" update >/dev/null
chroot "$DIR" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get "${APT_OPTS[@]}" install "${PACKAGES[@]}" \
  >"$DIR/tmp/apt-install.log" 2>&1 || { tail -n 40 "$DIR/tmp/apt-install.log" >&2; exit 1; }
chroot "$DIR" apt-get clean
test -x "$DIR/usr/lib/postgresql/$MAJOR/bin/pg_config" ||
  { echo "prepare: PostgreSQL $MAJOR is not in the $SUITE chroot" >&2; exit 1; }
echo "prepare: $SUITE chroot ready: PostgreSQL $("$DIR/usr/lib/postgresql/$MAJOR/bin/pg_config" --version 2>/dev/null || echo "$MAJOR")," \
  "librdkafka $(chroot "$DIR" dpkg-query -W -f='${Version}' librdkafka-dev)," \
  "hiredis $(chroot "$DIR" dpkg-query -W -f='${Version}' libhiredis-dev)," \
  "librabbitmq $(chroot "$DIR" dpkg-query -W -f='${Version}' librabbitmq-dev)," \
  "libnats $(chroot "$DIR" dpkg-query -W -f='${Version}' libnats-dev)," \
  "libmosquitto $(chroot "$DIR" dpkg-query -W -f='${Version}' libmosquitto-dev)," \
  "libcurl $(chroot "$DIR" dpkg-query -W -f='${Version}' libcurl4-openssl-dev)"
printf '%s' "${PACKAGES[*]}" >"$STAMP"
