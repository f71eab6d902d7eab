#!/usr/bin/env bash
# Reproduces docs/benchmarks.md's tokenizer figures: installs the pinned npm
# reference (bench/tokenizer), builds the corpus, builds and runs
# tokenizer_bench (LatentGate vs Hugging Face `tokenizers`, one thread each).
#   scripts/tokenizer/run_bench.sh [BUILD_DIR] [REPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
reps=${2:-5}
if ! dpkg-query -W -f='${Status}' manpages-zh 2>/dev/null | grep -q "install ok installed"; then
  echo "run_bench: manpages-zh is not installed (apt-get install -y manpages-zh); less Chinese text" >&2
fi
(cd "$root/bench/tokenizer" && npm ci --silent)
corpus=$build/tokenizer-corpus.jsonl
mkdir -p "$build"
node "$root/scripts/tokenizer/make_corpus.mjs" "$corpus"
if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
ninja -C "$build" -j2 tokenizer_bench
"$build/bench/tokenizer/tokenizer_bench" --corpus "$corpus" --reps "$reps"
