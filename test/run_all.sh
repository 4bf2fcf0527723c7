#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every suite.
#
#   bash test/run_all.sh
#
# Suites (each counted once in the closing "N passed, N failed" line, which CI
# reads): format, unit (GoogleTest via ctest, built and run under ASan +
# UBSan: test/sanitize.sh's unit step), regression (pg_regress),
# isolation (pg_isolation_regress), quickstart (the README's Quick start run
# as pasted, test/quickstart.sh), harness (this script names what failed:
# test/harness_selftest.sh), TAP (prove with PostgreSQL::Test::Cluster),
# tidy (clang-tidy's analyzer checks, test/tidy.sh),
# sanitizers (the test broker under ASan + UBSan, a publisher under
# valgrind; test/sanitize.sh's other steps), fuzz (libFuzzer on the PostgreSQL-free parsers and
# validators for a bounded time, test/fuzz/run.sh), package (the Debian
# package built, installed and delivering; test/package.sh), and pg17, pg18: the
# builds, regression, isolation and the publisher's TAP suites again
# against PostgreSQL 17 and 18 inside Debian chroots (test/chroot/), with the
# server's default_transaction_isolation at REPEATABLE READ and SERIALIZABLE.
# A failing suite does not stop the others; a suite whose build failed counts
# as failed. Exit status is non-zero when anything failed.
#
# The closing lines are the table of suites, then every failed test by name
# (TAP file, regression or isolation test, unit test, a chroot's too) with
# the end of its log, then "N passed, N failed": CI keeps only a run's last
# lines, and they must say what failed. The whole run keeps to a time budget
# (OUTBOX_RUN_BUDGET, 55 minutes): each suite's timeout is cut to what is
# left, so the summary is printed even when a suite hangs.
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
#   OUTBOX_CHROOT_CACHE=d  where the chroots are kept and reused (default
#                          /var/cache/outbox-test/chroots; empty: a throwaway
#                          directory removed at the end)
#   OUTBOX_RUN_BUDGET=s    seconds the whole run may take (default 3300)
#   OUTBOX_SKIP_BUILD=1    use the outbox already installed: no PGXS or fault
#                          injection build, and the unit suite builds only
#                          the unit tests (test/harness_selftest.sh)
#   OUTBOX_FAILURES_FILE=f where the failed tests are written (default
#                          test/results/failures.txt)
set -uo pipefail # no -e: a failing suite must not stop the next one

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1

# Stable messages and sort order whatever the caller's locale is; UTF-8 so
# non-ASCII payloads survive psql and the TAP clusters' initdb picks UTF8
# (C.UTF-8 is built into Debian's libc, no locales package needed).
export LC_ALL=C.UTF-8 LANG=C.UTF-8
# CI builds every sink: a missing client library fails the build (Makefile,
# CMakeLists.txt) rather than leaving a sink out unnoticed.
export OUTBOX_SINKS=all
unset PGDATABASE PGSERVICE PGOPTIONS PGPASSWORD

# shellcheck source-path=SCRIPTDIR source=lib/pg_major.sh
source "$REPO/test/lib/pg_major.sh"

# The other majors: Debian suite, major, and the default isolation level their
# publisher suites run at (the host runs them at READ COMMITTED).
CHROOTS=("trixie 17 repeatable read" "sid 18 serializable")
SUITES=(format unit regression isolation quickstart harness tidy TAP sanitizers fuzz package pg17 pg18)
if [[ -n ${OUTBOX_SUITES:-} ]]; then read -r -a SUITES <<<"$OUTBOX_SUITES"; fi
wanted() { [[ " ${SUITES[*]} " == *" $1 "* ]]; }
declare -A RESULT=() NOTE=() ENDED_AT=()
RUN_START=$SECONDS
RUN_DEADLINE=$((SECONDS + ${OUTBOX_RUN_BUDGET:-3300}))

# budget SECONDS: a suite's timeout, cut to what is left of the run's budget
# (at least a minute, so a late suite still gets to start and say so).
budget() {
  local left=$((RUN_DEADLINE - SECONDS - 60))
  ((left < 60)) && left=60
  ((left < $1)) && echo "$left" || echo "$1"
}

# shellcheck source-path=SCRIPTDIR source=lib/failures.sh
source "$REPO/test/lib/failures.sh"
# shellcheck source-path=SCRIPTDIR source=lib/processes.sh
source "$REPO/test/lib/processes.sh"
SUITE_LOGS=$REPO/test/results/logs

banner() { printf '\n===== %s =====\n' "$*"; }
# Whether an exit status is timeout(1)'s (124) or its -k KILL's (137).
timed_out() { (($1 == 124 || $1 == 137)); }

# record SUITE pass|fail [note] [ended]: ended, the second of the run at
# which a background suite ended, when that was before its result is taken.
record() {
  RESULT[$1]=$2
  NOTE[$1]=${3:-}
  ENDED_AT[$1]=${4:-$((SECONDS - RUN_START))}
  printf '>>> %s: %s%s\n' "$1" "${2^^}" "${3:+ ($3)}"
}

# in_background LOG COMMAND...: COMMAND in the background, its output in LOG;
# sets BG_PID. When it ends, the second of the run it ended at is written
# to LOG.ended (ended_at reads it).
in_background() {
  local log=$1
  shift
  (
    status=0
    "$@" || status=$?
    echo $((SECONDS - RUN_START)) >"$log.ended"
    exit "$status"
  ) >"$log" 2>&1 &
  BG_PID=$!
  BACKGROUND_PIDS+=("$BG_PID")
}
ended_at() { cat "$1.ended" 2>/dev/null || true; }

summary_and_exit() {
  local passed=0 failed=0 s
  banner "Summary ($((SECONDS - RUN_START)) s)"
  for s in "${SUITES[@]}"; do
    local r=${RESULT[$s]:-fail} n=${NOTE[$s]:-} at=${ENDED_AT[$s]:-}
    [[ -n "${RESULT[$s]:-}" ]] || n="not run"
    # When each suite ended, in seconds from the start: the run's time line
    # (which suite is its longest path) in the lines CI keeps.
    printf '  %-13s %-4s %6s%s\n' "$s" "${r^^}" "${at:+${at} s}" "${n:+  ($n)}"
    if [[ $r == pass ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    # A failed suite with no test named (a build that failed, a suite that
    # never ran): the end of its own output stands for it.
    if [[ $r != pass ]] && ! failures_has_suite "$s"; then
      if [[ -s $SUITE_LOGS/$s.log ]]; then
        failure_add "$s" "${n:-the suite}" "$SUITE_LOGS/$s.log" tail
      else
        failure_add "$s" "${n:-the suite}" "" tail "" "    (no output: it did not run)"
      fi
    fi
  done
  echo
  failures_print
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

# The chroots are kept between runs (OUTBOX_CHROOT_CACHE; test/chroot/
# prepare.sh reuses a finished one and waits for another run preparing it),
# unless the variable is set empty: then they go with this run. Mounts and
# processes inside need no clean-up here: test/chroot/prepare.sh and run.sh
# keep theirs in namespaces of their own that end with them. What this run
# started in the background is stopped with it, and nothing of another run's.
CHROOT_BASE=""
CHROOT_THROWAWAY=0
BACKGROUND_PIDS=()
# kill_tree PID: PID and every process below it, children first.
kill_tree() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
finish_run() {
  local pid
  for pid in "${BACKGROUND_PIDS[@]}"; do
    # Only a job still going, still this shell's child: a finished one's PID
    # may be another process's by now.
    if kill -0 "$pid" 2>/dev/null &&
      [[ "$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')" == "$$" ]]; then
      kill_tree "$pid"
    fi
  done
  [[ -n ${RUN_FILES:-} ]] && rm -rf "$RUN_FILES"
  [[ -n ${RELEASES_DIR:-} ]] && rm -rf "$RELEASES_DIR"
  [[ -n ${TAP_ROOT:-} ]] && rm -rf "$TAP_ROOT"
  if ((CHROOT_THROWAWAY)) && [[ -n $CHROOT_BASE && -d $CHROOT_BASE ]]; then
    sleep 1 # the namespaces' last processes are gone
    rm -rf --one-file-system "$CHROOT_BASE"
  fi
}
trap finish_run EXIT
trap 'echo "interrupted"; exit 130' INT TERM HUP

# Results of an earlier run would be mistaken for this run's.
rm -rf test/results
failures_init "${OUTBOX_FAILURES_FILE:-$REPO/test/results/failures.txt}"
mkdir -p "$SUITE_LOGS"

# run_logged SUITE COMMAND...: COMMAND's output shown and kept in the suite's
# log (its end stands for the suite in the summary when no test is named).
run_logged() {
  local suite=$1
  shift
  "$@" 2>&1 | tee -a "$SUITE_LOGS/$suite.log"
  return "${PIPESTATUS[0]}"
}

# ---------------------------------------------------------------------------
banner "Dependencies"
if [[ "${OUTBOX_SKIP_DEPS:-0}" != 1 ]]; then
  if ! run_logged dependencies timeout -k 30 "$(budget 1800)" bash "$REPO/test/install_deps.sh"; then
    echo "installing dependencies failed: nothing can be built or tested" >&2
    failure_add dependencies "test/install_deps.sh" "$SUITE_LOGS/dependencies.log" tail
    summary_and_exit
  fi
fi
if ! outbox_use_postgres; then
  failure_add dependencies "no PostgreSQL found" "" tail "" "    run test/install_deps.sh"
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
# Each run keeps its own status and log files (RUN_FILES): two runs may
# share the kept chroots.
RUN_FILES=$(mktemp -d /tmp/outbox-run.XXXXXX)
if wanted pg17 || wanted pg18; then
  if [[ -z ${OUTBOX_CHROOT_CACHE-/var/cache/outbox-test/chroots} ]]; then
    CHROOT_BASE=$(mktemp -d /var/tmp/outbox-chroots.XXXXXX)
    CHROOT_THROWAWAY=1
  else
    CHROOT_BASE=${OUTBOX_CHROOT_CACHE:-/var/cache/outbox-test/chroots}
    mkdir -p "$CHROOT_BASE"
  fi
  echo "chroots for PostgreSQL 17 and 18: $CHROOT_BASE"
  for spec in "${CHROOTS[@]}"; do
    read -r suite major _ <<<"$spec"
    wanted "pg$major" || continue
    (
      status=0
      timeout -k 30 "$(budget 2400)" bash test/chroot/prepare.sh "$suite" "$major" "$CHROOT_BASE/$suite" || status=$?
      echo "$status" >"$RUN_FILES/$suite.rc"
    ) >"$RUN_FILES/$suite.log" 2>&1 &
    BACKGROUND_PIDS+=($!)
  done
fi

# ---------------------------------------------------------------------------
wanted format && banner "Format check (clang-format --dry-run --Werror) and the layer order (test/layers.sh)"
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
  while read -r f; do
    failure_add format "$f" "" tail "" \
      "$(printf '%s\n' "$FORMAT_OUT" | grep -F "$f:" | grep -F 'error:' | head -n 5)"
  done < <(printf '%s\n' "$FORMAT_OUT" | grep -oE '^[^: ]+:[0-9]+:[0-9]+: error' | cut -d: -f1 | sort -u)
  record format fail "files need clang-format"
fi
# The layers of src/ (src/README.md): no include from a lower layer to a
# higher one, no PostgreSQL header in core/ or sinks/.
if wanted format; then
  if LAYERS_OUT=$(bash test/layers.sh "$("$PG_CONFIG" --includedir-server)" 2>&1); then
    echo "$LAYERS_OUT"
  else
    printf '%s\n' "$LAYERS_OUT"
    while read -r line; do
      failure_add format "${line%%: *}" "" tail "" "    $line"
    done < <(printf '%s\n' "$LAYERS_OUT" | grep -E '^src/')
    record format fail "includes break the layer order (test/layers.sh)"
  fi
fi

# ---------------------------------------------------------------------------
banner "PGXS build and install (make WERROR=1 && make install)"
# The Makefile tracks header dependencies (.deps/), so a re-run after editing
# a header rebuilds what includes it instead of linking stale objects.
PGXS_OK=0
# The test Kafka broker and consumer (test/kafka) are built here, as root:
# the TAP tests run as the server's OS user, who cannot write the checkout.
if [[ ${OUTBOX_SKIP_BUILD:-0} == 1 ]]; then
  if [[ -f "$("$PG_CONFIG" --pkglibdir)/outbox.so" ]] && run_logged build make -s -C test/kafka; then
    PGXS_OK=1
    echo "OUTBOX_SKIP_BUILD: the outbox installed in $("$PG_CONFIG" --pkglibdir) is tested"
  else
    failure_add build "OUTBOX_SKIP_BUILD=1 but no outbox installed" "" tail "" "    run make install first"
  fi
elif run_logged build timeout -k 30 "$(budget 1200)" make -j2 WERROR=1 PG_CONFIG="$PG_CONFIG" &&
  run_logged build timeout -k 30 "$(budget 300)" make install PG_CONFIG="$PG_CONFIG" &&
  run_logged build timeout -k 30 "$(budget 300)" make -C test/kafka; then
  PGXS_OK=1
  echo "installed into $("$PG_CONFIG" --pkglibdir) and $("$PG_CONFIG" --sharedir)/extension"
else
  echo "PGXS build or install failed: regression, isolation and TAP suites cannot run" >&2
  # Named once, by the first error the compiler or make printed.
  failure_add build "make (PGXS), make install or make -C test/kafka" "" tail "" \
    "$(grep -E -m 12 -B 2 ' error|Error [0-9]+' "$SUITE_LOGS/build.log" || tail -n "$FAILURE_LINES" "$SUITE_LOGS/build.log")"
fi

# The released libraries the update tests install (test/lib/releases.sh,
# test/lib/OutboxRelease.pm): built from their commits once and kept in
# /var/cache/outbox-test/releases, in the background; this run's own build
# is staged beside them. Needs the git history: a checkout without it (an
# export, the chroots' copies) runs no update test.
RELEASES_DIR=""
RELEASES_PID=""
RELEASE_COMMITS=(34385b2 17f5436)
if ((PGXS_OK)) && wanted TAP && git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
  RELEASES_DIR=$(mktemp -d /tmp/outbox-releases.XXXXXX)
  chmod 755 "$RELEASES_DIR"
  RELEASE_CACHE=${OUTBOX_RELEASE_CACHE:-/var/cache/outbox-test/releases}
  (
    bash test/lib/releases.sh stage "$RELEASE_CACHE" "${RELEASE_COMMITS[@]}" &&
      for c in "${RELEASE_COMMITS[@]}"; do ln -s "$RELEASE_CACHE/$c" "$RELEASES_DIR/$c"; done &&
      bash test/lib/releases.sh current "$RELEASES_DIR"
  ) >"$SUITE_LOGS/releases.log" 2>&1 &
  RELEASES_PID=$!
  BACKGROUND_PIDS+=("$RELEASES_PID")
fi

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
  elif run_logged regression timeout -k 30 "$(budget 900)" make installcheck PG_CONFIG="$PG_CONFIG" ISOLATION=; then
    record regression pass
  else
    show_diffs test/results/regression.diffs
    failures_from_pg_regress regression "$SUITE_LOGS/regression.log" "$REPO/test/results/regression.diffs"
    record regression fail "see test/results/regression.diffs"
  fi
  if ! wanted isolation; then
    :
  elif run_logged isolation timeout -k 30 "$(budget 900)" make installcheck PG_CONFIG="$PG_CONFIG" REGRESS=; then
    record isolation pass
  else
    show_diffs test/results/isolation/regression.diffs
    failures_from_pg_regress isolation "$SUITE_LOGS/isolation.log" "$REPO/test/results/isolation/regression.diffs"
    record isolation fail "see test/results/isolation/regression.diffs"
  fi
else
  record regression fail "PGXS build failed"
  record isolation fail "PGXS build failed"
fi
fi # wanted regression or isolation

# ---------------------------------------------------------------------------
if wanted quickstart; then
  banner "The README's Quick start, as a user pastes it (test/quickstart.sh)"
  if ((PGXS_OK)) && run_logged quickstart timeout -k 30 "$(budget 600)" bash test/quickstart.sh; then
    record quickstart pass
  else
    record quickstart fail "the README's Quick start did not run as written"
  fi
fi

# ---------------------------------------------------------------------------
banner "Fault injection build (CMake, OUTBOX_FAULT_INJECTION=ON; test/t/09x load it)"
# The release module (installed above) has no fault injection points; the TAP
# tests that inject faults load this build from a private directory through
# dynamic_library_path (OutboxNode's fault_injection option). Unoptimised
# (Debug): built here and in both chroots, it costs a fraction of the CPU of
# -O2, and the tests that load it wait on conditions, not on its speed.
FI_OK=0
if [[ -f build-fi/CMakeCache.txt ]] &&
  ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$REPO" build-fi/CMakeCache.txt; then
  rm -rf build-fi
fi
if [[ ${OUTBOX_SKIP_BUILD:-0} == 1 ]]; then
  FI_OK=1 # not built: the fault injection tests skip themselves
elif ((PGXS_OK)) && { wanted TAP || wanted TAP_publisher; } &&
  run_logged build timeout -k 30 "$(budget 1200)" cmake -S . -B build-fi -DOUTBOX_WERROR=ON -DOUTBOX_FAULT_INJECTION=ON \
    -DCMAKE_BUILD_TYPE=Debug -DPG_CONFIG="$PG_CONFIG" >/dev/null &&
  run_logged build timeout -k 30 "$(budget 1200)" cmake --build build-fi -j2 --target outbox; then
  FI_OK=1
elif wanted TAP || wanted TAP_publisher; then
  echo "the fault injection build failed: the fault injection TAP tests cannot run" >&2
fi

# ---------------------------------------------------------------------------
# The TAP files of the second lane (prove's rule globs: no [ranges]): files
# that mostly wait, on clocks, on other sessions or on brokers (the waiting
# publisher, the late-commit, claim and refusal runs, every broker sink's
# files), and the injected-fault files 090-093: they come early in the
# second lane and the fault suites (070, 071) late in the first, so they do
# not run at once. The memory run (080, 1,400,000 events: it computes more
# than it waits) runs in the first lane, after the fault suites: in a whole
# TAP run on a loaded 2-core machine the lanes took 1,847 s and 1,743 s this
# way, and would have taken 1,614 s and 1,975 s with 080 (232 s) in the
# second, which every new broker sink's files join. 159 (MQTT chains cut
# off, minutes of a key's serial acknowledgements, like 139 beside it in
# the second) runs in the first.
TAP_SECOND_LANE='t/{046,050,057,068,090,091,092,093,096,099,12?,13?,14?,150,151,152,153,154,155,156,157,158,160}_*.pl'
# The chroots' second lane: the broker sinks' files (120-160).
SINK_TAP_LANE='t/{12?,13?,14?,15?,160}_*.pl'

# ---------------------------------------------------------------------------
# run_tap SUITE DIR [VAR=value ...] -- TEST...: prove the TAP tests as the
# server's OS user, their data and logs under DIR (private to this run), the
# fault injection build beside them; records SUITE. The host's suite took
# up to 2,400 s on a loaded 2-core machine before the RabbitMQ and NATS
# files (about 7 minutes more): 2,900 s, within the run's own deadline.
# shellcheck disable=SC2317 # runs in tap_suites, a background job
run_tap() {
  local suite=$1 dir=$2
  shift 2
  local -a envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local -a tests=("$@")
  # The TAP suite runs in two lanes, each one file at a time (every file has
  # its own ports and data directories): the second takes TAP_SECOND_LANE,
  # files that mostly wait on brokers, servers and clocks, the first
  # everything else, so the suite's length is the longer lane's rather than
  # the sum. TAP_publisher (the chroots' suite) has a second lane for the
  # broker sinks' files only (SINK_TAP_LANE), which mostly wait on RabbitMQ
  # and NATS: lanes split like the host's kept six fault suites running at
  # once on 2 cores.
  # OUTBOX_TAP_LANES=1 runs one file at a time; OUTBOX_TAP_JOBS=N any N
  # files at once (two at a time in every suite overloaded 2 cores: timeouts
  # in the fault suites' read-back and a missed intermediate state in 040).
  local -a schedule=(-j 1)
  if [[ -n ${OUTBOX_TAP_JOBS:-} ]]; then
    schedule=(-j "$OUTBOX_TAP_JOBS")
  elif [[ ${OUTBOX_TAP_LANES:-2} == 2 ]]; then
    local lane=$TAP_SECOND_LANE
    [[ $suite == TAP_publisher ]] && lane=$SINK_TAP_LANE
    schedule=(-j 2 "--rules=seq=$lane" "--rules=seq=**")
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  # PostgreSQL::Test::Utils writes logs and data directories under
  # $TESTDIR/tmp_check, and the tests call initdb, so everything runs as the
  # server's OS user, and a copy of the tests, readable by it, runs.
  cp -r "$REPO/test/t" "$REPO/test/lib" "$REPO/test/kafka" "$REPO/docs" "$dir/"
  # The brokers' test tools the TAP files build or run (test/<kind>/).
  local tool
  for tool in amqp nats mqtt http; do
    if [[ -d $REPO/test/$tool ]]; then cp -r "$REPO/test/$tool" "$dir/"; fi
  done
  if ((FI_OK)) && [[ -f build-fi/outbox.so ]]; then
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
  # prove's output is kept beside the logs: its summary names the failed
  # files, and a prove killed by the time budget names none.
  local out=$SUITE_LOGS/$suite.log
  if (cd "$dir" && run_logged "$suite" timeout -k 30 "$(budget 2900)" "${as_user[@]}" \
    env -u PGHOST -u PGPORT -u PGUSER -u OUTBOX_TEST_ISOLATION \
    PATH="${TAP_BIN:+$TAP_BIN:}$PATH" HOME="$dir" LC_ALL=C.UTF-8 LANG=C.UTF-8 \
    PERL5LIB="$PGXS_TOP/src/test/perl:$dir/lib${PERL5LIB:+:$PERL5LIB}" \
    TESTDIR="$dir" TESTDATADIR="$dir/tmp_check" TESTLOGDIR="$dir/tmp_check/log" \
    PG_REGRESS="$PG_REGRESS_BIN" OUTBOX_REPO="$REPO" "${envs[@]}" \
    prove --timer "${schedule[@]}" "${tests[@]}"); then
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
    failures_from_prove "$suite" "$out" "$dir/tmp_check/log"
    record "$suite" fail "logs in $dir/tmp_check/log"
  fi
  reap_tap_dir "$dir"
}

# reap_tap_dir DIR: stop every process a TAP run in DIR left behind. A file
# the time budget kills never reaches its END block: its servers (pg_ctl puts
# each postmaster in a session of its own, out of reach of timeout's signal)
# and the brokers it started would keep the machine busy for the rest of the
# run (lib/processes.sh says which processes count).
# shellcheck disable=SC2317 # runs in tap_suites, a background job
reap_tap_dir() {
  local dir=$1 pids=() round
  for round in QUIT KILL; do
    mapfile -t pids < <(processes_in "$dir")
    ((${#pids[@]})) || return 0
    echo "stopping ${#pids[@]} processes the TAP run in $dir left running (SIG$round)"
    kill -"$round" "${pids[@]}" 2>/dev/null || true
    [[ $round == QUIT ]] && sleep 3
  done
}

# ---------------------------------------------------------------------------
# The TAP suites run against a private copy of this machine's PostgreSQL
# tree with the build installed in it (PostgreSQL finds its share directory
# and libraries relative to its binaries): the package suite below replaces
# and then removes the system's outbox while they run. They start here, in
# the background, beside the sanitizers, the package and the other majors'
# suites: they mostly wait on servers and brokers, and those mostly compute.
# Their results are taken before the summary.
# The publisher's suites and the fault suites: what the chroots run against
# the other majors, at another default_transaction_isolation each (the
# publisher must not depend on the server's default).
# The broker sinks' files (RabbitMQ, NATS, MQTT) run there too, in a lane of
# their own, against the chroot's own servers (RabbitMQ 4 and newer NATS on
# sid), and the HTTP sink's, whose npm tools come with the checkout the host
# installed them into (test/http/node_tools) and run on the chroot's nodejs.
PUBLISHER_TAP_TESTS=(t/020_*.pl t/021_*.pl t/023_*.pl t/025_*.pl t/026_*.pl t/027_*.pl
  t/030_*.pl t/032_*.pl t/034_*.pl t/036_*.pl t/040_*.pl t/042_*.pl t/043_*.pl
  t/101_*.pl t/062_*.pl
  t/120_*.pl t/121_*.pl t/123_*.pl t/124_*.pl
  t/130_*.pl t/131_*.pl t/133_*.pl t/134_*.pl t/135_*.pl t/136_*.pl t/137_*.pl t/139_*.pl
  t/140_*.pl t/141_*.pl t/143_*.pl t/144_*.pl t/145_*.pl t/147_*.pl
  t/150_*.pl t/151_*.pl t/153_*.pl t/154_*.pl t/155_*.pl t/156_*.pl t/157_*.pl t/158_*.pl
  t/159_*.pl t/160_*.pl)
# The fault suites, the longest files of the run (CPU-bound: 070 and 090
# took 6 minutes each in a chroot): each runs on this machine at READ
# COMMITTED and in one of the chroots, at that chroot's level, not in both.
# A TAP_publisher run on any other major runs them all.
declare -A FAULT_TAP_TESTS=(
  [17]="t/070_*.pl t/092_*.pl t/094_*.pl t/096_*.pl t/098_*.pl t/122_*.pl t/142_*.pl"
  [18]="t/071_*.pl t/090_*.pl t/091_*.pl t/093_*.pl t/095_*.pl t/097_*.pl t/132_*.pl")
case $PG_MAJOR in
  17 | 18) read -r -a FAULT_FILES <<<"${FAULT_TAP_TESTS[$PG_MAJOR]}" ;;
  *) read -r -a FAULT_FILES <<<"${FAULT_TAP_TESTS[17]} ${FAULT_TAP_TESTS[18]}" ;;
esac
PUBLISHER_TAP_TESTS+=("${FAULT_FILES[@]}")

TAP_ROOT="" TAP_BIN="" TAP_PID=""
# make_tap_tree: the private tree in TAP_ROOT; sets TAP_BIN, its binaries.
# With OUTBOX_SKIP_BUILD=1 the copy holds the installed outbox under test.
make_tap_tree() {
  local prefix sharedir
  prefix=$(dirname "$("$PG_CONFIG" --bindir)")
  sharedir=$("$PG_CONFIG" --sharedir)
  # Not /tmp/outbox-pg.*: reap_stale_clusters (lib/cluster.sh) removes those.
  TAP_ROOT=$(mktemp -d /tmp/outbox-pgtree.XXXXXX)
  chmod 755 "$TAP_ROOT"
  # Under the same paths as the original: the share directory is found from
  # the binaries by the path between them.
  (umask 022 && mkdir -p "$TAP_ROOT$(dirname "$prefix")" "$TAP_ROOT$(dirname "$sharedir")") &&
    cp -a "$prefix" "$TAP_ROOT$prefix" && cp -a "$sharedir" "$TAP_ROOT$sharedir" || return 1
  if [[ ${OUTBOX_SKIP_BUILD:-0} != 1 ]]; then
    make -s install PG_CONFIG="$TAP_ROOT$prefix/bin/pg_config" >/dev/null || return 1
  fi
  TAP_BIN=$TAP_ROOT$prefix/bin
  echo "the TAP suites run $TAP_BIN (a copy of $prefix with this build installed)"
}

# tap_suites RELEASE_ENV...: the TAP suites wanted, one after the other (in
# the background: each result goes to RUN_FILES/tap.records, each failure to
# RUN_FILES/tap.failures).
# shellcheck disable=SC2317 # called through in_background
tap_suites() {
  FAILURES_FILE=$RUN_FILES/tap.failures
  local -a release_env=("$@") tests
  rm -f test/results/reliability.tsv.parts
  if wanted TAP; then
    banner "TAP tests (prove test/t/*.pl)"
    # The globs are expanded where the tests are (test/), as prove sees them.
    mapfile -t tests < <(cd test && for g in ${OUTBOX_TAP_FILES:-t/*.pl}; do compgen -G "$g"; done | LC_ALL=C sort)
    if ((${#tests[@]} == 0)); then
      record TAP fail "no test/t/*.pl"
    else
      # install_deps.sh installed the HTTP tests' npm tools: missing, they fail the run.
      run_tap TAP "$REPO/test/results/tap" "${release_env[@]}" OUTBOX_REQUIRE_TOOLS=1 -- "${tests[@]}" kafka/selftest.pl
    fi
  fi
  if wanted TAP_publisher; then
    local level=${OUTBOX_TAP_ISOLATION:-read committed}
    banner "TAP publisher and fault suites at default_transaction_isolation = '$level'"
    if [[ -n ${OUTBOX_TAP_FILES:-} ]]; then read -r -a PUBLISHER_TAP_TESTS <<<"$OUTBOX_TAP_FILES"; fi
    mapfile -t tests < <(cd test && for g in "${PUBLISHER_TAP_TESTS[@]}"; do compgen -G "$g"; done)
    # The chroots get the HTTP tests' npm tools with the checkout: missing, they fail the run.
    run_tap TAP_publisher "$REPO/test/results/tap-publisher" "OUTBOX_TEST_ISOLATION=$level" \
      OUTBOX_REQUIRE_TOOLS=1 -- "${tests[@]}"
  fi
  if [[ -f test/results/reliability.tsv.parts ]]; then
    # One header, then every row.
    awk 'NR == 1 || $1 != "sink"' test/results/reliability.tsv.parts >test/results/reliability.tsv
    rm -f test/results/reliability.tsv.parts
    bash test/reliability_report.sh test/results/reliability.tsv || true
  fi
  local s
  for s in TAP TAP_publisher; do
    [[ -n ${RESULT[$s]:-} ]] || continue
    printf '%s\t%s\t%s\t%s\n' "$s" "${RESULT[$s]}" "${ENDED_AT[$s]}" "${NOTE[$s]}" >>"$RUN_FILES/tap.records"
  done
}

if ! { wanted TAP || wanted TAP_publisher; }; then
  :
elif ((PGXS_OK)) && make_tap_tree; then
  RELEASE_ENV=()
  if wanted TAP && [[ -n $RELEASES_PID ]]; then
    # With the history at hand the update tests must run: they fail,
    # not skip, without the releases.
    RELEASE_ENV=(OUTBOX_RELEASES_REQUIRED=1)
    if wait "$RELEASES_PID"; then
      RELEASE_ENV+=("OUTBOX_RELEASES_DIR=$RELEASES_DIR")
    else
      echo "building the earlier releases failed: the update tests cannot run" >&2
      failure_add TAP "the earlier releases (test/lib/releases.sh)" "$SUITE_LOGS/releases.log" tail
    fi
  fi
  : >"$RUN_FILES/tap.records"
  : >"$RUN_FILES/tap.failures"
  in_background "$RUN_FILES/tap.out" tap_suites "${RELEASE_ENV[@]}"
  TAP_PID=$BG_PID
  echo "the TAP suites run in the background from here on ($(wanted TAP && echo TAP) $(wanted TAP_publisher && echo TAP_publisher))"
else
  why="PGXS build failed"
  ((PGXS_OK)) && why="the private PostgreSQL tree for the TAP suites could not be made"
  wanted TAP && record TAP fail "$why"
  wanted TAP_publisher && record TAP_publisher fail "$why"
fi

# ---------------------------------------------------------------------------
# The other majors, each in its chroot (made in the background since the
# start), run from here on beside this machine's remaining suites, both at
# once: started as soon as this machine's TAP suite is, since with it they
# are the run's longest paths (the unit tests, now built unoptimised, no
# longer take the CPU that made the chroots wait for them). Each picks its
# own free ports. Their output is shown at the end.
declare -A CHROOT_RUN=()
# chroot_run SUITE MAJOR LEVEL: the run in the chroot of SUITE; status 2
# when the chroot could not be made.
# shellcheck disable=SC2317 # called through in_background
chroot_run() {
  local suite=$1 major=$2 level=$3
  # The chroot was being made since the start (a child of the main shell,
  # so this background job cannot wait for it: it watches for its status
  # file, which its preparation writes however it ends).
  while [[ ! -s "$RUN_FILES/$suite.rc" ]] && ((SECONDS < RUN_DEADLINE)); do sleep 2; done
  cat "$RUN_FILES/$suite.log"
  if [[ "$(cat "$RUN_FILES/$suite.rc" 2>/dev/null)" != 0 ]]; then
    echo "making the $suite chroot failed"
    return 2
  fi
  # The run inside keeps to what is left of this run's budget, less the
  # time to print its summary and have it read here.
  OUTBOX_CHROOT_BUDGET=$(($(budget 3000) - 90)) \
    OUTBOX_CHROOT_FAILURES="$RUN_FILES/pg$major.failures" \
    timeout -k 30 "$(budget 3000)" bash test/chroot/run.sh "$CHROOT_BASE/$suite" "$major" "$level"
}
for spec in "${CHROOTS[@]}"; do
  read -r suite major level <<<"$spec"
  wanted "pg$major" || continue
  in_background "$RUN_FILES/pg$major.run.log" chroot_run "$suite" "$major" "$level"
  CHROOT_RUN[$major]=$BG_PID
done

# ---------------------------------------------------------------------------
if wanted unit; then
banner "Unit tests under ASan + UBSan (test/sanitize.sh's unit step: CMake build, ctest)"
# Built and run once, sanitized: the sanitizers suite below does the rest of
# test/sanitize.sh. After the TAP suites started (the run's longest path,
# which needs only the PGXS and fault injection builds). Private directory,
# kept when the suite fails.
# 40 minutes: on a loaded 2-core machine the sanitized build took 15 and
# ctest 14 beside the TAP suite (its HTTP and AMQP tests wait on timeouts).
UNIT_DIR=$(mktemp -d /tmp/outbox-unit.XXXXXX)
unit_budget=$(budget 2400)
unit_status=0
run_logged unit timeout -k 30 "$unit_budget" env OUTBOX_SKIP_DEPS=1 OUTBOX_SANITIZE_STEPS=unit \
  bash test/sanitize.sh "$UNIT_DIR" || unit_status=$?
if ((unit_status == 0)); then
  record unit pass
  rm -rf "$UNIT_DIR"
elif failures_from_ctest unit "$UNIT_DIR/cmake"; then
  record unit fail "ctest failures (build and reports in $UNIT_DIR)"
elif ((unit_status == 124 || unit_status == 137)); then
  record unit fail "timed out after $unit_budget s (build and reports in $UNIT_DIR)"
else
  record unit fail "build failed or sanitizer reports (in $UNIT_DIR)"
fi
fi # wanted unit

# ---------------------------------------------------------------------------
if wanted sanitizers; then
  banner "Test broker under ASan + UBSan, a publisher under valgrind (test/sanitize.sh)"
  # Private directories (two runs on one machine must not share them); kept
  # when the suite fails, for its reports and crash inputs.
  SANITIZE_DIR=$(mktemp -d /tmp/outbox-sanitize.XXXXXX)
  chmod 755 "$SANITIZE_DIR" # the publisher under valgrind runs as the server's OS user
  if run_logged sanitizers timeout -k 30 "$(budget 1800)" env OUTBOX_SKIP_DEPS=1 \
    OUTBOX_SANITIZE_STEPS="broker valgrind" bash test/sanitize.sh "$SANITIZE_DIR"; then
    record sanitizers pass
    rm -rf "$SANITIZE_DIR"
  else
    record sanitizers fail "reports above and in $SANITIZE_DIR/reports"
  fi
fi

# ---------------------------------------------------------------------------
# The harness check runs in the background, beside the suites below, after
# the CPU-hungry ones (it builds a few unit tests and runs one file of each
# other kind); its result
# is taken before the summary.
HARNESS_PID=""
if wanted harness && ((PGXS_OK)); then
  HARNESS_DIR=$(mktemp -d /tmp/outbox-harness.XXXXXX)
  in_background "$SUITE_LOGS/harness.log" timeout -k 30 "$(budget 1500)" bash test/harness_selftest.sh "$HARNESS_DIR"
  HARNESS_PID=$BG_PID
elif wanted harness; then
  record harness fail "PGXS build failed"
fi

# ---------------------------------------------------------------------------
# clang-tidy and the fuzzers run in the background from here on, beside the
# package suite and the TAP suites, which mostly wait on servers and brokers:
# they take the longest path of the run (this machine's TAP suite) a few
# minutes shorter than running before it. Neither waits on a clock that load
# could make it miss (the fuzzers run for a fixed time each; a loaded machine
# only tries fewer inputs). Their output is shown, and their result taken,
# before the summary. Their time budgets (30 and 20 minutes) leave room:
# beside the TAP suites and the chroots, clang-tidy over every file took
# about 20 minutes, and the fuzzers' build alone 13.
TIDY_PID=""
if wanted tidy; then
  # The compile database comes from a CMake configure (nothing is built) in
  # a directory of this run's own: not in the checkout, which the harness
  # and package suites copy meanwhile.
  TIDY_DB=$RUN_FILES/tidy-db
  if timeout -k 30 600 cmake -S . -B "$TIDY_DB" -DOUTBOX_WERROR=ON -DPG_CONFIG="$PG_CONFIG" >/dev/null; then
    in_background "$SUITE_LOGS/tidy.log" timeout -k 30 "$(budget 1800)" bash test/tidy.sh "$TIDY_DB"
    TIDY_PID=$BG_PID
  else
    record tidy fail "the CMake configure for the compile database failed"
  fi
fi
FUZZ_PID=""
if wanted fuzz; then
  FUZZ_DIR=$(mktemp -d /tmp/outbox-fuzz.XXXXXX)
  in_background "$SUITE_LOGS/fuzz.log" \
    timeout -k 30 "$(budget 1200)" env FUZZ_SECONDS="${FUZZ_SECONDS:-20}" bash test/fuzz/run.sh "$FUZZ_DIR"
  FUZZ_PID=$BG_PID
fi

# ---------------------------------------------------------------------------
if wanted package; then
  banner "The Debian package: build, install, deliver an event (test/package.sh)"
  PACKAGE_DIR=$(mktemp -d /tmp/outbox-package.XXXXXX)
  # Its -O0 build of every source takes 11 to 15 minutes on a loaded 2-core
  # machine (it starts when the sanitizers end, beside the TAP suite and
  # the chroots' runs); the TAP suite ends later still.
  if ((PGXS_OK)) && run_logged package timeout -k 30 "$(budget 1500)" bash test/package.sh "$PACKAGE_DIR"; then
    record package pass "postgresql-$PG_MAJOR-outbox"
    rm -rf "$PACKAGE_DIR"
  else
    record package fail "logs in $PACKAGE_DIR"
  fi
fi

# ---------------------------------------------------------------------------
# The TAP suites' results (they started after the builds above).
if [[ -n $TAP_PID ]]; then
  if wait "$TAP_PID"; then :; fi
  cat "$RUN_FILES/tap.out"
  # Each was printed by the job (in tap.out, above): taken, not printed again.
  while IFS=$'\t' read -r s r at n; do
    RESULT[$s]=$r NOTE[$s]=$n ENDED_AT[$s]=$at
  done <"$RUN_FILES/tap.records"
  cat "$RUN_FILES/tap.failures" >>"$FAILURES_FILE"
fi

# ---------------------------------------------------------------------------
if [[ -n $TIDY_PID ]]; then
  banner "clang-tidy: the static analyzer's checks (.clang-tidy, test/tidy.sh)"
  cat "$SUITE_LOGS/tidy.log"
  if wait "$TIDY_PID"; then
    record tidy pass "" "$(ended_at "$SUITE_LOGS/tidy.log")"
  elif timed_out $?; then
    record tidy fail "stopped at its time budget before it checked every file" \
      "$(ended_at "$SUITE_LOGS/tidy.log")"
  else
    # test/tidy.sh prints "----- FILE -----" before each file's reports.
    while read -r f; do
      failure_add tidy "${f#"$REPO"/}" "" tail "" \
        "$(awk -v f="$f" '$0 == "----- " f " -----" { on = 1; next } /^----- / { on = 0 } on' \
          "$SUITE_LOGS/tidy.log" | grep -E 'warning:|error:' | head -n 8)"
    done < <(sed -nE 's/^----- (.+) -----$/\1/p' "$SUITE_LOGS/tidy.log")
    record tidy fail "reports above" "$(ended_at "$SUITE_LOGS/tidy.log")"
  fi
fi

# ---------------------------------------------------------------------------
if [[ -n $FUZZ_PID ]]; then
  banner "Fuzzing the parsers and validators (test/fuzz/run.sh, ${FUZZ_SECONDS:-20} s per target)"
  cat "$SUITE_LOGS/fuzz.log"
  if wait "$FUZZ_PID"; then
    record fuzz pass "" "$(ended_at "$SUITE_LOGS/fuzz.log")"
    rm -rf "$FUZZ_DIR"
  elif timed_out $?; then
    # timeout(1) stopped it: no crash, the machine was too slow for its
    # budget (the log says how far it got).
    record fuzz fail "stopped at its time budget, not a crash (see how far it got)" \
      "$(ended_at "$SUITE_LOGS/fuzz.log")"
  else
    record fuzz fail "crash inputs named above" "$(ended_at "$SUITE_LOGS/fuzz.log")"
  fi
fi

# ---------------------------------------------------------------------------
if [[ -n $HARNESS_PID ]]; then
  banner "The summary names what failed (test/harness_selftest.sh)"
  if wait "$HARNESS_PID"; then
    cat "$SUITE_LOGS/harness.log"
    record harness pass "" "$(ended_at "$SUITE_LOGS/harness.log")"
    rm -rf "$HARNESS_DIR"
  else
    cat "$SUITE_LOGS/harness.log"
    record harness fail "the broken tests were not all named; the run in $HARNESS_DIR" \
      "$(ended_at "$SUITE_LOGS/harness.log")"
  fi
fi

# ---------------------------------------------------------------------------
# The other majors' results (their runs started after the builds above).
for spec in "${CHROOTS[@]}"; do
  read -r suite major level <<<"$spec"
  [[ -n ${CHROOT_RUN[$major]:-} ]] || continue
  banner "PostgreSQL $major in a Debian $suite chroot (test/chroot/run.sh), publisher suites at '$level'"
  if wait "${CHROOT_RUN[$major]}"; then status=0; else status=$?; fi
  log=$RUN_FILES/pg$major.run.log
  cp "$log" "$SUITE_LOGS/pg$major.log"
  cat "$log"
  counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
  ended=$(ended_at "$log")
  case $status in
    0) record "pg$major" pass "$counts" "$ended" ;;
    2) record "pg$major" fail "the $suite chroot could not be made" "$ended" ;;
    124 | 137) record "pg$major" fail "out of time${counts:+ ($counts)}" "$ended" ;;
    *) record "pg$major" fail "$counts" "$ended" ;;
  esac
  # The run inside named its failed tests: under this suite's name here.
  if ((status != 0)) && [[ -s $RUN_FILES/pg$major.failures ]]; then
    sed -E "s/^--- /--- pg$major /" "$RUN_FILES/pg$major.failures" >>"$FAILURES_FILE"
  fi
done

summary_and_exit
