#!/usr/bin/env node
// The reference side of the tokenizer benchmark: encodes each corpus document
// one by one with the Hugging Face `tokenizers` npm package (run with
// RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false so it uses one thread) and
// prints one JSON object: timing medians, token count and the ids' hash
// (computed the same way as tokenizer_bench.cc).
//
// Usage: node hf_bench.mjs CORPUS.jsonl TOKENIZER_DIR REPS
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const require = createRequire(import.meta.url);
const { Tokenizer } = require('tokenizers');
const [corpusPath, tokenizerDir, repsArg] = process.argv.slice(2);
const reps = Number(repsArg ?? 5);
const docs = readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l).text);
const bytes = docs.reduce((s, d) => s + Buffer.byteLength(d), 0);
const tokenizer = Tokenizer.fromFile(join(tokenizerDir, 'tokenizer.json'));

// FNV-1a over the ids as 32-bit values, in two independent 32-bit lanes.
function hashIds(allIds) {
  let a = 0x811c9dc5, b = 0x01000193 ^ 0x5bd1e995;
  for (const ids of allIds) {
    for (const id of ids) {
      a = Math.imul(a ^ id, 0x01000193) >>> 0;
      b = Math.imul(b ^ (id + 0x9e3779b9), 0x01000193) >>> 0;
    }
    a = Math.imul(a ^ 0xffffffff, 0x01000193) >>> 0;  // document separator
  }
  return a.toString(16).padStart(8, '0') + b.toString(16).padStart(8, '0');
}

async function pass() {
  const all = [];
  const start = process.hrtime.bigint();
  for (const d of docs) {
    const enc = await tokenizer.encode(d, null, { addSpecialTokens: false });
    all.push(enc.getIds());
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  return { seconds, all };
}

const first = await pass();  // warm-up (and the ids)
const times = [];
for (let r = 0; r < reps; r++) times.push((await pass()).seconds);
times.sort((x, y) => x - y);
const median = times[Math.floor(times.length / 2)];
const tokens = first.all.reduce((s, ids) => s + ids.length, 0);
console.log(JSON.stringify({
  seconds: times, median_seconds: median, bytes, tokens, hash: hashIds(first.all),
  mb_per_s: bytes / median / 1e6, tokens_per_s: tokens / median,
}));
