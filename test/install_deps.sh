#!/usr/bin/env bash
# Install what outbox needs to build and test, from Debian's packages.
#
# Idempotent: each package is checked with dpkg-query first, so on a machine
# that already has everything this script installs nothing and needs no
# network. `apt-get update` runs once, and only when something is missing.
# Must run as root (CI and developer machines are root).
set -euo pipefail

# build-essential/g++/cmake/make/pkg-config: the PGXS and CMake builds.
# postgresql-NN + -server-dev-NN: the server we test against and the PGXS
#   headers, pg_regress, pg_isolation_regress and the PostgreSQL::Test perl modules.
#   NN is the distribution's default major (15 on bookworm), or OUTBOX_PG_MAJOR.
# librdkafka-dev, libhiredis-dev: the Kafka and Redis sinks.
# librabbitmq-dev, libnats-dev, libmosquitto-dev, libcurl4-openssl-dev: the
#   AMQP, NATS, MQTT and HTTP sinks (CI builds every sink).
# rabbitmq-server, nats-server, mosquitto: the servers their tests start (on
#   private ports and directories; the packages' own services are not used).
# python3-pika, amqp-tools, python3-paho-mqtt, python3-aiohttp: reading back,
#   the webhook receiver and the relay benchmarks.
# python3-psycopg2, mosquitto-clients, wrk: the relay benchmarks' database
#   client, bench/sink_drain's counting MQTT subscriber (mosquitto_sub) and its
#   measure of the webhook receiver's own rate. (The NATS relay's npm `nats`
#   and `pg` packages are installed by the benchmark itself when it runs,
#   bench/install_node_tools.sh: no test needs them.)
# nodejs (and npm, Debian's package only when no npm command is there: a
#   NodeSource nodejs ships its own and conflicts with Debian's npm): the
#   HTTP sink's TAP tests verify signatures and CloudEvents with the npm
#   standardwebhooks and cloudevents packages, which
#   test/http/install_node_tools.sh installs, pinned, into test/http/node_tools
#   (run at the end of this script, also when every package was there).
# openssl: the AMQP sink's TLS unit test makes its own certificate authority.
# libssl-dev: libcrypto, whose HMAC-SHA256 signs the HTTP sink's webhooks.
# libipc-run-perl (+ libio-pty-perl, which it only recommends): required by
#   PostgreSQL::Test::Utils for the TAP tests; IO::Pty for interactive_psql.
# libjson-xs-perl: the TAP files decode what they read back from the brokers
#   with it (lib/OutboxJson.pm; JSON::PP, a hundred times slower, otherwise).
# redis-server, kcat: brokers/tools the integration tests and demo start.
# postgresql-NN-pgq3: for the comparison benchmark.
# googletest, libgtest-dev: the unit tests (CMake find_package(GTest)).
# clang-format: the style check. clang-tidy, python3: the tidy suite
#   (test/tidy.sh reads CMake's compile database with python3).
# procps: pgrep/pkill (run_all.sh's cleanup of the chroot runs).
# clang, libclang-rt-14-dev: libFuzzer and the sanitizer runtimes for
#   test/fuzz/run.sh (clang 14's libFuzzer ships in compiler-rt).
# debootstrap: the trixie and sid chroots that test PostgreSQL 17 and 18
#   (test/chroot/prepare.sh).
# debhelper, dpkg-dev, postgresql-server-dev-all: the Debian package
#   (debian/, built with pg_buildext by test/package.sh).
# valgrind: test/valgrind_publisher.sh (a publisher under memcheck).
# gdb: TAP 056 holds a publisher at a chosen instruction to make a race certain.
# iproute2: test/quickstart.sh brings up the loopback of its own network
#   namespace (ip link).
#
# `install_deps.sh demo` installs only what test/demo.sh needs: the build, the
# server, the Kafka and Redis client libraries, redis-server and procps (a
# minimal Debian has no pgrep).
# shellcheck source=lib/pg_major.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/pg_major.sh"
MAJOR=$(outbox_default_major)
if [[ -z $MAJOR && $EUID == 0 ]]; then
  # A fresh machine: apt's lists name the majors the distribution packages.
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  MAJOR=$(outbox_default_major)
fi
[[ -n $MAJOR ]] || { echo "install_deps: no postgresql-NN package known to apt" >&2; exit 1; }

if [[ ${1:-} == demo ]]; then
  PACKAGES=(
    build-essential g++ pkg-config make
    "postgresql-$MAJOR" "postgresql-server-dev-$MAJOR"
    librdkafka-dev libhiredis-dev redis-server procps
  )
else
  PACKAGES=(
    build-essential g++ cmake pkg-config make
    "postgresql-$MAJOR" "postgresql-server-dev-$MAJOR"
    librdkafka-dev libhiredis-dev libipc-run-perl libjson-xs-perl
    libio-pty-perl librabbitmq-dev libnats-dev libmosquitto-dev libcurl4-openssl-dev
    redis-server kcat "postgresql-$MAJOR-pgq3"
    rabbitmq-server nats-server mosquitto python3-pika amqp-tools python3-paho-mqtt
    python3-aiohttp python3-psycopg2 mosquitto-clients wrk openssl libssl-dev nodejs
    googletest libgtest-dev clang-format clang-tidy python3 procps
    clang libclang-rt-14-dev
    valgrind gdb iproute2
    debhelper dpkg-dev postgresql-server-dev-all debootstrap
  )
fi

is_installed() {
  # "install ok installed" is the only status that means the package is usable;
  # a removed-but-not-purged package reports "deinstall ok config-files".
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  is_installed "$pkg" || missing+=("$pkg")
done
if [[ ${1:-} != demo ]] && ! command -v npm >/dev/null && ! is_installed npm; then
  PACKAGES+=(npm)
  missing+=(npm)
fi

# The npm test tools (not for the demo); a no-op when the pinned versions are there.
node_tools() {
  if [[ ${1:-} != demo ]]; then
    bash "$(dirname "${BASH_SOURCE[0]}")/http/install_node_tools.sh"
  fi
}

if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#PACKAGES[@]} packages already installed"
  node_tools "${1:-}"
  exit 0
fi

if ((EUID != 0)); then
  echo "install_deps: missing packages (${missing[*]}) and not root; install them and re-run" >&2
  exit 1
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"

# Debian's postgresql-NN creates a "main" cluster on port 5432 and may start it,
# and redis-server's package may start a server on 6379. Our tests start their
# own servers on other ports and sockets and must not depend on these, so stop
# only the ones this run just installed (a machine's pre-existing services are
# left alone). Failures are ignored: without an init system nothing was started.
for pkg in "${missing[@]}"; do
  case "$pkg" in
    "postgresql-$MAJOR")
      if command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | grep -q "^$MAJOR main .* online"; then
        echo "install_deps: stopping Debian's auto-started $MAJOR/main cluster (tests use their own)"
        pg_ctlcluster "$MAJOR" main stop || true
      fi
      ;;
    redis-server)
      if pgrep -x redis-server >/dev/null; then
        echo "install_deps: stopping the redis-server service the package started"
        service redis-server stop >/dev/null 2>&1 || systemctl stop redis-server >/dev/null 2>&1 || true
      fi
      ;;
  esac
done

# Verify: a package that apt-get silently skipped would fail much later and
# more confusingly in the build.
still_missing=()
for pkg in "${PACKAGES[@]}"; do
  is_installed "$pkg" || still_missing+=("$pkg")
done
if ((${#still_missing[@]} > 0)); then
  echo "install_deps: still missing after apt-get install: ${still_missing[*]}" >&2
  exit 1
fi
node_tools "${1:-}"
echo "install_deps: done"
