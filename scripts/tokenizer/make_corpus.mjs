#!/usr/bin/env node
// Builds the tokenizer benchmark corpus from files present on a Debian 12
// machine: English prose (the common licenses and English man pages), source
// code (libstdc++ and Boost headers) and Chinese text (the manpages-zh package
// and Python's cjkencodings UTF-8 test files). Deterministic: sorted file
// lists, fixed byte budgets, files that are not valid UTF-8 skipped.
//
// Output: JSON lines, one {"kind", "path", "text"} document per line.
// Usage: node scripts/tokenizer/make_corpus.mjs OUT.jsonl
// (apt-get install -y manpages-zh for the Chinese man pages.)
import { readdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';

const out = process.argv[2];
if (!out) {
  console.error('usage: make_corpus.mjs OUT.jsonl');
  process.exit(2);
}

// Per-document cap: long headers are cut (at a line end) so that one file does
// not dominate its kind.
const kMaxDocBytes = 64 << 10;
const budgets = { prose: 4 << 20, code: 4 << 20, chinese: 3 << 20 };

function walk(dir, accept) {
  if (!existsSync(dir)) return [];
  const files = [];
  const visit = (d) => {
    let entries;
    try { entries = readdirSync(d, { withFileTypes: true }); } catch { return; }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      const p = join(d, e.name);
      if (e.isDirectory()) visit(p);
      else if (e.isFile() && accept(p)) files.push(p);
    }
  };
  visit(dir);
  return files;
}

const decoder = new TextDecoder('utf-8', { fatal: true });
function readText(path) {
  try {
    let bytes = readFileSync(path);
    if (path.endsWith('.gz')) bytes = gunzipSync(bytes);
    let text = decoder.decode(bytes);
    if (Buffer.byteLength(text) > kMaxDocBytes) {
      text = Buffer.from(text).subarray(0, kMaxDocBytes).toString('utf8');
      const cut = text.lastIndexOf('\n');
      text = cut > 0 ? text.slice(0, cut + 1) : text.replace(/\uFFFD$/, '');
    }
    return text;
  } catch {
    return null;  // not UTF-8, unreadable
  }
}

const docs = [];
function take(kind, paths) {
  let used = 0;
  for (const p of paths) {
    if (used >= budgets[kind]) break;
    const text = readText(p);
    if (!text || text.length < 64) continue;
    docs.push({ kind, path: p, text });
    used += Buffer.byteLength(text);
  }
  console.log(`${kind}: ${used} bytes`);
  if (used < budgets[kind] / 4) console.warn(`warning: little ${kind} text found`);
}

// Interleave sources within a kind so that the budget samples all of them.
function interleave(...lists) {
  const outList = [];
  for (let i = 0; lists.some((l) => i < l.length); i++) for (const l of lists) if (i < l.length) outList.push(l[i]);
  return outList;
}

take('prose', interleave(
  walk('/usr/share/common-licenses', () => true),
  walk('/usr/share/man/man1', (p) => p.endsWith('.gz')),
  walk('/usr/share/man/man8', (p) => p.endsWith('.gz')),
  walk('/usr/share/man/man5', (p) => p.endsWith('.gz')),
));
take('code', interleave(
  walk('/usr/include/c++/12', (p) => !p.includes('/x86_64-linux-gnu/')),
  walk('/usr/include/boost', (p) => p.endsWith('.hpp')),
));
const cjkDirs = ['/usr/lib/python3.11/test/cjkencodings', '/usr/lib/python3/test/cjkencodings'];
for (const base of ['/root/.pyenv/versions', '/usr/local/lib']) {
  if (!existsSync(base)) continue;
  for (const v of readdirSync(base).sort()) cjkDirs.push(join(base, v, 'lib', v.replace(/^(\d+\.\d+).*/, 'python$1'), 'test', 'cjkencodings'));
}
const cjk = [];
for (const d of cjkDirs) {
  const files = walk(d, (p) => p.endsWith('-utf8.txt'));
  if (files.length) { cjk.push(...files); break; }
}
take('chinese', interleave(cjk, walk('/usr/share/man/zh_CN', (p) => p.endsWith('.gz')), walk('/usr/share/man/zh_TW', (p) => p.endsWith('.gz'))));

writeFileSync(out, docs.map((d) => JSON.stringify(d)).join('\n') + '\n');
const total = docs.reduce((s, d) => s + Buffer.byteLength(d.text), 0);
console.log(`wrote ${out}: ${docs.length} documents, ${total} bytes`);
