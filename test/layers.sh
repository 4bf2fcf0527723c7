#!/usr/bin/env bash
# The layer order of src/ (src/README.md), checked: no file includes a header
# of a layer above its own, and core/ and sinks/ include no PostgreSQL header
# (they are built and unit-tested without PostgreSQL's include path: CMake's
# outbox_free library would fail to compile too, this names the line).
#
#   bash test/layers.sh [PG_INCLUDEDIR_SERVER]
#
# Prints one line per include that breaks the order and exits 1, or prints
# the number of includes it checked.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_SERVER_INCLUDES=${1:-$( (pg_config --includedir-server 2>/dev/null) || true)}

python3 - "$REPO/src" "$PG_SERVER_INCLUDES" <<'PY'
import os, re, sys

src, pg_inc = sys.argv[1], sys.argv[2]
# Lowest first. A file may include headers of its own layer and of the
# layers below it. src/ itself holds the base (pg_bridge, pg_compat, guc,
# fault_injection) and the module entry, outbox.cpp, which is the top.
ORDER = ["core", "sinks", "base", "shmem", "emit", "catalog", "hooks", "publisher", "entry"]
RANK = {name: i for i, name in enumerate(ORDER)}
FREE = {"core", "sinks"}  # no PostgreSQL header
def layer_of(path):  # path relative to src/
    if path == "outbox.cpp":
        return "entry"
    head, _, rest = path.partition("/")
    if not rest:
        return "base"
    return head if head in RANK else None


include = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
bad = []
checked = 0
for root, _, files in os.walk(src):
    for name in sorted(files):
        if not name.endswith((".cpp", ".hpp", ".h")):
            continue
        full = os.path.join(root, name)
        rel = os.path.relpath(full, src)
        mine = layer_of(rel)
        if mine is None:
            bad.append(f"src/{rel}: in no layer (src/README.md lists the folders)")
            continue
        with open(full, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                m = include.match(line)
                if not m:
                    continue
                quote, target = m.groups()
                checked += 1
                where = f"src/{rel}:{lineno}: #include {quote}{target}{'>' if quote == '<' else chr(34)}"
                if mine in FREE and pg_inc and os.path.exists(os.path.join(pg_inc, target)):
                    bad.append(f"{where}: a PostgreSQL header in {mine}/")
                    continue
                if quote == "<" or not os.path.exists(os.path.join(src, target)):
                    continue  # a system or PostgreSQL header
                theirs = layer_of(target)
                if theirs is None or RANK[theirs] <= RANK[mine]:
                    continue
                bad.append(f"{where}: {mine} includes {theirs}, a layer above it")
for line in bad:
    print(line)
if bad:
    print(f"layers: {len(bad)} includes break the layer order "
          f"({' < '.join(ORDER)}; src/README.md)", file=sys.stderr)
    sys.exit(1)
print(f"layers: {checked} includes keep the order {' < '.join(ORDER)}")
PY
