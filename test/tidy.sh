#!/usr/bin/env bash
# clang-tidy (.clang-tidy: the static analyzer's checks) over every C++ file
# the CMake build compiles, with its compile database.
#
#   bash test/tidy.sh [BUILD_DIR]     # default build/, configured by cmake
#
# Exits non-zero when any check reports (they are errors: WarningsAsErrors)
# and prints the reports. Two files at a time.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$REPO/build}
TIDY=$(command -v clang-tidy || command -v clang-tidy-14 || true)
[[ -n $TIDY ]] || { echo "tidy: clang-tidy not found" >&2; exit 1; }
[[ -f $BUILD/compile_commands.json ]] ||
  { echo "tidy: no $BUILD/compile_commands.json (configure with cmake first)" >&2; exit 1; }

# The project's own sources in the database (src/: the unit tests are
# GoogleTest's macros, slow to analyse and not shipped).
mapfile -t FILES < <(python3 - "$BUILD/compile_commands.json" "$REPO" <<'PY'
import json, os, sys
repo = os.path.realpath(sys.argv[2])
seen = set()
for entry in json.load(open(sys.argv[1])):
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    if path.startswith(repo + "/src/"):
        if path not in seen:
            seen.add(path)
            print(path)
PY
)
((${#FILES[@]} > 0)) || { echo "tidy: no project files in the compile database" >&2; exit 1; }
echo "tidy: $("$TIDY" --version | grep -o 'version [0-9.]*') on ${#FILES[@]} files"

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# -Wno-unknown-warning-option: the database holds GCC's flags, and clang
# would report the GCC-only warning options it does not know.
printf '%s\n' "${FILES[@]}" | xargs -P 2 -I{} sh -c \
  '"$1" -p "$2" --quiet --extra-arg=-Wno-unknown-warning-option "$3" >"$4/$(basename "$3").log" 2>&1 || echo "$3" >>"$4/failed"' \
  _ "$TIDY" "$BUILD" {} "$OUT"
if [[ -s $OUT/failed ]]; then
  while read -r f; do
    echo "----- $f -----"
    grep -vE '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter' \
      "$OUT/$(basename "$f").log" || true
  done <"$OUT/failed"
  echo "tidy: $(wc -l <"$OUT/failed") files with reports" >&2
  exit 1
fi
echo "tidy: no reports"
