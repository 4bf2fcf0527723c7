#!/bin/bash
# Installs the npm packages the HTTP sink's TAP tests verify webhooks with
# (the Standard Webhooks reference library and the CloudEvents SDK), pinned,
# into a private directory: DIR (default: test/http/node_tools). Nothing is
# installed globally. Run by test/install_deps.sh; the TAP tests find the
# packages through OUTBOX_HTTP_NODE_TOOLS or that default directory.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
exec bash "$HERE/../lib/install_npm_pinned.sh" "${1:-$HERE/node_tools}" outbox-http-test-tools \
  standardwebhooks@1.1.1 cloudevents@10.0.0
