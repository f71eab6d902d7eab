#!/usr/bin/env bash
# Installs what is needed, builds everything and runs the whole test suite.
# This is the command CI runs (.ci/run) and the README's test command.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${LG_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
