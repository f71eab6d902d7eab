#!/usr/bin/env bash
# Installs what is needed, builds `latentgate` and runs it on its embedded default.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${LG_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" latentgate
exec "$build/cli/latentgate" tokenize --model "$root/assets/deepseek-v3-tokenizer" "$@"
