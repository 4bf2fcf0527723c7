#!/usr/bin/env bash
# Builds the libFuzzer targets in test/fuzz/ (clang, ASan + UBSan) and runs each
# for a bounded time on a scratch copy of its seed corpus (the repository's
# corpus is never written to).
#
#   bash test/fuzz/run.sh [BUILD_DIR]        # default BUILD_DIR: /tmp/outbox-fuzz
#
# Environment knobs (all optional):
#   FUZZ_SECONDS=30   time per target (libFuzzer -max_total_time)
#   FUZZ_JOBS=2       targets fuzzed at once (one core each)
#   FUZZ_TARGETS="names route_match"   a subset (default: every *_fuzz.cpp)
#
# Prints one line per target with the executions run. Exits non-zero if any
# target failed to build, crashed, leaked, hit UB or timed out; the line names
# the crashing input (reproduce with: BUILD_DIR/<target>_fuzz <crash-file>)
# and the full log.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FUZZ_DIR=$REPO/test/fuzz
BUILD_DIR=${1:-/tmp/outbox-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
FUZZ_JOBS=${FUZZ_JOBS:-2}

# --- toolchain: clang 14 plus compiler-rt, which ships libFuzzer ------------------
is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}
missing=()
for pkg in clang libclang-rt-14-dev pkg-config librdkafka-dev libhiredis-dev librabbitmq-dev \
  libnats-dev libmosquitto-dev libcurl4-openssl-dev; do
  is_installed "$pkg" || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
  if ((EUID != 0)); then
    echo "fuzz: missing packages (${missing[*]}) and not root; install them and re-run" >&2
    exit 1
  fi
  echo "fuzz: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
CXX=$(command -v clang++ || command -v clang++-14)

# --- targets: every *_fuzz.cpp, each linked with the PostgreSQL-free code -----
# (src/core and src/sinks, the same list the Makefile and CMake derive from
# the folders), compiled once into a library with the same sanitizers.
if [[ -n "${FUZZ_TARGETS:-}" ]]; then
  read -r -a TARGETS <<<"$FUZZ_TARGETS"
else
  TARGETS=()
  for f in "$FUZZ_DIR"/*_fuzz.cpp; do
    t=$(basename "$f" _fuzz.cpp)
    TARGETS+=("$t")
  done
fi
for t in "${TARGETS[@]}"; do
  if [[ ! -f "$FUZZ_DIR/${t}_fuzz.cpp" ]]; then
    echo "fuzz: unknown target '$t' (no $FUZZ_DIR/${t}_fuzz.cpp)" >&2
    exit 1
  fi
done

# -fno-sanitize-recover: UB must stop the run so libFuzzer saves the input.
# shellcheck disable=SC2054 # the commas belong to -fsanitize=
CXXFLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
  -I"$REPO/src" -I"$FUZZ_DIR")
# Every sink's client library (the Makefile's OPTIONAL_SINKS): the fuzz
# targets cover their option parsers too, built here as CI builds the module.
PC_MODULES=(rdkafka hiredis librabbitmq libnats libmosquitto libcurl libcrypto)
CXXFLAGS+=(-DOUTBOX_WITH_AMQP -DOUTBOX_WITH_NATS -DOUTBOX_WITH_MQTT -DOUTBOX_WITH_HTTP)
read -r -a LIBS <<<"$(pkg-config --cflags --libs "${PC_MODULES[@]}")"

mkdir -p "$BUILD_DIR"
RUN_DIR=$BUILD_DIR/run
rm -rf "$RUN_DIR"
mkdir -p "$RUN_DIR"

# Runs up to FUZZ_JOBS copies of a function at once, one per target; each
# writes its exit status to $RUN_DIR/<target>.<what>-rc.
in_parallel() {
  local what=$1 t
  for t in "${TARGETS[@]}"; do
    while (($(jobs -rp | wc -l) >= FUZZ_JOBS)); do wait -n || true; done
    ( set +e; "$what" "$t"; echo $? >"$RUN_DIR/$t.$what-rc" ) &
  done
  wait
}

# The PostgreSQL-free library: instrumented for coverage (fuzzer-no-link)
# and sanitized, without libFuzzer's main.
build_library() {
  local lib=$BUILD_DIR/lib f o
  rm -rf "$lib"
  mkdir -p "$lib"
  local -a flags=("${CXXFLAGS[@]/-fsanitize=fuzzer,address,undefined/-fsanitize=fuzzer-no-link,address,undefined}")
  for f in "$REPO"/src/core/*.cpp "$REPO"/src/sinks/*.cpp; do
    while (($(jobs -rp | wc -l) >= FUZZ_JOBS)); do wait -n || return 1; done
    o=$lib/$(basename "$f" .cpp).o
    "$CXX" "${flags[@]}" $(pkg-config --cflags "${PC_MODULES[@]}") -c "$f" -o "$o" &
  done
  while (($(jobs -rp | wc -l) > 0)); do wait -n || return 1; done
  ar rcs "$BUILD_DIR/libfree.a" "$lib"/*.o
}

# shellcheck disable=SC2317 # build_one and fuzz_one are called through in_parallel
build_one() {
  local t=$1
  "$CXX" "${CXXFLAGS[@]}" "$FUZZ_DIR/${t}_fuzz.cpp" "$BUILD_DIR/libfree.a" "${LIBS[@]}" \
    -o "$BUILD_DIR/${t}_fuzz" >"$RUN_DIR/$t.build.log" 2>&1
}

# shellcheck disable=SC2317
fuzz_one() {
  local t=$1
  local work=$RUN_DIR/$t
  mkdir -p "$work/corpus" "$work/artifacts"
  if [[ -d "$FUZZ_DIR/corpus/$t" ]]; then cp -r "$FUZZ_DIR/corpus/$t/." "$work/corpus/"; fi
  local dict=()
  [[ -f "$FUZZ_DIR/$t.dict" ]] && dict=(-dict="$FUZZ_DIR/$t.dict")
  # -timeout: one input taking 10 s is a hang; the outer timeout is a backstop
  # in case libFuzzer itself wedges. Leak checking is on by default with ASan.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    timeout -k 10 $((FUZZ_SECONDS + 120)) \
    "$BUILD_DIR/${t}_fuzz" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${dict[@]}" \
    "$work/corpus" >"$work/fuzz.log" 2>&1
}

START=$SECONDS
echo "fuzz: building ${#TARGETS[@]} targets into $BUILD_DIR with $("$CXX" --version | head -n 1)"
if ! build_library >"$RUN_DIR/library.build.log" 2>&1; then
  echo "fuzz: building the PostgreSQL-free library failed:" >&2
  cat "$RUN_DIR/library.build.log" >&2
  exit 1
fi
in_parallel build_one
build_failed=0
for t in "${TARGETS[@]}"; do
  if [[ "$(cat "$RUN_DIR/$t.build_one-rc")" != 0 ]]; then
    echo "fuzz: building $t failed:" >&2
    cat "$RUN_DIR/$t.build.log" >&2
    build_failed=1
  fi
done
((build_failed == 0)) || exit 1
echo "fuzz: built in $((SECONDS - START)) s; fuzzing each target for ${FUZZ_SECONDS} s," \
  "$FUZZ_JOBS at a time"

in_parallel fuzz_one
failed=0
for t in "${TARGETS[@]}"; do
  log=$RUN_DIR/$t/fuzz.log
  rc=$(cat "$RUN_DIR/$t.fuzz_one-rc")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
  # A sanitizer report with a zero exit status would be a harness bug: count it.
  if [[ "$rc" == 0 ]] && ! grep -qE 'ERROR: (Address|Leak|UndefinedBehavior)Sanitizer|runtime error:' "$log"; then
    printf '%-20s PASS  %12s runs\n' "$t" "${runs:-?}"
  else
    failed=1
    reason=$(grep -m1 -oE 'ERROR: [A-Za-z]+Sanitizer: [a-z-]+|runtime error: .*|ERROR: libFuzzer: [a-z-]+|invariant failed: .*' "$log" || echo "exit status $rc")
    printf '%-20s FAIL  %12s runs  %s\n' "$t" "${runs:-?}" "$reason"
    [[ -n "$artifact" ]] && echo "    input: $artifact (reproduce: $BUILD_DIR/${t}_fuzz $artifact)"
    echo "    log:   $log"
  fi
done
echo "fuzz: done in $((SECONDS - START)) s"
exit "$failed"
