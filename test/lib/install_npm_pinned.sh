#!/bin/bash
# Installs pinned npm packages into a private directory, once: nothing is
# installed globally, and a directory already holding exactly these pins is
# left alone (its .installed stamp lists them).
#
#   bash test/lib/install_npm_pinned.sh DIR NAME PACKAGE@VERSION...
#
# NAME names the directory's private package.json. Used by
# test/http/install_node_tools.sh and bench/install_node_tools.sh.
set -euo pipefail
DIR=${1:?directory} NAME=${2:?package name}
shift 2
mkdir -p "$DIR"
if [[ -f $DIR/.installed ]] && [[ $(cat "$DIR/.installed") == "$*" ]]; then
  exit 0
fi
cd "$DIR"
[[ -f package.json ]] || echo "{\"name\": \"$NAME\", \"private\": true}" >package.json
npm install --no-audit --no-fund --save-exact --ignore-scripts "$@" >/dev/null
echo "$*" >.installed
