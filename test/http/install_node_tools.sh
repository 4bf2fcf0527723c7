#!/bin/bash
# Installs the npm packages the HTTP sink's TAP tests verify webhooks with
# (the Standard Webhooks reference library and the CloudEvents SDK), pinned,
# into a private directory: DIR (default: test/http/node_tools). Nothing is
# installed globally. Run by test/install_deps.sh; the TAP tests find the
# packages through OUTBOX_HTTP_NODE_TOOLS or that default directory.
set -euo pipefail
DIR=${1:-$(cd "$(dirname "$0")" && pwd)/node_tools}
STANDARDWEBHOOKS=1.1.1
CLOUDEVENTS=10.0.0
mkdir -p "$DIR"
if [[ -f $DIR/.installed ]] && [[ $(cat "$DIR/.installed") == "$STANDARDWEBHOOKS $CLOUDEVENTS" ]]; then
  exit 0
fi
cd "$DIR"
[[ -f package.json ]] || echo '{"name": "outbox-http-test-tools", "private": true}' >package.json
npm install --no-audit --no-fund --save-exact --ignore-scripts \
  "standardwebhooks@$STANDARDWEBHOOKS" "cloudevents@$CLOUDEVENTS" >/dev/null
echo "$STANDARDWEBHOOKS $CLOUDEVENTS" >.installed
