#!/usr/bin/env bash
# Installs what is needed, builds `latentgate` and runs the gateway on its
# embedded default: `latentgate serve` with data under ./data (the random-weight
# demo model, a local certificate authority and an admin key made at first
# start) on https://127.0.0.1:8443, until Ctrl-C. It prints the URL, where the
# admin key is and copy-paste examples. Extra arguments go to `serve`
# (--listen HOST:PORT, --model DIR, --data-dir DIR, --config FILE).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${LG_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" latentgate
exec "$build/cli/latentgate" serve "$@"
