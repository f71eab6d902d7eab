#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + AddressSanitizer + UBSan and runs
# each for $1 seconds (default 600) at the same time, one per core.
# LG_FUZZ_TARGETS picks the targets (default: all: tokenizer_fuzz
# chat_template_fuzz http_request_fuzz openai_chat_fuzz openai_completions_fuzz
# openai_responses_fuzz).
# Findings (crash-*, leak-*, timeout-*) land in fuzz-out/<target>/; the corpus
# grows in fuzz-out/<target>/corpus. See docs/fuzzing.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-600}
read -r -a targets <<<"${LG_FUZZ_TARGETS:-tokenizer_fuzz chat_template_fuzz http_request_fuzz openai_chat_fuzz openai_completions_fuzz openai_responses_fuzz}"
build=$root/build-fuzz
LG_EXTRA_PACKAGES="clang libclang-rt-14-dev" "$root/scripts/install-deps.sh"
if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLG_BUILD_FUZZ=ON -DLG_SANITIZE="address;undefined" -DLG_BUILD_TESTS=OFF -DLG_BUILD_BENCH=OFF -DLG_CUDA=OFF
fi
ninja -C "$build" "${targets[@]}"

out=$root/fuzz-out
pids=()
for target in "${targets[@]}"; do
  dir=$out/$target
  mkdir -p "$dir/corpus" "$dir/seeds"
  "$root/tests/fuzz/make_seeds.sh" "$target" "$dir/seeds"
  (cd "$dir" && "$build/tests/fuzz/$target" corpus seeds \
      -max_total_time="$seconds" -max_len=65536 -timeout=20 -rss_limit_mb=4096 \
      -print_final_stats=1 >"$dir/log.txt" 2>&1; echo "exit $?" >>"$dir/log.txt") &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for target in "${targets[@]}"; do
  echo "== $target"; grep -E "^(stat::|#[0-9]+.*DONE|==[0-9]+==ERROR|SUMMARY|exit)" "$out/$target/log.txt" | tail -8
  ls "$out/$target" | grep -E "^(crash|leak|timeout|oom)-" || true
done
exit $status
