#!/usr/bin/env bash
# Earlier releases of outbox, built from their commits, for the update tests:
# they install the real 0.1.0 and 0.2.0 libraries, not this checkout's
# library at an older extension version.
#
#   bash test/lib/releases.sh stage DIR COMMIT...   # build each COMMIT into DIR/COMMIT
#   bash test/lib/releases.sh current DIR           # this checkout's build into DIR/current
#
# Each staged directory holds what `make install DESTDIR=...` put there for
# the pg_config on PATH, by where it goes rather than under that tree's
# paths: lib/ (the library, and its bitcode when the server has JIT) and
# extension/ (control file and scripts). OutboxRelease.pm copies them into
# any copy of a PostgreSQL tree of that major, the one under test or a
# private copy of it. A commit's build is kept (DIR/COMMIT/.staged) and
# reused: a release never changes. Needs the git history (a clone, not an
# export) and what the PGXS build needs.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=pg_major.sh
source "$REPO/test/lib/pg_major.sh"
outbox_use_postgres

cmd=${1:?stage or current}
DIR=${2:?directory}
shift 2
mkdir -p "$DIR"

# install_staged SRC OUT: `make install` of SRC, moved into OUT/lib and
# OUT/extension.
install_staged() {
  local src=$1 out=$2 dest
  dest=$(mktemp -d)
  make -C "$src" -s install PG_CONFIG="$PG_CONFIG" DESTDIR="$dest" || { rm -rf "$dest"; return 1; }
  mkdir -p "$out"
  mv "$dest$("$PG_CONFIG" --pkglibdir)" "$out/lib"
  mv "$dest$("$PG_CONFIG" --sharedir)/extension" "$out/extension"
  rm -rf "$dest"
}

case $cmd in
  stage)
    # Two runs on one machine may stage into one kept directory at once.
    exec 9>"$DIR/.lock"
    flock 9
    for commit in "$@"; do
      out=$DIR/$commit
      if [[ -f $out/.staged && -d $out/lib && "$(cat "$out/.staged")" == "$PG_CONFIG" ]]; then
        echo "releases: $commit already built for $PG_CONFIG"
        continue
      fi
      if ! git -C "$REPO" cat-file -e "$commit^{commit}" 2>/dev/null; then
        echo "releases: commit $commit is not in this checkout's history (a shallow clone?)" >&2
        exit 1
      fi
      rm -rf "$out"
      src=$(mktemp -d)
      git -C "$REPO" archive "$commit" | tar -C "$src" -xf -
      echo "releases: building $commit ($(sed -nE "s/^default_version = '(.*)'/\1/p" "$src/outbox.control"))"
      # The release's own Makefile, as it was; warnings are not errors here.
      # Unoptimised and without debug information (CXXFLAGS, to which the
      # Makefile's PG_CXXFLAGS and PGXS's -fPIC are added): the released code
      # does what it did, and the build costs CI a fraction of the CPU.
      if ! make -C "$src" -s -j2 PG_CONFIG="$PG_CONFIG" CXXFLAGS="-O0 -fno-strict-aliasing -fwrapv" \
        >"$src/build.log" 2>&1 ||
        ! install_staged "$src" "$out" >>"$src/build.log" 2>&1; then
        tail -n 40 "$src/build.log" >&2
        rm -rf "$src"
        exit 1
      fi
      rm -rf "$src"
      printf '%s' "$PG_CONFIG" >"$out/.staged"
    done
    ;;
  current)
    out=$DIR/current
    rm -rf "$out"
    install_staged "$REPO" "$out" >/dev/null
    ;;
  *)
    echo "releases: unknown command $cmd" >&2
    exit 2
    ;;
esac
chmod -R a+rX "$DIR"
