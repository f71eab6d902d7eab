// Side-by-side comparison of our grammar masks with xgrammar's (its WebAssembly
// build, @mlc-ai/web-xgrammar, pinned in bench/grammar/xgrammar/package-lock.json),
// in one run: reads the vocabulary and the masks that grammar_masks wrote,
// builds xgrammar's TokenizerInfo from the same bytes, compiles the same schemas
// with compact separators, walks the same prefixes (token ids), and compares
// every mask; times xgrammar's compile and getNextTokenBitmask per step.
//
// Usage: node xgrammar_compare.mjs --vocab VOCAB.json --schemas DIR
//          [--examples N] [--ebnf] [--json OUT.json] MASKS.jsonl...
//   VOCAB.json    grammar_masks --dump-vocab (hex bytes per id, "" = special/absent)
//   DIR           DIR/NAME.json is the schema of masks file NAME.jsonl (or NAME@CASE.jsonl)
//   --ebnf        print xgrammar's EBNF of each schema
//
// Configuration, alike on both sides:
//   - xgrammar compileJSONSchema(schema, anyWhitespace=false, indent=undefined,
//     separators=[",", ":"], strictMode=true): no white space, {"a":1,"b":[2]};
//   - the vocabulary is our Vocabulary's bytes per id, given to xgrammar in the
//     byte-level (GPT-2) encoding it decodes; ids we never match (special
//     tokens, absent ids) are given as "" which xgrammar treats as special
//     (never allowed); the stop token is <｜end▁of▁sentence｜> on both sides;
//   - compared: every id except the stop token; the stop token bit of
//     xgrammar is compared with our Matcher::canEnd() separately.
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { createReadStream } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
globalThis.require = createRequire(import.meta.url);
globalThis.__filename = join(here, "xgrammar/node_modules/@mlc-ai/web-xgrammar/lib/index.js");
await import(pathToUrl(globalThis.__filename));
const xg = globalThis.xgrammar;

function pathToUrl(p) {
  return new URL("file://" + p).href;
}

const args = process.argv.slice(2);
let vocabPath = null, schemaDir = null, examples = 12, ebnf = false, jsonOut = null;
const maskFiles = [];
for (let i = 0; i < args.length; ++i) {
  if (args[i] === "--vocab") vocabPath = args[++i];
  else if (args[i] === "--schemas") schemaDir = args[++i];
  else if (args[i] === "--examples") examples = Number(args[++i]);
  else if (args[i] === "--ebnf") ebnf = true;
  else if (args[i] === "--json") jsonOut = args[++i];
  else maskFiles.push(args[i]);
}
if (!vocabPath || !schemaDir || maskFiles.length === 0) {
  console.error("usage: node xgrammar_compare.mjs --vocab VOCAB.json --schemas DIR [--examples N] [--ebnf] [--json OUT] MASKS.jsonl...");
  process.exit(64);
}

// GPT-2 bytes_to_unicode: the byte-level encoding xgrammar's BYTE_LEVEL decodes.
const byteToChar = (() => {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; ++b) bs.push(b);
  for (let b = 0xa1; b <= 0xac; ++b) bs.push(b);
  for (let b = 0xae; b <= 0xff; ++b) bs.push(b);
  const map = new Array(256);
  for (const b of bs) map[b] = String.fromCodePoint(b);
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    if (map[b] === undefined) map[b] = String.fromCodePoint(256 + n++);
  }
  return map;
})();

const vocab = JSON.parse(readFileSync(vocabPath, "utf8"));
const tokenBytes = vocab.tokens.map((h) => Buffer.from(h, "hex"));
const encoded = tokenBytes.map((b) => Array.from(b, (x) => byteToChar[x]).join(""));
const eos = vocab.eos;
const size = vocab.size;
const words = Math.ceil(size / 32);

function show(id) {
  const b = tokenBytes[id];
  // JSON string of the bytes, invalid UTF-8 shown as \xNN.
  let s = "";
  const text = b.toString("latin1");
  const utf = Buffer.from(b.toString("utf8"), "utf8");
  if (utf.equals(b)) s = JSON.stringify(b.toString("utf8"));
  else s = '"' + Array.from(text, (c) => { const x = c.charCodeAt(0); return x >= 0x20 && x < 0x7f && c !== '"' && c !== "\\" ? c : "\\x" + x.toString(16).padStart(2, "0"); }).join("") + '"';
  return `${id}:${s}`;
}
function prefixText(prefix) {
  return Buffer.concat(prefix.map((id) => tokenBytes[id])).toString("utf8");
}
// A coarse class of a differing token, to sum the differences by cause.
function tokenClass(id) {
  const b = tokenBytes[id];
  if (b.some((x) => x === 0xc0 || x === 0xc1 || (x >= 0xf5 && x <= 0xf7))) return "byte C0/C1/F5-F7 (never in UTF-8)";
  if (b.some((x) => x < 0x20)) return "raw control character";
  if (b.includes(0x5c)) return "backslash";
  if (/^[0-9]+$/.test(b.toString("latin1"))) return "digits";
  return "other";
}
function pct(v, p) {
  if (v.length === 0) return 0;
  const s = [...v].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}

const t0 = performance.now();
const tokenizerInfo = await xg.TokenizerInfo.createTokenizerInfo(encoded, "byte_level", false, size, [eos]);
const tokenizerMs = performance.now() - t0;
const compiler = await xg.GrammarCompiler.createGrammarCompiler(tokenizerInfo, /*cacheEnabled=*/ false);
console.log(`xgrammar ${"0.1.27"} (WebAssembly, Node ${process.version}): TokenizerInfo of ${size} ids in ${tokenizerMs.toFixed(0)} ms`);

const report = [];
for (const file of maskFiles) {
  // NAME.jsonl or NAME@CASE.jsonl (e.g. hand-written edge prefixes): schema DIR/NAME.json.
  const name = basename(file, ".jsonl");
  const schemaText = readFileSync(join(schemaDir, name.split("@")[0] + ".json"), "utf8");
  if (ebnf) {
    console.log(`--- xgrammar EBNF of ${name}:\n` + (await xg.Testings._jsonSchemaToEBNF(schemaText, false, -1, [",", ":"], true)));
  }
  const c0 = performance.now();
  const compiled = await compiler.compileJSONSchema(schemaText, false, -1, [",", ":"], true);
  const compileMs = performance.now() - c0;
  let matcher = await xg.GrammarMatcher.createGrammarMatcher(compiled, [eos]);
  let accepted = []; // ids the matcher has accepted
  let dead = null;   // a walk xgrammar could not follow: {seed, id}
  const stats = { schema: name, masks: 0, identical: 0, identicalButLead: 0, endAgree: 0, ourCount: 0, xgCount: 0,
    onlyOurs: 0, onlyXg: 0, ourUs: [], xgUs: [], diffs: [], rejected: [], compileMs, ourCompileMs: 0, ourPrepareMs: 0,
    classes: {} };
  const rl = createInterface({ input: createReadStream(file), crlfDelay: Infinity });
  for await (const line of rl) {
    if (!line) continue;
    const rec = JSON.parse(line);
    if (rec.compile_ms !== undefined) {
      stats.ourCompileMs = rec.compile_ms;
      stats.ourPrepareMs = rec.prepare_ms;
      continue;
    }
    const prefix = rec.prefix;
    // Continue from the accepted prefix when this one extends it, else restart.
    const extends_ = accepted.length <= prefix.length && accepted.every((id, i) => prefix[i] === id);
    if (!extends_) {
      matcher.reset();
      accepted = [];
      dead = null;
    }
    if (dead) continue;
    let ok = true;
    for (let i = accepted.length; i < prefix.length; ++i) {
      if (!matcher.acceptToken(prefix[i])) {
        stats.rejected.push({ seed: rec.seed, step: i, token: show(prefix[i]), text: prefixText(prefix.slice(0, i)) });
        dead = { seed: rec.seed };
        ok = false;
        break;
      }
      accepted.push(prefix[i]);
    }
    if (!ok) continue;
    const m0 = performance.now();
    const xmask = await matcher.getNextTokenBitmask();
    stats.xgUs.push((performance.now() - m0) * 1000);
    stats.ourUs.push(rec.us);
    const ours = new Uint32Array(Buffer.from(rec.mask, "base64").buffer.slice(0));
    const ourEnd = rec.can_end;
    const xgEnd = ((xmask[eos >> 5] >>> (eos & 31)) & 1) === 1;
    stats.masks += 1;
    if (ourEnd === xgEnd) stats.endAgree += 1;
    const onlyOurs = [], onlyXg = [];
    for (let w = 0; w < words; ++w) {
      let a = ours[w] >>> 0, b = xmask[w] >>> 0;
      if (w === eos >> 5) { a &= ~(1 << (eos & 31)); b &= ~(1 << (eos & 31)); a >>>= 0; b >>>= 0; }
      if (w === words - 1 && size % 32 !== 0) { const keep = (2 ** (size % 32)) - 1; a = (a & keep) >>> 0; b = (b & keep) >>> 0; }
      stats.ourCount += popcount(a);
      stats.xgCount += popcount(b);
      if (a === b) continue;
      for (let k = 0; k < 32 && w * 32 + k < size; ++k) {
        const x = (a >>> k) & 1, y = (b >>> k) & 1;
        if (x && !y) onlyOurs.push(w * 32 + k);
        if (y && !x) onlyXg.push(w * 32 + k);
      }
    }
    const count = (k, id) => {
      const c = (stats.classes[k] ||= { n: 0, ex: new Set() });
      c.n += 1;
      if (c.ex.size < 6) c.ex.add(show(id));
    };
    for (const id of onlyOurs) count("only ours: " + tokenClass(id), id);
    for (const id of onlyXg) count("only xgrammar: " + tokenClass(id), id);
    const lead = (id) => tokenClass(id).startsWith("byte C0");
    if (!onlyOurs.some((id) => !lead(id)) && !onlyXg.some((id) => !lead(id))) stats.identicalButLead += 1;
    if (onlyOurs.length === 0 && onlyXg.length === 0) stats.identical += 1;
    else {
      stats.onlyOurs += onlyOurs.length;
      stats.onlyXg += onlyXg.length;
      stats.diffs.push({ seed: rec.seed, step: rec.step, text: prefixText(prefix), ourEnd, xgEnd,
        onlyOurs: onlyOurs.length, onlyXg: onlyXg.length,
        onlyOursEx: onlyOurs.slice(0, examples).map(show), onlyXgEx: onlyXg.slice(0, examples).map(show) });
    }
  }
  matcher.dispose();
  compiled.dispose();
  report.push(stats);
}

function popcount(x) {
  x = x - ((x >>> 1) & 0x55555555);
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  return (((x + (x >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
}

console.log("\n| schema | masks compared | identical | identical but for C0/C1/F5-F7 tokens | EOS/canEnd agree | allowed ids (ours / xgrammar, summed) | ids only ours / only xgrammar | walks xgrammar rejected |");
console.log("|---|---:|---:|---:|---:|---:|---:|---:|");
for (const s of report) {
  console.log(`| ${s.schema} | ${s.masks} | ${s.identical} (${(100 * s.identical / Math.max(1, s.masks)).toFixed(1)}%) | ${s.identicalButLead} (${(100 * s.identicalButLead / Math.max(1, s.masks)).toFixed(1)}%) | ${s.endAgree} | ${s.ourCount} / ${s.xgCount} | ${s.onlyOurs} / ${s.onlyXg} | ${s.rejected.length} |`);
}
console.log("\n| schema | ours: compile + prepare | xgrammar: compileJSONSchema | ours: mask p50 / p99 / max (us) | xgrammar (wasm): getNextTokenBitmask p50 / p99 / max (us) |");
console.log("|---|---:|---:|---:|---:|");
for (const s of report) {
  console.log(`| ${s.schema} | ${s.ourCompileMs.toFixed(1)} + ${s.ourPrepareMs.toFixed(1)} ms | ${s.compileMs.toFixed(0)} ms | ${pct(s.ourUs, 0.5).toFixed(1)} / ${pct(s.ourUs, 0.99).toFixed(1)} / ${pct(s.ourUs, 1).toFixed(1)} | ${pct(s.xgUs, 0.5).toFixed(0)} / ${pct(s.xgUs, 0.99).toFixed(0)} / ${pct(s.xgUs, 1).toFixed(0)} |`);
}
for (const s of report) {
  if (s.diffs.length === 0 && s.rejected.length === 0) continue;
  console.log(`\n## ${s.schema}: ${s.diffs.length} masks differ`);
  console.log("(mask, token) pairs by class:");
  for (const [k, v] of Object.entries(s.classes)) console.log(`  ${k}: ${v.n} (e.g. ${[...v.ex].join(" ")})`);
  // One line per distinct difference (same example tokens), with its count.
  const seen = new Map();
  for (const d of s.diffs) {
    const sig = d.onlyOursEx.join(" ") + "|" + d.onlyXgEx.join(" ");
    if (seen.has(sig)) { seen.get(sig).n += 1; continue; }
    seen.set(sig, { d, n: 1 });
  }
  for (const { d, n } of seen.values()) {
    if (n > 1) console.log(`[${n} masks like this one]`);
    console.log(`seed ${d.seed} step ${d.step} after ${JSON.stringify(d.text)} (canEnd ours ${d.ourEnd}, xgrammar ${d.xgEnd})`);
    if (d.onlyOurs) console.log(`  only ours (${d.onlyOurs}): ${d.onlyOursEx.join(" ")}`);
    if (d.onlyXg) console.log(`  only xgrammar (${d.onlyXg}): ${d.onlyXgEx.join(" ")}`);
  }
  for (const r of s.rejected) console.log(`xgrammar rejected seed ${r.seed} step ${r.step}: ${r.token} after ${JSON.stringify(r.text)}`);
}
if (jsonOut) {
  writeFileSync(jsonOut, JSON.stringify(report.map((s) => ({ ...s,
    classes: Object.fromEntries(Object.entries(s.classes).map(([k, v]) => [k, { n: v.n, ex: [...v.ex] }])),
    ourUs: { p50: pct(s.ourUs, 0.5), p99: pct(s.ourUs, 0.99), max: pct(s.ourUs, 1) },
    xgUs: { p50: pct(s.xgUs, 0.5), p99: pct(s.xgUs, 0.99), max: pct(s.xgUs, 1) } })), null, 1));
}
