#!/usr/bin/env bash
# Installs what is needed, builds `latentgate` and runs it on its embedded
# default: the random-weight `demo` model (made under ./data/models/demo at
# first start) answering JSON lines of {"messages": [...]} or {"prompt": ...}
# through the scheduler (`latentgate generate`). Without input on stdin it
# sends two example conversations, batched together. Extra arguments go to
# `generate` (e.g. --json, --cache-dir DIR). The HTTPS gateway replaces this
# with `latentgate serve` (issue 11).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${LG_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" latentgate
model=${LATENTGATE_DATA_DIR:-./data}/models/demo
if [[ ! -f $model/model.safetensors ]]; then
  "$build/cli/latentgate" model init --preset demo --out "$model"
fi
if [[ -t 0 ]]; then
  echo "latentgate: no input on stdin; sending two example requests (random weights: the text is noise)" >&2
  printf '%s\n' \
    '{"messages": [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "List the files."}], "max_tokens": 24}' \
    '{"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}' |
    exec "$build/cli/latentgate" generate --model "$model" "$@"
fi
exec "$build/cli/latentgate" generate --model "$model" "$@"
