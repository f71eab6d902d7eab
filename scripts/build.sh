#!/usr/bin/env bash
# Configures and builds LatentGate into ./build (or $LG_BUILD_DIR).
# Extra arguments are ninja targets (default: everything).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${LG_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${LG_BUILD_TYPE:-RelWithDebInfo} ${LG_CMAKE_ARGS:-}
fi
ninja -C "$build" "$@"
