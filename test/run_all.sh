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

SUITES=(format unit regression isolation TAP TAP_repeatable_read TAP_serializable sanitizers fuzz)
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
banner "Fault injection build (CMake, OUTBOX_FAULT_INJECTION=ON; test/t/09x load it)"
# The release module (installed above) has no fault injection points; the TAP
# tests that inject faults load this build from a private directory through
# dynamic_library_path (OutboxNode's fault_injection option).
FI_OK=0
if [[ -f build-fi/CMakeCache.txt ]] &&
  ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$REPO" build-fi/CMakeCache.txt; then
  rm -rf build-fi
fi
if ((PGXS_OK)) &&
  timeout -k 30 1200 cmake -S . -B build-fi -DOUTBOX_WERROR=ON -DOUTBOX_FAULT_INJECTION=ON \
    -DPG_CONFIG="$PG_CONFIG" >/dev/null &&
  timeout -k 30 1200 cmake --build build-fi -j2 --target outbox; then
  FI_OK=1
else
  echo "the fault injection build failed: the fault injection TAP tests cannot run" >&2
fi

# run_tap SUITE DIR [VAR=value ...] -- TEST...: prove the TAP tests as the
# server's OS user, their data and logs under DIR (private to this run), the
# fault injection build beside them; records SUITE.
run_tap() {
  local suite=$1 dir=$2
  shift 2
  local -a envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local -a tests=("$@")
  rm -rf "$dir"
  mkdir -p "$dir"
  # PostgreSQL::Test::Utils writes logs and data directories under
  # $TESTDIR/tmp_check, and the tests call initdb, so everything runs as the
  # server's OS user, and a copy of the tests, readable by it, runs.
  cp -r "$REPO/test/t" "$REPO/test/lib" "$REPO/test/kafka" "$REPO/docs" "$dir/"
  if ((FI_OK)); then
    mkdir -p "$dir/fi-lib"
    cp build-fi/outbox.so "$dir/fi-lib/"
    envs+=("OUTBOX_FI_LIBDIR=$dir/fi-lib")
  fi
  chmod -R a+rX "$dir"
  ((EUID == 0)) && chown -R "$CLUSTER_OS_USER:" "$dir"
  local -a as_user=()
  ((EUID == 0)) && as_user=(runuser -u "$CLUSTER_OS_USER" --)
  # The environment PGXS's prove_installcheck sets, plus PERL5LIB for the
  # PostgreSQL::Test modules (Debian installs them under pgxs, off Perl's path).
  if (cd "$dir" && timeout -k 30 1800 "${as_user[@]}" \
    env -u PGHOST -u PGPORT -u PGUSER -u OUTBOX_TEST_ISOLATION \
    PATH="$PATH" HOME="$dir" LC_ALL=C.UTF-8 LANG=C.UTF-8 \
    PERL5LIB="$PGXS_TOP/src/test/perl:$dir/lib${PERL5LIB:+:$PERL5LIB}" \
    TESTDIR="$dir" PG_REGRESS="$PG_REGRESS_BIN" OUTBOX_REPO="$REPO" "${envs[@]}" \
    prove --timer "${tests[@]}"); then
    if ((FI_OK)); then
      record "$suite" pass "${#tests[@]} files"
    else
      record "$suite" fail "the fault injection build failed: its tests were skipped"
    fi
    # The fault suites' figures (docs/reliability.md shows a run of them),
    # from the run at the default isolation level.
    if [[ $suite == TAP && -f "$dir/tmp_check/reliability.tsv" ]]; then
      cat "$dir/tmp_check/reliability.tsv" >>"$REPO/test/results/reliability.tsv.parts"
    fi
    rm -rf "$dir"
  else
    # Each test's full log (server start-up, queries, failures) is in
    # tmp_check/log/regress_log_<test>; show the end of the failing ones.
    for log in "$dir"/tmp_check/log/regress_log_*; do
      [[ -f "$log" ]] || continue
      if grep -qE '^(not ok|Bail out!)|# Looks like|died|BAIL' "$log"; then
        echo "----- last 80 lines of $log -----"
        tail -n 80 "$log"
      fi
    done
    record "$suite" fail "logs in $dir/tmp_check/log"
  fi
}

# The publisher's suites, run again at the other isolation levels a server
# may default to (issue 13: the publisher must not depend on the default).
ISOLATION_TAP_TESTS=(t/020_*.pl t/021_*.pl t/023_*.pl t/025_*.pl t/026_*.pl t/027_*.pl
  t/030_*.pl t/032_*.pl t/040_*.pl t/042_*.pl t/043_*.pl t/090_*.pl)

if ((PGXS_OK)); then
  rm -f test/results/reliability.tsv.parts
  shopt -s nullglob
  TAP_TESTS=(test/t/*.pl)
  shopt -u nullglob
  if ((${#TAP_TESTS[@]} == 0)); then
    record TAP fail "no test/t/*.pl"
  else
    banner "TAP tests (prove test/t/*.pl)"
    # The globs are expanded where the tests are (test/), as prove sees them.
    mapfile -t tests < <(cd test && compgen -G 't/*.pl' | LC_ALL=C sort)
    run_tap TAP "$REPO/test/results/tap" -- "${tests[@]}" kafka/selftest.pl
    for level in "repeatable read" "serializable"; do
      suite="TAP_${level// /_}"
      banner "TAP publisher suites at default_transaction_isolation = '$level'"
      mapfile -t tests < <(cd test && for g in "${ISOLATION_TAP_TESTS[@]}"; do compgen -G "$g"; done)
      run_tap "$suite" "$REPO/test/results/tap-${level// /-}" "OUTBOX_TEST_ISOLATION=$level" -- "${tests[@]}"
    done
  fi
  if [[ -f test/results/reliability.tsv.parts ]]; then
    # One header, then every row.
    awk 'NR == 1 || $1 != "sink"' test/results/reliability.tsv.parts >test/results/reliability.tsv
    rm -f test/results/reliability.tsv.parts
    bash test/reliability_report.sh test/results/reliability.tsv || true
  fi
else
  record TAP fail "PGXS build failed"
  for level in repeatable_read serializable; do record "TAP_$level" fail "PGXS build failed"; done
fi

# ---------------------------------------------------------------------------
banner "Unit tests and test broker under ASan + UBSan, a publisher under valgrind (test/sanitize.sh)"
# Private directories (two runs on one machine must not share them); kept
# when the suite fails, for its reports and crash inputs.
SANITIZE_DIR=$(mktemp -d /tmp/outbox-sanitize.XXXXXX)
chmod 755 "$SANITIZE_DIR"  # the publisher under valgrind runs as the server's OS user
if timeout -k 30 1200 env OUTBOX_SKIP_DEPS=1 bash test/sanitize.sh "$SANITIZE_DIR"; then
  record sanitizers pass
  rm -rf "$SANITIZE_DIR"
else
  record sanitizers fail "reports above and in $SANITIZE_DIR/reports"
fi

# ---------------------------------------------------------------------------
banner "Fuzzing the parsers and validators (test/fuzz/run.sh, ${FUZZ_SECONDS:-30} s per target)"
FUZZ_DIR=$(mktemp -d /tmp/outbox-fuzz.XXXXXX)
if timeout -k 30 900 bash test/fuzz/run.sh "$FUZZ_DIR"; then
  record fuzz pass
  rm -rf "$FUZZ_DIR"
else
  record fuzz fail "crash inputs named above"
fi

summary_and_exit
