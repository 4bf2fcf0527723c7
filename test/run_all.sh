#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every suite.
#
#   bash test/run_all.sh
#
# Suites (each counted once in the closing "N passed, N failed" line, which CI
# reads): format, unit (GoogleTest via ctest), regression (pg_regress),
# isolation (pg_isolation_regress), TAP (prove with PostgreSQL::Test::Cluster),
# tidy (clang-tidy's analyzer checks, test/tidy.sh),
# sanitizers (unit tests and the test broker under ASan + UBSan, a publisher
# under valgrind; test/sanitize.sh), fuzz (libFuzzer on the PostgreSQL-free parsers and
# validators for a bounded time, test/fuzz/run.sh), package (the Debian
# package built, installed and delivering; test/package.sh), and pg17, pg18: the
# builds, regression, isolation and the publisher's TAP suites again
# against PostgreSQL 17 and 18 inside Debian chroots (test/chroot/), with the
# server's default_transaction_isolation at REPEATABLE READ and SERIALIZABLE.
# A failing suite does not stop the others; a suite whose build failed counts
# as failed. Exit status is non-zero when anything failed.
#
# Needs root on a fresh machine (apt-get, make install). The PostgreSQL servers
# run as the `postgres` OS user because initdb refuses to run as root.
#
# Environment knobs (all optional):
#   OUTBOX_SKIP_DEPS=1     do not run test/install_deps.sh
#   OUTBOX_SUITES="..."    run only these suites (names as above; also
#                          TAP_publisher: the publisher's TAP files and the
#                          fault suites, what the chroots run)
#   OUTBOX_TAP_ISOLATION=  default_transaction_isolation for TAP_publisher
#   OUTBOX_TAP_FILES="t/040_*.pl ..."  only these TAP files (globs under test/)
#   OUTBOX_PG_MAJOR=NN     test against /usr/lib/postgresql/NN (lib/pg_major.sh)
#   OUTBOX_CHROOT_CACHE=d  keep the chroots in d/<suite> and reuse them
set -uo pipefail # no -e: a failing suite must not stop the next one

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1

# Stable messages and sort order whatever the caller's locale is; UTF-8 so
# non-ASCII payloads survive psql and the TAP clusters' initdb picks UTF8
# (C.UTF-8 is built into Debian's libc, no locales package needed).
export LC_ALL=C.UTF-8 LANG=C.UTF-8
unset PGDATABASE PGSERVICE PGOPTIONS PGPASSWORD

# shellcheck source-path=SCRIPTDIR source=lib/pg_major.sh
source "$REPO/test/lib/pg_major.sh"

# The other majors: Debian suite, major, and the default isolation level their
# publisher suites run at (the host runs them at READ COMMITTED).
CHROOTS=("trixie 17 repeatable read" "sid 18 serializable")
SUITES=(format unit regression isolation tidy TAP sanitizers fuzz package pg17 pg18)
if [[ -n ${OUTBOX_SUITES:-} ]]; then read -r -a SUITES <<<"$OUTBOX_SUITES"; fi
wanted() { [[ " ${SUITES[*]} " == *" $1 "* ]]; }
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

# The chroots of this run go with it (a cache named by OUTBOX_CHROOT_CACHE
# stays). Nothing may still be mounted inside when they are removed: /proc or
# /dev/pts under a directory that rm walks would be fatal, so whatever
# findmnt still lists there is unmounted first, and rm stays on one file system.
CHROOT_BASE=""
declare -A PREPARE_PID=()
remove_chroots() {
  local major pid target
  [[ -n $CHROOT_BASE && -d $CHROOT_BASE ]] || return 0
  # Only a preparation still going, still this shell's child: a finished
  # one's PID may be another process's by now.
  for major in "${!PREPARE_PID[@]}"; do
    pid=${PREPARE_PID[$major]}
    if kill -0 "$pid" 2>/dev/null &&
      [[ "$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')" == "$$" ]]; then
      kill "$pid" 2>/dev/null || true
    fi
  done
  pkill -f "chroot/(prepare|run)\.sh .*$CHROOT_BASE/" 2>/dev/null || true
  while read -r target; do
    umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || true
  done < <(findmnt -rn -o TARGET | grep -F "$CHROOT_BASE/" | sort -r)
  if [[ -z ${OUTBOX_CHROOT_CACHE:-} ]]; then
    if findmnt -rn -o TARGET | grep -qF "$CHROOT_BASE/"; then
      echo "not removing $CHROOT_BASE: something is still mounted inside" >&2
    else
      rm -rf --one-file-system "$CHROOT_BASE"
    fi
  fi
  CHROOT_BASE=""
}
trap remove_chroots EXIT
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
if ! outbox_use_postgres; then
  summary_and_exit
fi
# shellcheck source-path=SCRIPTDIR source=lib/cluster.sh
source "$REPO/test/lib/cluster.sh"
PGXS_TOP=$(cd "$(dirname "$("$PG_CONFIG" --pgxs)")/../.." && pwd) # .../lib/pgxs
PG_REGRESS_BIN=$PGXS_TOP/src/test/regress/pg_regress
echo "pg_config: $PG_CONFIG ($("$PG_CONFIG" --version))"

# The chroots for the other majors are made in the background while the suites
# below run on this machine's PostgreSQL (debootstrap and apt mostly wait on
# the mirror and the disk): prepare.sh's output goes to DIR.log.
if wanted pg17 || wanted pg18; then
  if [[ -n ${OUTBOX_CHROOT_CACHE:-} ]]; then
    CHROOT_BASE=$OUTBOX_CHROOT_CACHE
    mkdir -p "$CHROOT_BASE"
  else
    CHROOT_BASE=$(mktemp -d /var/tmp/outbox-chroots.XXXXXX)
  fi
  for spec in "${CHROOTS[@]}"; do
    read -r suite major _ <<<"$spec"
    wanted "pg$major" || continue
    rm -f "$CHROOT_BASE/$suite.rc"
    (
      status=0
      bash test/chroot/prepare.sh "$suite" "$major" "$CHROOT_BASE/$suite" || status=$?
      echo "$status" >"$CHROOT_BASE/$suite.rc"
    ) >"$CHROOT_BASE/$suite.log" 2>&1 &
    PREPARE_PID[$major]=$!
  done
fi

# ---------------------------------------------------------------------------
wanted format && banner "Format check (clang-format --dry-run --Werror)"
CLANG_FORMAT=$(command -v clang-format || command -v clang-format-14 || true)
shopt -s nullglob
FORMAT_FILES=(src/*.cpp src/*.hpp src/*/*.cpp src/*/*.hpp test/unit/*.cpp)
shopt -u nullglob
if ! wanted format; then
  :
elif [[ -z "$CLANG_FORMAT" ]]; then
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
  echo "fix with: $CLANG_FORMAT -i src/*.cpp src/*.hpp src/*/*.cpp src/*/*.hpp test/unit/*.cpp"
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
if wanted unit; then
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
fi # wanted unit

# ---------------------------------------------------------------------------
if wanted regression || wanted isolation; then
banner "Regression and isolation suites (make installcheck)"
if ((PGXS_OK)); then
  mkdir -p test/results/isolation
  # make installcheck starts a throwaway server of its own for each suite
  # (test/lib/private_server.sh), as it does for anyone who runs it. One
  # target per suite (the other's list emptied on the command line), so a
  # regression failure still lets the isolation suite run and be counted.
  if ! wanted regression; then
    :
  elif timeout -k 30 900 make installcheck PG_CONFIG="$PG_CONFIG" ISOLATION=; then
    record regression pass
  else
    show_diffs test/results/regression.diffs
    record regression fail "see test/results/regression.diffs"
  fi
  if ! wanted isolation; then
    :
  elif timeout -k 30 900 make installcheck PG_CONFIG="$PG_CONFIG" REGRESS=; then
    record isolation pass
  else
    show_diffs test/results/isolation/regression.diffs
    record isolation fail "see test/results/isolation/regression.diffs"
  fi
else
  record regression fail "PGXS build failed"
  record isolation fail "PGXS build failed"
fi
fi # wanted regression or isolation

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
if ((PGXS_OK)) && { wanted TAP || wanted TAP_publisher; } &&
  timeout -k 30 1200 cmake -S . -B build-fi -DOUTBOX_WERROR=ON -DOUTBOX_FAULT_INJECTION=ON \
    -DPG_CONFIG="$PG_CONFIG" >/dev/null &&
  timeout -k 30 1200 cmake --build build-fi -j2 --target outbox; then
  FI_OK=1
elif wanted TAP || wanted TAP_publisher; then
  echo "the fault injection build failed: the fault injection TAP tests cannot run" >&2
fi

# ---------------------------------------------------------------------------
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
  # One test file at a time unless OUTBOX_TAP_JOBS says more (every file has
  # its own ports and data directories). Two at a time here and in both
  # chroots at once overloaded 2 cores: timeouts in the fault suites'
  # read-back and a missed intermediate state in 040.
  local jobs=${OUTBOX_TAP_JOBS:-1}
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
    TESTDIR="$dir" TESTDATADIR="$dir/tmp_check" TESTLOGDIR="$dir/tmp_check/log" \
    PG_REGRESS="$PG_REGRESS_BIN" OUTBOX_REPO="$REPO" "${envs[@]}" \
    prove --timer -j "$jobs" "${tests[@]}"); then
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

# ---------------------------------------------------------------------------
if wanted tidy; then
  banner "clang-tidy: the static analyzer's checks (.clang-tidy, test/tidy.sh)"
  # The compile database comes from the CMake configure (the unit suite's).
  if timeout -k 30 600 cmake -S . -B build -DOUTBOX_WERROR=ON -DPG_CONFIG="$PG_CONFIG" >/dev/null &&
    timeout -k 30 1200 bash test/tidy.sh build; then
    record tidy pass
  else
    record tidy fail "reports above"
  fi
fi

# ---------------------------------------------------------------------------
if wanted sanitizers; then
  banner "Unit tests and test broker under ASan + UBSan, a publisher under valgrind (test/sanitize.sh)"
  # Private directories (two runs on one machine must not share them); kept
  # when the suite fails, for its reports and crash inputs.
  SANITIZE_DIR=$(mktemp -d /tmp/outbox-sanitize.XXXXXX)
  chmod 755 "$SANITIZE_DIR" # the publisher under valgrind runs as the server's OS user
  if timeout -k 30 1800 env OUTBOX_SKIP_DEPS=1 bash test/sanitize.sh "$SANITIZE_DIR"; then
    record sanitizers pass
    rm -rf "$SANITIZE_DIR"
  else
    record sanitizers fail "reports above and in $SANITIZE_DIR/reports"
  fi
fi

# ---------------------------------------------------------------------------
# The other majors, each in its chroot (made in the background since the
# start), run from here on beside this machine's remaining suites, both at
# once. They start after the sanitizers, the most CPU-hungry suite here,
# which would otherwise take several times as long beside their builds; the
# TAP suites everywhere mostly wait on servers and brokers. Each picks its
# own free ports. Their output is shown at the end.
declare -A CHROOT_RUN=()
for spec in "${CHROOTS[@]}"; do
  read -r suite major level <<<"$spec"
  wanted "pg$major" || continue
  log=$CHROOT_BASE/pg$major.run.log
  (
    # The chroot was being made since the start (a child of the main shell,
    # so this subshell cannot wait for it: it watches for its status file).
    for ((waited = 0; waited < 1800; waited += 2)); do
      [[ -s "$CHROOT_BASE/$suite.rc" ]] && break
      sleep 2
    done
    cat "$CHROOT_BASE/$suite.log"
    if [[ "$(cat "$CHROOT_BASE/$suite.rc" 2>/dev/null)" != 0 ]]; then
      echo "making the $suite chroot failed"
      exit 2
    fi
    timeout -k 30 2400 bash test/chroot/run.sh "$CHROOT_BASE/$suite" "$major" "$level"
  ) >"$log" 2>&1 &
  CHROOT_RUN[$major]=$!
done

# ---------------------------------------------------------------------------
if wanted fuzz; then
  banner "Fuzzing the parsers and validators (test/fuzz/run.sh, ${FUZZ_SECONDS:-20} s per target)"
  FUZZ_DIR=$(mktemp -d /tmp/outbox-fuzz.XXXXXX)
  if timeout -k 30 900 env FUZZ_SECONDS="${FUZZ_SECONDS:-20}" bash test/fuzz/run.sh "$FUZZ_DIR"; then
    record fuzz pass
    rm -rf "$FUZZ_DIR"
  else
    record fuzz fail "crash inputs named above"
  fi
fi

# ---------------------------------------------------------------------------
if wanted package; then
  banner "The Debian package: build, install, deliver an event (test/package.sh)"
  PACKAGE_DIR=$(mktemp -d /tmp/outbox-package.XXXXXX)
  if ((PGXS_OK)) && timeout -k 30 900 bash test/package.sh "$PACKAGE_DIR"; then
    record package pass "postgresql-$PG_MAJOR-outbox"
    rm -rf "$PACKAGE_DIR"
  else
    record package fail "logs in $PACKAGE_DIR"
  fi
fi

# ---------------------------------------------------------------------------
# The TAP suites last on this machine: they wait on servers and brokers most
# of the time, as the other majors' suites do by then.
# The publisher's suites and the fault suites: what the chroots run against
# the other majors, at another default_transaction_isolation each (issue 13:
# the publisher must not depend on the server's default).
PUBLISHER_TAP_TESTS=(t/020_*.pl t/021_*.pl t/023_*.pl t/025_*.pl t/026_*.pl t/027_*.pl
  t/030_*.pl t/032_*.pl t/034_*.pl t/036_*.pl t/040_*.pl t/042_*.pl t/043_*.pl
  t/070_*.pl t/071_*.pl t/090_*.pl t/091_*.pl t/092_*.pl t/093_*.pl t/094_*.pl t/095_*.pl)

if ! { wanted TAP || wanted TAP_publisher; }; then
  :
elif ((PGXS_OK)); then
  rm -f test/results/reliability.tsv.parts
  if wanted TAP; then
    banner "TAP tests (prove test/t/*.pl)"
    # The globs are expanded where the tests are (test/), as prove sees them.
    mapfile -t tests < <(cd test && for g in ${OUTBOX_TAP_FILES:-t/*.pl}; do compgen -G "$g"; done | LC_ALL=C sort)
    if ((${#tests[@]} == 0)); then
      record TAP fail "no test/t/*.pl"
    else
      run_tap TAP "$REPO/test/results/tap" -- "${tests[@]}" kafka/selftest.pl
    fi
  fi
  if wanted TAP_publisher; then
    level=${OUTBOX_TAP_ISOLATION:-read committed}
    banner "TAP publisher and fault suites at default_transaction_isolation = '$level'"
    if [[ -n ${OUTBOX_TAP_FILES:-} ]]; then read -r -a PUBLISHER_TAP_TESTS <<<"$OUTBOX_TAP_FILES"; fi
    mapfile -t tests < <(cd test && for g in "${PUBLISHER_TAP_TESTS[@]}"; do compgen -G "$g"; done)
    run_tap TAP_publisher "$REPO/test/results/tap-publisher" "OUTBOX_TEST_ISOLATION=$level" -- "${tests[@]}"
  fi
  if [[ -f test/results/reliability.tsv.parts ]]; then
    # One header, then every row.
    awk 'NR == 1 || $1 != "sink"' test/results/reliability.tsv.parts >test/results/reliability.tsv
    rm -f test/results/reliability.tsv.parts
    bash test/reliability_report.sh test/results/reliability.tsv || true
  fi
else
  wanted TAP && record TAP fail "PGXS build failed"
  wanted TAP_publisher && record TAP_publisher fail "PGXS build failed"
fi

# ---------------------------------------------------------------------------
# The other majors' results (their runs started after the builds above).
for spec in "${CHROOTS[@]}"; do
  read -r suite major level <<<"$spec"
  [[ -n ${CHROOT_RUN[$major]:-} ]] || continue
  banner "PostgreSQL $major in a Debian $suite chroot (test/chroot/run.sh), publisher suites at '$level'"
  if wait "${CHROOT_RUN[$major]}"; then status=0; else status=$?; fi
  cat "$CHROOT_BASE/pg$major.run.log"
  case $status in
    0) record "pg$major" pass "$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$CHROOT_BASE/pg$major.run.log" | tail -n 1)" ;;
    2) record "pg$major" fail "the $suite chroot could not be made" ;;
    *) record "pg$major" fail "$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$CHROOT_BASE/pg$major.run.log" | tail -n 1)" ;;
  esac
done

summary_and_exit
