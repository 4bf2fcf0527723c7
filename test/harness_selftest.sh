#!/usr/bin/env bash
# The test command names what failed: a copy of this checkout with one unit
# test, one regression test, one isolation test and one TAP file broken on
# purpose runs test/run_all.sh, and the lines of its summary above its last
# line ("N passed, N failed") must name each of them, with the end of its log.
#
#   bash test/harness_selftest.sh WORKDIR
#
# Needs root and outbox installed (make install): the copy tests the
# installed module (OUTBOX_SKIP_BUILD=1) and builds only its unit tests.
set -euo pipefail

WORK=${1:?work directory}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COPY=$WORK/checkout
# shellcheck source-path=SCRIPTDIR source=lib/processes.sh
source "$REPO/test/lib/processes.sh"
mkdir -p "$COPY"
chmod 755 "$WORK" # the TAP suite runs as the server's OS user, under the copy
tar -C "$REPO" --exclude=./.git --exclude='./build*' --exclude=./test/results \
  --exclude='*.o' --exclude='*.so' --exclude=./.deps \
  --exclude=./test/kafka/kafka_broker --exclude=./test/kafka/kafka_consume -cf - . |
  tar -C "$COPY" -xf -

# The unit tests of one file are enough to break one (and build in a
# fraction of the time).
find "$COPY/test/unit" -name '*_test.cpp' ! -name uuid7_test.cpp -delete

# One of each, broken the way a real change breaks them.
cat >>"$COPY/test/unit/uuid7_test.cpp" <<'CPP'

namespace outbox {
TEST(HarnessSelftest, BrokenOnPurpose) { EXPECT_EQ(1, 2) << "unit test broken on purpose"; }
}  // namespace outbox
CPP
sed -i '0,/^ t$/s//broken on purpose/' "$COPY/expected/tracing.out"
grep -q '^broken on purpose$' "$COPY/expected/tracing.out" ||
  { echo "harness_selftest: expected/tracing.out has no line ' t' to break" >&2; exit 1; }
spec=$(ls "$COPY"/test/isolation/expected/*.out | head -n 1)
spec_name=$(basename "$spec" .out)
sed -i '1s/^/broken on purpose\n/' "$spec"
sed -i 's/^done_testing();$/is(1, 2, "TAP file broken on purpose");\ndone_testing();/' \
  "$COPY/test/t/000_harness_smoke.pl"
# A TAP file killed the way the run's time budget kills one: its END block
# never runs, so its server stays up unless the run stops it.
cat >"$COPY/test/t/001_harness_killed.pl" <<'PERL'
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use Test::More;
my $node = PostgreSQL::Test::Cluster->new('left_running');
$node->init;
$node->start;
ok(1, 'a server runs');
kill 'KILL', $$;
PERL

# A TAP file that dies mid-way (a reader choking on what it read): the
# summary must show why, not only "exited with 255".
cat >"$COPY/test/t/002_harness_dies.pl" <<'PERL'
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
ok(1, 'a first check passes');
sub read_back { die "TAP file died on purpose: unexpected end of string at lib/Reader.pm line 30.\n" }
read_back();
ok(1, 'never reached');
done_testing();
PERL

LOG=$WORK/run_all.log
status=0
OUTBOX_SKIP_DEPS=1 OUTBOX_SKIP_BUILD=1 OUTBOX_SUITES="unit regression isolation TAP" \
  OUTBOX_TAP_FILES="t/00[0-2]_*.pl" OUTBOX_RUN_BUDGET=1200 OUTBOX_FAILURES_FILE= \
  bash "$COPY/test/run_all.sh" >"$LOG" 2>&1 || status=$?

fail=0
check() { # check DESCRIPTION PATTERN: PATTERN in the summary's lines
  if grep -qE -- "$2" "$WORK/summary"; then
    echo "ok: $1"
  else
    echo "NOT OK: $1 (no line matches /$2/)"
    fail=1
  fi
}
last=$(tail -n 1 "$LOG")
# The summary: from its banner to the end.
awk '/^===== Summary/ { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' "$LOG" >"$WORK/summary"
if ((status == 0)); then echo "NOT OK: the run passed"; fail=1; else echo "ok: the run failed ($status)"; fi
if [[ $last == "0 passed, 4 failed" ]]; then echo "ok: last line '$last'"; else echo "NOT OK: last line '$last'"; fail=1; fi
check "the unit test by name and file" '^--- unit: HarnessSelftest\.BrokenOnPurpose in test/unit/uuid7_test\.cpp'
check "the unit test's output" 'unit test broken on purpose'
check "the regression test by name" '^--- regression: tracing '
check "the regression test's diff" '^    \+broken on purpose|^    -broken on purpose'
check "the isolation test by name" "^--- isolation: $spec_name "
check "the TAP file by name" '^--- TAP: t/000_harness_smoke\.pl '
check "the TAP file's log" 'TAP file broken on purpose'
check "the killed TAP file by name" '^--- TAP: t/001_harness_killed\.pl '
check "the TAP file that died by name" '^--- TAP: t/002_harness_dies\.pl '
check "why the TAP file died" 'TAP file died on purpose'
# Nothing the killed file started is left: no process works in the copy.
mapfile -t left < <(processes_in "$COPY")
if ((${#left[@]} == 0)); then
  echo "ok: nothing the killed TAP file started is left running"
else
  echo "NOT OK: processes left running in $COPY: ${left[*]}"
  ps -o pid,args -p "${left[@]}" || true
  kill -KILL "${left[@]}" 2>/dev/null || true
  fail=1
fi
if ((fail)); then
  echo "----- the run's last 120 lines -----"
  tail -n 120 "$LOG"
  exit 1
fi
echo "harness_selftest: every broken test is named in the summary"
