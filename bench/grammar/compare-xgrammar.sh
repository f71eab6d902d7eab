#!/usr/bin/env bash
# Side-by-side comparison of our grammar masks with xgrammar's (issue 22), in one run:
# builds grammar_masks, installs the pinned @mlc-ai/web-xgrammar (WebAssembly) if needed,
# writes our masks for random walks (seeds 1..SEEDS, sampled from OUR masks) and hand-written
# edge prefixes over four schemas, then has bench/grammar/xgrammar_compare.mjs compute
# xgrammar's masks on the same token ids and compare. Results: docs/benchmarks.md ("Grammar
# masks against xgrammar").
#
# Usage: bench/grammar/compare-xgrammar.sh [SEEDS (default 8)] [STEPS (default 120)]
# Env: BUILD (default build), OUT (default $BUILD/xgrammar-compare).
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${1:-8}
STEPS=${2:-120}
BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/xgrammar-compare}
HERE=bench/grammar
TOKENIZER=assets/deepseek-v3-tokenizer

nice -n 19 ninja -C "$BUILD" -j1 grammar_masks >/dev/null
if [ ! -f "$HERE/xgrammar/node_modules/@mlc-ai/web-xgrammar/package.json" ]; then
  (cd "$HERE/xgrammar" && npm ci --no-audit --no-fund >/dev/null)
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.jsonl
MASKS="$BUILD/bench/grammar/grammar_masks"
first=1
for schema in shell_tool recursive_ref enum_const_anyof string_formats; do
  dump=()
  # string_formats: walks steer clear of tokens with a backslash (escapes: JSON-valid, which we
  # allow in formats and xgrammar does not) and, late, prefer '@' (else an email's local part,
  # which allows "}", holds them) so that they reach the later properties.
  avoid=()
  if [ "$schema" = string_formats ]; then avoid=(--avoid '\\' --prefer '@'); fi
  "$MASKS" --tokenizer "$TOKENIZER" --schema "$HERE/schemas/$schema.json" --name "$schema" \
    --walk "$SEEDS" --steps "$STEPS" "${dump[@]}" "${avoid[@]}" >"$OUT/$schema.jsonl"
  if [ -f "$HERE/schemas/edge/$schema.txt" ]; then
    "$MASKS" --tokenizer "$TOKENIZER" --schema "$HERE/schemas/$schema.json" --name "$schema@edge" \
      --prefixes "$HERE/schemas/edge/$schema.txt" >"$OUT/$schema@edge.jsonl"
  fi
done
{
  echo "# grammar masks vs xgrammar: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD)"
  echo "# bench/grammar/compare-xgrammar.sh $SEEDS $STEPS; $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
  node "$HERE/xgrammar_compare.mjs" --vocab "$OUT/vocab.json" --schemas "$HERE/schemas" --json "$OUT/report.json" \
    "$OUT"/shell_tool.jsonl "$OUT"/recursive_ref.jsonl "$OUT"/enum_const_anyof.jsonl "$OUT"/string_formats.jsonl \
    "$OUT"/*@edge.jsonl
} | tee "$OUT/summary.md"
echo "summary: $OUT/summary.md"
