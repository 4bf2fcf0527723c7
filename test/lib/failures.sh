# shellcheck shell=bash
# The failed tests of a run, by name, each with the end of its log: what
# test/run_all.sh prints right above its closing "N passed, N failed" line,
# so that the last lines of any run (all CI keeps) say what failed and why.
#
#   source test/lib/failures.sh
#   failures_init FILE                       # empty FILE; the functions below append
#   failure_add SUITE NAME LOG [tail|head] [LINES] [TEXT]
#   failures_from_ctest SUITE BUILD_DIR      # GoogleTest cases ctest ran and saw fail
#   failures_from_pg_regress SUITE OUTPUT DIFFS  # pg_regress's stdout and its diffs
#   failures_from_prove SUITE OUTPUT LOGDIR  # prove's stdout, the tests' log directory
#   failures_print FILE
#
# Each record is a header line "--- SUITE: NAME (LOG)" and the lines under it
# indented by four spaces. The parsers read what the tools print on
# PostgreSQL 15 to 18 (pg_regress changed to TAP-like lines in 16) and
# CMake 3.25 to 3.31.

FAILURES_FILE=${FAILURES_FILE:-}
# Lines of a log shown per failed test: enough to read the assertion and the
# server's last words, few enough that a dozen failures fit in CI's tail.
FAILURE_LINES=${FAILURE_LINES:-25}

failures_init() {
  FAILURES_FILE=$1
  mkdir -p "$(dirname "$FAILURES_FILE")"
  : >"$FAILURES_FILE"
}

# failure_add SUITE NAME LOG [tail|head] [LINES] [TEXT]: TEXT, when given, is
# shown instead of LOG's lines (LOG is then only named).
failure_add() {
  local suite=$1 name=$2 log=$3 end=${4:-tail} lines=${5:-$FAILURE_LINES} text=${6:-}
  [[ -n $FAILURES_FILE ]] || return 0
  {
    printf -- '--- %s: %s%s\n' "$suite" "$name" "${log:+ ($log)}"
    if [[ -n $text ]]; then
      printf '%s\n' "$text"
    elif [[ -n $log && -f $log ]]; then
      if [[ $end == head ]]; then head -n "$lines" "$log"; else tail -n "$lines" "$log"; fi
    fi | sed -e 's/^/    /' | cut -c1-300
  } >>"$FAILURES_FILE"
}

# The suites that already have a record (so a failed suite without one gets a
# record of its own log's end).
failures_has_suite() {
  [[ -n $FAILURES_FILE && -f $FAILURES_FILE ]] && grep -qE "^--- $1: " "$FAILURES_FILE"
}

failures_print() {
  local file=${1:-$FAILURES_FILE}
  [[ -s $file ]] || return 0
  echo "Failed ($(grep -c '^--- ' "$file")), each with the end of its log:"
  cat "$file"
}

# GoogleTest cases registered with gtest_discover_tests run one per ctest
# test, named Suite.Case: LastTestsFailed.log lists them ("N:Suite.Case") and
# LastTest.log holds each one's output.
failures_from_ctest() {
  local suite=$1 build=$2
  local failed=$build/Testing/Temporary/LastTestsFailed.log
  local all=$build/Testing/Temporary/LastTest.log
  [[ -s $failed ]] || return 1
  local name file out
  while IFS=: read -r _ name; do
    [[ -n $name ]] || continue
    # The file that defines Suite.Case: TEST(Suite, Case) or TEST_F/TEST_P.
    file=$(grep -lE "TEST(_F|_P)?\(${name%%.*}, *${name#*.}\)" "$REPO"/test/unit/*_test.cpp 2>/dev/null | head -n 1)
    out=$(awk -v n="$name" '
      /^[0-9]+\/[0-9]+ Testing: / && substr($0, index($0, " Testing: ") + 10) == n { on = 1; next }
      on && index($0, "\"" n "\" end time") == 1 { on = 0 }
      on { print }' "$all" 2>/dev/null |
      sed -e '/^Command: /d' -e '/^Directory: /d' -e '/^-\{10,\}$/d' |
      tail -n "$FAILURE_LINES")
    failure_add "$suite" "$name${file:+ in test/unit/$(basename "$file")}" "$all" tail "" \
      "${out:-(no output recorded)}"
  done <"$failed"
}

# pg_regress prints one line per test: "test NAME ... FAILED" (15) or
# "not ok N - NAME" (16 on); the diffs file has a "diff ... NAME.out" header
# before each failed test's hunks.
failures_from_pg_regress() {
  local suite=$1 output=$2 diffs=$3 name hunk found=1
  [[ -f $output ]] || return 1
  while read -r name; do
    found=0
    hunk=""
    if [[ -f $diffs ]]; then
      hunk=$(awk -v n="$name" '
        /^diff / { on = ($NF ~ ("/" n "\\.out$")) }
        on { print }' "$diffs" | head -n "$FAILURE_LINES")
    fi
    failure_add "$suite" "$name" "$diffs" head "" "${hunk:-(no diff: see $output)}"
  done < <(sed -nE \
    -e 's/^test ([^ ]+) +\.\.\. +FAILED.*/\1/p' \
    -e 's/^ +([^ ]+) +\.\.\. +FAILED.*/\1/p' \
    -e 's/^not ok +[0-9]+ +[-+] +([^ ]+).*/\1/p' "$output")
  return $found
}

# prove --timer prints "[HH:MM:SS] FILE .... RESULT" per file, and at the end
# a "Test Summary Report" naming every file that failed. A prove that was
# killed (a timeout) prints no report, and not even the line of the file it
# was in: that one has a log and no result. Each test's log is
# LOGDIR/regress_log_NAME.
failures_from_prove() {
  local suite=$1 output=$2 logdir=$3 file base log
  [[ -f $output ]] || return 1
  local -a files=()
  mapfile -t files < <(awk '
    /^Test Summary Report/ { report = 1; next }
    report && /^[^ ]+\.pl +\(/ { print $1 }' "$output")
  if ! grep -qE '^Result: ' "$output"; then
    # Killed (a timeout): no report. A file's line is printed whole once it
    # ended: failed, when what follows its dots is not ok or skipped. prove
    # buffers the line of the file it was in when killed, which has a log
    # of its own (PostgreSQL::Test::Utils makes it at the start) and no line.
    mapfile -t files < <(sed -nE 's/^(\[[0-9:]+\] )?([^ ]+\.pl) \.+ *(.*)$/\2 \3/p' "$output" |
      awk '$2 != "ok" && $2 != "skipped:" && $2 != "skipped" { print $1 }')
    local logfile name
    for logfile in "$logdir"/regress_log_*; do
      [[ -f $logfile ]] || continue
      name=${logfile##*/regress_log_}
      grep -qE "/$name\.pl \.+" "$output" && continue
      files+=("t/$name.pl (killed: the run's time ran out while it ran)")
    done
  fi
  ((${#files[@]})) || return 1
  for file in "${files[@]}"; do
    base=$(basename "${file%% *}" .pl)
    log=$logdir/regress_log_$base
    [[ -f $log ]] || log=""
    if [[ -n $log ]]; then
      # The failed assertions with their diagnostics (the end of a TAP log
      # is the server's shutdown) and what a file that died said (Perl's
      # "... at FILE line N." on a line of its own, not a "#" diagnostic,
      # with the three lines before it); the end of the log when there are
      # none (the file was killed).
      local excerpt
      excerpt=$(awk '
        { ring[NR % 4] = $0 }
        / not ok [0-9]+/ { n = 10 }
        /Looks like|died|BAIL/ { n = n > 1 ? n : 1 }
        n == 0 && !/^(\[[0-9:.]+\]\([0-9.]+s\) )?#/ && / at [^ ]+ line [0-9]+\.?$/ {
          for (i = NR - 3; i < NR; i++) if (i > 0) print ring[i % 4]
          n = 1
        }
        n > 0 { print; n-- }' "$log" | head -n "$FAILURE_LINES")
      if [[ -n $excerpt ]]; then
        failure_add "$suite" "$file" "$log" tail "" "$excerpt"
      else
        failure_add "$suite" "$file" "$log" tail
      fi
    else
      # No log of its own (it died before PostgreSQL::Test::Utils set one up):
      # what prove printed for it.
      failure_add "$suite" "$file" "$output" tail "" \
        "$(grep -F -A "$FAILURE_LINES" "${file%% *}" "$output" | head -n "$FAILURE_LINES")"
    fi
  done
}
