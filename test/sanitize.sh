#!/usr/bin/env bash
# Runs the PostgreSQL-free unit tests and the test Kafka broker under
# AddressSanitizer (leaks included) and UndefinedBehaviorSanitizer, outside the
# checkout so the normal build/ and test/kafka binaries are left alone.
#
#   bash test/sanitize.sh [BUILD_DIR]      # default BUILD_DIR: /tmp/outbox-sanitize
#
# 1. cmake -DOUTBOX_SANITIZE=ON in BUILD_DIR/cmake, build the unit tests, run
#    ctest the way test/run_all.sh does (the Redis tests start their own
#    redis-server);
# 2. copy test/kafka and test/lib to BUILD_DIR/broker (test/kafka/Makefile
#    only builds in its own directory), build kafka_broker and kafka_consume
#    with SANITIZE=1 and run their self-test (test/kafka/selftest.pl: start,
#    faults, produce with kcat, consume) against the sanitized binaries;
# 3. run a server with two publishers under valgrind over a short load
#    (test/valgrind_publisher.sh; needs the extension installed).
#
# OUTBOX_SANITIZE_STEPS names the steps to run (default "unit broker
# valgrind"): test/run_all.sh runs the unit step as its unit suite, so the
# unit tests are built and run once, sanitized, and the rest as its
# sanitizers suite.
#
# Every sanitizer report is written to BUILD_DIR/reports/ (log_path), so one
# from a process whose stderr nobody reads (the broker's goes to a log file)
# still counts. Exits non-zero when a step fails or any report exists, and
# prints the reports. Set OUTBOX_SKIP_DEPS=1 to skip test/install_deps.sh.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-/tmp/outbox-sanitize}
REPORTS=$BUILD_DIR/reports

# As test/run_all.sh: stable messages whatever the caller's locale.
export LC_ALL=C.UTF-8 LANG=C.UTF-8

if [[ "${OUTBOX_SKIP_DEPS:-0}" != 1 ]]; then
  bash "$REPO/test/install_deps.sh"
fi
# shellcheck source=lib/pg_major.sh
source "$REPO/test/lib/pg_major.sh"
outbox_use_postgres

rm -rf "$REPORTS"
mkdir -p "$REPORTS"
# halt_on_error: GCC builds UBSan checks recoverable, and a report that lets the
# test go on passing would be missed.
export ASAN_OPTIONS="detect_leaks=1:log_path=$REPORTS/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$REPORTS/ubsan"

START=$SECONDS
status=0
step() { printf '\n===== %s =====\n' "$*"; }
STEPS=" ${OUTBOX_SANITIZE_STEPS:-unit broker valgrind} "
for step_name in $STEPS; do
  case $step_name in unit | broker | valgrind) ;; *)
    echo "sanitize: unknown step '$step_name' in OUTBOX_SANITIZE_STEPS (unit, broker, valgrind)" >&2
    exit 2
    ;;
  esac
done
wanted_step() { [[ $STEPS == *" $1 "* ]]; }

# --- 1. unit tests ------------------------------------------------------------------
if wanted_step unit; then
step "unit tests with ASan + UBSan (ctest)"
CMAKE_DIR=$BUILD_DIR/cmake
# A cache from another checkout makes cmake refuse to configure.
if [[ -f "$CMAKE_DIR/CMakeCache.txt" ]] &&
  ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$REPO" "$CMAKE_DIR/CMakeCache.txt"; then
  rm -rf "$CMAKE_DIR"
fi
# Only the unit tests: the PostgreSQL module is not built with the sanitizers.
# Unoptimised (Debug: -g): the sanitizers find as much, and GCC compiles the
# instrumented tests several times faster than at RelWithDebInfo's -O2 (a
# GoogleTest file took 61 s there, 10 s here); the tests mostly wait on
# brokers and servers, so they run about as fast.
if cmake -S "$REPO" -B "$CMAKE_DIR" -DOUTBOX_SANITIZE=ON -DOUTBOX_WERROR=ON \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="" >"$BUILD_DIR/cmake-configure.log" 2>&1 &&
  cmake --build "$CMAKE_DIR" --target outbox_unit_tests -j2; then
  if ! timeout -k 30 1500 ctest --test-dir "$CMAKE_DIR" --output-on-failure --no-tests=error -j2; then
    echo "sanitize: unit tests failed" >&2
    status=1
  fi
else
  cat "$BUILD_DIR/cmake-configure.log" >&2
  echo "sanitize: building the unit tests failed" >&2
  status=1
fi
fi # unit

# --- 2. test Kafka broker -------------------------------------------------------------
if wanted_step broker; then
step "test Kafka broker with ASan + UBSan (selftest.pl)"
BROKER_DIR=$BUILD_DIR/broker
rm -rf "$BROKER_DIR"
mkdir -p "$BROKER_DIR/kafka" "$BROKER_DIR/lib" "$BROKER_DIR/logs"
cp "$REPO"/test/kafka/Makefile "$REPO"/test/kafka/*.cpp "$REPO"/test/kafka/selftest.pl \
  "$BROKER_DIR/kafka/"
cp "$REPO"/test/lib/*.pm "$BROKER_DIR/lib/"
# OUTBOX_KAFKA_LOG_DIR: keep the brokers' own logs to look at after a failure.
if make -C "$BROKER_DIR/kafka" SANITIZE=1; then
  if ! (cd "$BROKER_DIR" && timeout -k 30 600 env OUTBOX_KAFKA_LOG_DIR="$BROKER_DIR/logs" \
    PERL5LIB="$BROKER_DIR/lib${PERL5LIB:+:$PERL5LIB}" prove --timer kafka/selftest.pl); then
    echo "sanitize: broker self-test failed (broker logs in $BROKER_DIR/logs)" >&2
    status=1
  fi
else
  echo "sanitize: building the sanitized broker failed" >&2
  status=1
fi
fi # broker

# --- 3. a publisher under valgrind ------------------------------------------------------
# The PostgreSQL module is not built with the sanitizers (the server is not);
# memcheck watches it in a running server instead.
if wanted_step valgrind; then
step "a publisher under valgrind (test/valgrind_publisher.sh)"
if ! timeout -k 30 900 bash "$REPO/test/valgrind_publisher.sh" "$BUILD_DIR/valgrind"; then
  echo "sanitize: the valgrind run of a publisher failed" >&2
  status=1
fi
fi # valgrind

# --- reports ----------------------------------------------------------------------------
step "sanitizer reports"
shopt -s nullglob
reports=("$REPORTS"/*)
shopt -u nullglob
if ((${#reports[@]} > 0)); then
  for r in "${reports[@]}"; do
    echo "----- $r -----"
    head -n 60 "$r"
  done
  echo "sanitize: ${#reports[@]} sanitizer report(s) in $REPORTS" >&2
  status=1
else
  echo "none"
fi
echo "sanitize: $( ((status == 0)) && echo PASS || echo FAIL) in $((SECONDS - START)) s"
exit "$status"
