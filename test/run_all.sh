#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every suite.
#
#   bash test/run_all.sh
#
# Suites (each counted once in the closing "N passed, N failed" line, which CI
# reads): format, unit (GoogleTest via ctest), regression (pg_regress),
# isolation (pg_isolation_regress), TAP (prove with PostgreSQL::Test::Cluster),
# sanitizers (unit tests and the test broker under ASan + UBSan, a publisher
# under valgrind; test/sanitize.sh), fuzz (libFuzzer on the PostgreSQL-free parsers and
# validators for a bounded time, test/fuzz/run.sh).
# A failing suite does not stop the others; a suite whose build failed counts
# as failed. Exit status is non-zero when anything failed.
#
# Needs root on a fresh machine (apt-get, make install). The PostgreSQL servers
# run as the `postgres` OS user because initdb refuses to run as root.
#
# Environment knobs (all optional):
#   OUTBOX_SKIP_DEPS=1     do not run test/install_deps.sh
#   OUTBOX_KEEP_CLUSTER=1  leave the regression cluster's directory behind
set -uo pipefail # no -e: a failing suite must not stop the next one

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1

export PG_BINDIR=/usr/lib/postgresql/15/bin
export PG_CONFIG=$PG_BINDIR/pg_config
export PATH="$PG_BINDIR:$PATH"
# Stable messages and sort order whatever the caller's locale is; UTF-8 so
# non-ASCII payloads survive psql and the TAP clusters' initdb picks UTF8
# (C.UTF-8 is built into Debian's libc, no locales package needed).
export LC_ALL=C.UTF-8 LANG=C.UTF-8
unset PGDATABASE PGSERVICE PGOPTIONS PGPASSWORD

# shellcheck source-path=SCRIPTDIR source=lib/cluster.sh
source "$REPO/test/lib/cluster.sh"

SUITES=(format unit regression isolation TAP sanitizers fuzz)
declare -A RESULT=() NOTE=()
RUN_START=$SECONDS

banner() { printf '\n===== %s =====\n' "$*"; }

# record SUITE pass|fail [note]
record() {
  RESULT[$1]=$2
  NOTE[$1]=${3:-}
  printf '>>> %s: %s%s\n' "$1" "${2^^}" "${3:+ ($3)}"
}

summary_and_exit() {
  local passed=0 failed=0 s
  banner "Summary ($((SECONDS - RUN_START)) s)"
  for s in "${SUITES[@]}"; do
    local r=${RESULT[$s]:-fail} n=${NOTE[$s]:-}
    [[ -n "${RESULT[$s]:-}" ]] || n="not run"
    printf '  %-11s %s%s\n' "$s" "${r^^}" "${n:+  ($n)}"
    if [[ $r == pass ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  done
  echo
  echo "$passed passed, $failed failed"
  ((failed == 0))
  exit $?
}

# Print the first lines of a pg_regress diff file, if there is one.
show_diffs() {
  local f=$1
  [[ -s "$f" ]] || return 0
  echo "----- $f (first 300 lines) -----"
  head -n 300 "$f"
  echo "----- end of $f -----"
}

# The regression/isolation cluster is stopped however we leave (error, ^C,
# CI timeout signal); it is kept on disk only when asked to.
CLUSTER_DIR=""
cleanup() {
  if [[ -n "$CLUSTER_DIR" ]]; then
    stop_cluster "$CLUSTER_DIR"
    if [[ "${OUTBOX_KEEP_CLUSTER:-0}" == 1 ]]; then
      echo "kept cluster directory $CLUSTER_DIR"
    else
      rm -rf "$CLUSTER_DIR"
    fi
    CLUSTER_DIR=""
  fi
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM HUP

# Results of an earlier run would be mistaken for this run's.
rm -rf test/results

# ---------------------------------------------------------------------------
banner "Dependencies"
if [[ "${OUTBOX_SKIP_DEPS:-0}" != 1 ]]; then
  if ! timeout -k 30 1800 bash "$REPO/test/install_deps.sh"; then
    echo "installing dependencies failed: nothing can be built or tested" >&2
    summary_and_exit
  fi
fi
PGXS_TOP=$(cd "$(dirname "$("$PG_CONFIG" --pgxs)")/../.." && pwd) # .../lib/pgxs
PG_REGRESS_BIN=$PGXS_TOP/src/test/regress/pg_regress
echo "pg_config: $PG_CONFIG ($("$PG_CONFIG" --version))"

# ---------------------------------------------------------------------------
banner "Format check (clang-format --dry-run --Werror)"
CLANG_FORMAT=$(command -v clang-format || command -v clang-format-14 || true)
shopt -s nullglob
FORMAT_FILES=(src/*.cpp src/*.hpp test/unit/*.cpp)
shopt -u nullglob
if [[ -z "$CLANG_FORMAT" ]]; then
  record format fail "clang-format not found"
elif ((${#FORMAT_FILES[@]} == 0)); then
  record format fail "no source files found"
elif FORMAT_OUT=$("$CLANG_FORMAT" --dry-run --Werror "${FORMAT_FILES[@]}" 2>&1); then
  record format pass "${#FORMAT_FILES[@]} files"
else
  # One error per offending line: show enough to see which files, not thousands.
  printf '%s\n' "$FORMAT_OUT" | grep -F 'error:' | head -n 40
  echo "($(printf '%s\n' "$FORMAT_OUT" | grep -cF 'error:') lines need reformatting in:" \
    "$(printf '%s\n' "$FORMAT_OUT" | grep -oE '^[^: ]+:[0-9]+:[0-9]+: error' | cut -d: -f1 | sort -u | tr '\n' ' '))"
  echo "fix with: $CLANG_FORMAT -i src/*.cpp src/*.hpp test/unit/*.cpp"
  record format fail "files need clang-format"
fi

# ---------------------------------------------------------------------------
banner "PGXS build and install (make WERROR=1 && make install)"
# The Makefile tracks header dependencies (.deps/), so a re-run after editing
# a header rebuilds what includes it instead of linking stale objects.
PGXS_OK=0
# The test Kafka broker and consumer (test/kafka) are built here, as root:
# the TAP tests run as the server's OS user, who cannot write the checkout.
if timeout -k 30 1200 make -j2 WERROR=1 PG_CONFIG="$PG_CONFIG" &&
  timeout -k 30 300 make install PG_CONFIG="$PG_CONFIG" &&
  timeout -k 30 300 make -C test/kafka; then
  PGXS_OK=1
  echo "installed into $("$PG_CONFIG" --pkglibdir) and $("$PG_CONFIG" --sharedir)/extension"
else
  echo "PGXS build or install failed: regression, isolation and TAP suites cannot run" >&2
fi

# ---------------------------------------------------------------------------
banner "CMake build and unit tests (ctest)"
# A build/ configured for another checkout (copied or moved tree) makes cmake
# refuse to run: start that one afresh.
if [[ -f build/CMakeCache.txt ]] &&
  ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$REPO" build/CMakeCache.txt; then
  echo "build/ was configured for another source tree: removing it"
  rm -rf build
fi
if timeout -k 30 1200 cmake -S . -B build -DOUTBOX_WERROR=ON -DPG_CONFIG="$PG_CONFIG" &&
  timeout -k 30 1200 cmake --build build -j2; then
  # --no-tests=error: a build that registered no test must not look green.
  if timeout -k 30 900 ctest --test-dir build --output-on-failure --no-tests=error; then
    record unit pass
  else
    record unit fail "ctest failures"
  fi
else
  record unit fail "CMake build failed"
fi

# ---------------------------------------------------------------------------
banner "Regression and isolation suites (make installcheck)"
if ((PGXS_OK)); then
  reap_stale_clusters
  mkdir -p test/results/isolation
  # Settings the SQL suites need beyond the defaults may live in test/regress.conf.
  EXTRA_CONF=()
  if [[ -f test/regress.conf ]]; then mapfile -t EXTRA_CONF <test/regress.conf; fi
  if ! { CLUSTER_DIR=$(make_cluster_dir) && PORT=$(pick_free_port 54329) &&
    start_cluster "$CLUSTER_DIR" "$PORT" "${EXTRA_CONF[@]}"; }; then
    print_server_log_tail "$CLUSTER_DIR"
    record regression fail "could not start PostgreSQL"
    record isolation fail "could not start PostgreSQL"
  else
    export PGHOST=$CLUSTER_DIR PGPORT=$PORT PGUSER=postgres
    # One target per suite (the other's list emptied on the command line), so a
    # regression failure still lets the isolation suite run and be counted.
    if timeout -k 30 900 make installcheck PG_CONFIG="$PG_CONFIG" ISOLATION=; then
      record regression pass
    else
      show_diffs test/results/regression.diffs
      print_server_log_tail "$CLUSTER_DIR"
      record regression fail "see test/results/regression.diffs"
    fi
    if timeout -k 30 900 make installcheck PG_CONFIG="$PG_CONFIG" REGRESS=; then
      record isolation pass
    else
      show_diffs test/results/isolation/regression.diffs
      print_server_log_tail "$CLUSTER_DIR"
      record isolation fail "see test/results/isolation/regression.diffs"
    fi
    unset PGHOST PGPORT PGUSER
  fi
  cleanup
else
  record regression fail "PGXS build failed"
  record isolation fail "PGXS build failed"
fi

# ---------------------------------------------------------------------------
banner "TAP tests (prove test/t/*.pl)"
if ((PGXS_OK)); then
  shopt -s nullglob
  TAP_TESTS=(test/t/*.pl)
  shopt -u nullglob
  # PostgreSQL::Test::Utils writes logs and data directories under
  # $TESTDIR/tmp_check, and the tests call initdb, so everything runs as the
  # server's OS user and TESTDIR must be writable by it.
  TAP_DIR=$REPO/test/results/tap
  rm -rf "$TAP_DIR"
  mkdir -p "$TAP_DIR"
  ((EUID == 0)) && chown "$CLUSTER_OS_USER:" "$TAP_DIR"
  TAP_SRC=$REPO/test
  if ! as_server_user test -w "$TAP_DIR" -a -r "$REPO/test/t" -a -x "$REPO/test/t"; then
    # The checkout is not readable by that user (e.g. under /root): run a copy.
    TAP_DIR=$(mktemp -d "${CLUSTER_TMP_BASE}/outbox-tap.XXXXXX")
    cp -r "$REPO/test/t" "$REPO/test/lib" "$REPO/test/kafka" "$TAP_DIR/"
    chmod -R a+rX "$TAP_DIR"
    ((EUID == 0)) && chown -R "$CLUSTER_OS_USER:" "$TAP_DIR"
    TAP_SRC=$TAP_DIR
    echo "checkout not readable by $CLUSTER_OS_USER: running a copy in $TAP_DIR"
  fi
  AS_SERVER_USER=()
  ((EUID == 0)) && AS_SERVER_USER=(runuser -u "$CLUSTER_OS_USER" --)
  if ((${#TAP_TESTS[@]} == 0)); then
    record TAP fail "no test/t/*.pl"
  # The environment PGXS's prove_installcheck sets, plus PERL5LIB for the
  # PostgreSQL::Test modules (Debian installs them under pgxs, off Perl's path).
  elif (cd "$TAP_SRC" && timeout -k 30 1500 "${AS_SERVER_USER[@]}" \
    env -u PGHOST -u PGPORT -u PGUSER \
    PATH="$PATH" HOME="$TAP_DIR" LC_ALL=C.UTF-8 LANG=C.UTF-8 \
    PERL5LIB="$PGXS_TOP/src/test/perl:$TAP_SRC/lib${PERL5LIB:+:$PERL5LIB}" \
    TESTDIR="$TAP_DIR" PG_REGRESS="$PG_REGRESS_BIN" OUTBOX_REPO="$REPO" \
    prove --timer t/*.pl kafka/selftest.pl); then
    record TAP pass "${#TAP_TESTS[@]} files"
    # The fault suite's figures (docs/reliability.md shows a run of them).
    if [[ -f "$TAP_DIR/tmp_check/reliability.tsv" ]]; then
      cp "$TAP_DIR/tmp_check/reliability.tsv" "$REPO/test/results/reliability.tsv"
      bash test/reliability_report.sh "$REPO/test/results/reliability.tsv" || true
    fi
    [[ "$TAP_SRC" == "$TAP_DIR" ]] && rm -rf "$TAP_DIR" # the copy is not needed any more
  else
    # Each test's full log (server start-up, queries, failures) is in
    # tmp_check/log/regress_log_<test>; show the end of the failing ones.
    for log in "$TAP_DIR"/tmp_check/log/regress_log_*; do
      [[ -f "$log" ]] || continue
      if grep -qE '^(not ok|Bail out!)|# Looks like|died|BAIL' "$log"; then
        echo "----- last 80 lines of $log -----"
        tail -n 80 "$log"
      fi
    done
    record TAP fail "logs in $TAP_DIR/tmp_check/log"
  fi
else
  record TAP fail "PGXS build failed"
fi

# ---------------------------------------------------------------------------
banner "Unit tests and test broker under ASan + UBSan, a publisher under valgrind (test/sanitize.sh)"
if timeout -k 30 1200 env OUTBOX_SKIP_DEPS=1 bash test/sanitize.sh /tmp/outbox-ci-sanitize; then
  record sanitizers pass
else
  record sanitizers fail "reports above and in /tmp/outbox-ci-sanitize/reports"
fi

# ---------------------------------------------------------------------------
banner "Fuzzing the parsers and validators (test/fuzz/run.sh, ${FUZZ_SECONDS:-30} s per target)"
if timeout -k 30 900 bash test/fuzz/run.sh /tmp/outbox-ci-fuzz; then
  record fuzz pass
else
  record fuzz fail "crash inputs named above"
fi

summary_and_exit
