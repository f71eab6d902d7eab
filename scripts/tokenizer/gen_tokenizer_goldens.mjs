#!/usr/bin/env node
// Generates the differential goldens that tests/text/tokenizer/ compares
// LatentGate's tokenizer against, using the reference Hugging Face `tokenizers`
// 0.23.2 (npm, pinned in bench/tokenizer/package.json):
//
//   tests/fixtures/tokenizer-differential.json
//     variants of the DeepSeek V3 tokenizer.json (the V3 pre-tokenizer, the V2
//     one, the GPT-2 ByteLevel regex, every Split behaviour with and without
//     invert, ignore_merges, added tokens with lstrip/rstrip/single_word/normalized)
//     and, for each, an adversarial corpus with the reference's ids. For texts
//     that contain added-token strings, `plain_ids` is the reference's encoding
//     with no added tokens at all (what LatentGate's encode() must give) and
//     `ids` the encoding with them (what encodePrompt() with everything trusted
//     must give).
//   tests/fixtures/tokenizer-unicode-probe.json
//     for every code point, whether the reference's regex engine (\p{..}, \s,
//     \w, \d), its Digits pre-tokenizer and its added-token word/space checks
//     accept it, as ranges.
//
// Deterministic: a fixed-seed PRNG, no clock, no environment.
// Usage: (cd bench/tokenizer && npm ci) && node scripts/tokenizer/gen_tokenizer_goldens.mjs
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { buildCorpus, mulberry32 } from './golden_corpus.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const require = createRequire(join(root, 'bench', 'tokenizer', 'package.json'));
const { Tokenizer } = require('tokenizers');
const ucd = join(root, 'bench', 'tokenizer', 'node_modules', '@unicode', 'unicode-16.0.0');

const v3Path = join(root, 'assets', 'deepseek-v3-tokenizer', 'tokenizer.json');
const v3 = JSON.parse(readFileSync(v3Path, 'utf8'));

// --- Tokenizer variants ------------------------------------------------------
// A variant is the V3 tokenizer.json with top-level keys replaced (`patch`), keys
// of `model` replaced (`model_patch`), and added tokens appended
// (`added_tokens_extra`) or removed (`no_added_tokens`). The C++ test applies the
// same patch, so the variant definitions travel inside the golden.
const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false };
const split = (regex, behavior = 'Isolated', invert = false) =>
  ({ type: 'Split', pattern: { Regex: regex }, behavior, invert });

// DeepSeek V2 (and deepseek-llm) pre_tokenizer, as in their tokenizer.json.
// Written with escapes: several of these characters (U+1FBB, U+212A, ...) have
// canonical equivalents that an editor's normalization would silently swap in.
const kV2Letters = 'A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF' +
  '\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5' +
  '\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA' +
  '\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45' +
  '\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE' +
  '\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC' +
  '\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134' +
  '\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE' +
  '\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF' +
  '\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\u{10400}-\u{1044F}\u{104B0}-\u{104D3}' +
  '\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}';
const v2Splits = [
  split('[\r\n]'),
  split('\\s?[' + kV2Letters + ']+'),
  split('\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+'),
  split('\\s+$'),
  split('[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+'),
];
const v2PreTokenizer = {
  type: 'Sequence',
  pretokenizers: [...v2Splits, { type: 'Digits', individual_digits: true }, byteLevel],
};
const v2SplitDigitsPreTokenizer = {
  type: 'Sequence', pretokenizers: [...v2Splits, split('\\p{N}+'), byteLevel],
};
const kV3Big = v3.pre_tokenizer.pretokenizers[2].pattern.Regex;

const extraAddedTokens = (() => {
  // Ids as the library assigns them: a content already in the model
  // vocabulary keeps its id, the others follow the last added token.
  let next = 128815;
  const t = (content, flags) => ({
    id: v3.model.vocab[content] ?? next++, content, single_word: false, lstrip: false, rstrip: false,
    normalized: false, special: true, ...flags,
  });
  return [
    t('<L>', { lstrip: true }),
    t('<R>', { rstrip: true }),
    t('<LR>', { lstrip: true, rstrip: true }),
    t('word', { single_word: true, special: false, normalized: true }),
    t('<sw>', { single_word: true }),
    t(' spaced', { rstrip: true, special: false }),
    t('<ab', { normalized: true, special: false }),
    t('<abc>', {}),
    t('<a', { normalized: true, special: false }),
    t('bc>', {}),
    t('é', { normalized: true, special: false }),
    t('Ġ', { special: true }),
  ];
})();

const variants = [
  { name: 'v3', patch: {}, corpus: 'full' },
  { name: 'v2', patch: { pre_tokenizer: v2PreTokenizer }, corpus: 'medium' },
  { name: 'v2-split-digits', patch: { pre_tokenizer: v2SplitDigitsPreTokenizer }, corpus: 'small' },
  { name: 'gpt2', patch: { pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true } }, corpus: 'medium' },
  { name: 'gpt2-prefix-space', patch: { pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true } }, corpus: 'small' },
  { name: 'v3-prefix-space', patch: { pre_tokenizer: { type: 'Sequence', pretokenizers: [...v3.pre_tokenizer.pretokenizers.slice(0, 3), { ...byteLevel, add_prefix_space: true }] } }, corpus: 'small' },
  { name: 'v3-ignore-merges', patch: {}, model_patch: { ignore_merges: true }, corpus: 'small' },
  { name: 'added-flags', patch: {}, added_tokens_extra: extraAddedTokens, corpus: 'added' },
  { name: 'digits-contiguous', patch: { pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: false }, byteLevel] } }, corpus: 'small' },
  { name: 'split-string', patch: { pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { String: ' ' }, behavior: 'MergedWithNext', invert: false }, byteLevel] } }, corpus: 'small' },
  { name: 'split-anchors', patch: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split('^|$|\\b'), split('(?<=\\s)x*|a{,2}'), byteLevel] } }, corpus: 'small' },
];
for (const behavior of ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous']) {
  for (const invert of [false, true]) {
    variants.push({
      name: `split-${behavior}${invert ? '-invert' : ''}`,
      patch: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split('\\s+|\\p{P}', behavior, invert), split(kV3Big, behavior, invert), byteLevel] } },
      corpus: 'tiny',
    });
  }
}

function materialize(variant, { noAddedTokens = false } = {}) {
  const j = { ...v3, ...variant.patch, model: { ...v3.model, ...(variant.model_patch ?? {}) } };
  j.added_tokens = noAddedTokens ? [] : [...v3.added_tokens, ...(variant.added_tokens_extra ?? [])];
  return Tokenizer.fromString(JSON.stringify(j));
}

// --- Encoding ----------------------------------------------------------------
const addedContents = [...v3.added_tokens, ...extraAddedTokens].map((t) => t.content);
const hasAddedToken = (text) => addedContents.some((c) => text.includes(c));

async function encodeAll(tokenizer, texts) {
  const out = [];
  for (const text of texts) {
    const enc = await tokenizer.encode(text, null, { addSpecialTokens: false });
    out.push(enc.getIds());
  }
  return out;
}

const corpora = await buildCorpus(ucd);
const result = {
  source: 'tokenizers 0.23.2 (npm); scripts/tokenizer/gen_tokenizer_goldens.mjs',
  base: 'assets/deepseek-v3-tokenizer/tokenizer.json',
  variants: [],
  decode: [],
};
for (const variant of variants) {
  const texts = corpora[variant.corpus];
  const full = materialize(variant);
  const plain = materialize(variant, { noAddedTokens: true });
  const ids = await encodeAll(full, texts);
  const cases = [];
  for (let i = 0; i < texts.length; i++) {
    const c = { text: texts[i], ids: ids[i] };
    if (hasAddedToken(texts[i])) {
      c.plain_ids = (await plain.encode(texts[i], null, { addSpecialTokens: false })).getIds();
    }
    cases.push(c);
  }
  const entry = { name: variant.name, patch: variant.patch, cases };
  if (variant.model_patch) entry.model_patch = variant.model_patch;
  if (variant.added_tokens_extra) entry.added_tokens_extra = variant.added_tokens_extra;
  result.variants.push(entry);
  console.log(`${variant.name}: ${cases.length} cases`);
}

// --- Decoding: random id sequences, lossy UTF-8, special tokens ----------------
{
  const tok = materialize(variants[0]);
  const rand = mulberry32(0xdec0de);
  const byteIds = [];  // ids of single-byte tokens, to build broken UTF-8
  const vocab = v3.model.vocab;
  for (const [token, id] of Object.entries(vocab)) if ([...token].length === 1 && id < 128000) byteIds.push(id);
  byteIds.sort((a, b) => a - b);
  const pick = (arr) => arr[Math.floor(rand() * arr.length)];
  for (let n = 0; n < 400; n++) {
    const len = 1 + Math.floor(rand() * 12);
    const ids = [];
    for (let k = 0; k < len; k++) {
      const r = rand();
      if (r < 0.5) ids.push(pick(byteIds));
      else if (r < 0.9) ids.push(Math.floor(rand() * 128000));
      else ids.push(128000 + Math.floor(rand() * 815));
    }
    const skip = n % 2 === 1;
    result.decode.push({ ids, skip_special: skip, text: await tok.decode(ids, skip) });
  }
}

writeFileSync(join(root, 'tests', 'fixtures', 'tokenizer-differential.json'), JSON.stringify(result) + '\n');

// --- Per-code-point probes -----------------------------------------------------
// The byte-level alphabet (GPT-2's bytes_to_unicode): printable Latin-1 maps to
// itself, the other bytes to U+0100 and up. The probe vocabulary gives byte b id b.
function byteChar(b) {
  const printable = (x) => (x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff);
  if (printable(b)) return String.fromCharCode(b);
  let n = 0;
  for (let x = 0; x < b; x++) if (!printable(x)) n++;
  return String.fromCharCode(256 + n);
}
function tokenizerWith(preTokenizer, addedTokens = []) {
  const vocab = {};
  for (let b = 0; b < 256; b++) vocab[byteChar(b)] = b;
  const j = {
    version: '1.0', truncation: null, padding: null, normalizer: null, post_processor: null, decoder: null,
    added_tokens: addedTokens.map((t, i) => ({ id: 256 + i, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true, ...t })),
    pre_tokenizer: preTokenizer,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges: [] },
  };
  return Tokenizer.fromString(JSON.stringify(j));
}

const kChunk = 0x8000;
function* scalarChunks() {
  for (let base = 0; base < 0x110000; base += kChunk) {
    const cps = [];
    for (let cp = base; cp < base + kChunk; cp++) if (cp < 0xd800 || cp > 0xdfff) cps.push(cp);
    yield cps;
  }
}
function toRanges(set) {
  const out = [];
  for (let cp = 0; cp < 0x110000; cp++) {
    if (!set.has(cp)) continue;
    if (out.length && out[out.length - 1][1] === cp - 1) out[out.length - 1][1] = cp;
    else out.push([cp, cp]);
  }
  return out;
}
// A chunk holding each scalar value once goes through Split(Removed): the code
// points that do not come back are the ones the pattern matches.
function probeRemoved(regex) {
  const pt = tokenizerWith(split(regex, 'Removed')).getPreTokenizer();
  const matched = new Set();
  for (const cps of scalarChunks()) {
    const kept = new Set();
    for (const [piece] of pt.preTokenizeString(String.fromCodePoint(...cps))) {
      for (const ch of piece) kept.add(ch.codePointAt(0));
    }
    for (const cp of cps) if (!kept.has(cp)) matched.add(cp);
  }
  return toRanges(matched);
}
// Digits(individual_digits) isolates each numeric code point (Rust's
// char::is_numeric): between two 'a's, a numeric one comes back alone.
function probeDigits() {
  const pt = tokenizerWith({ type: 'Digits', individual_digits: true }).getPreTokenizer();
  const matched = new Set();
  for (const cps of scalarChunks()) {
    const text = cps.map((cp) => 'a' + C(cp)).join('') + 'a';
    for (const [piece] of pt.preTokenizeString(text)) {
      const chars = [...piece];
      if (chars.length === 1 && chars[0] !== 'a') matched.add(chars[0].codePointAt(0));
    }
  }
  return toRanges(matched);
}
const C = (cp) => String.fromCodePoint(cp);
const utf8Len = (cp) => Buffer.byteLength(C(cp), 'utf8');

// Added-token checks. 'word': in `X⟦sw⟧␣` the single_word token is kept only when
// X is not a word character (Rust regex \w). 'space': in `xX⟦L⟧␣` the lstrip
// token swallows X only when X is whitespace (Rust regex \s). The ids are read
// back in order: byte ids are < 256, the token is 256.
async function probeAddedToken(kind) {
  const token = kind === 'word' ? { content: '⟦sw⟧', single_word: true } : { content: '⟦L⟧', lstrip: true };
  const tok = tokenizerWith(byteLevel, [token]);
  const contentBytes = Buffer.byteLength(token.content, 'utf8');
  const result = new Set();
  for (const cps of scalarChunks()) {
    for (let i = 0; i < cps.length; i += 1024) {
      const group = cps.slice(i, i + 1024);
      const prefix = kind === 'word' ? '' : 'x';
      const text = group.map((cp) => prefix + C(cp) + token.content + ' ').join('');
      const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      let k = 0;
      for (const cp of group) {
        k += prefix.length;
        if (kind === 'space' && ids[k] === 256) {
          result.add(cp);  // swallowed: whitespace
          k += 1;
        } else {
          k += utf8Len(cp);
          if (ids[k] === 256) {
            k += 1;
          } else {
            if (kind === 'word') result.add(cp);  // token refused: cp is a word character
            k += contentBytes;
          }
        }
        if (ids[k] !== 0x20) throw new Error(`probe ${kind}: lost track at U+${cp.toString(16)}`);
        k += 1;
      }
    }
  }
  return toRanges(result);
}

const probes = {};
const regexProbes = ['\\p{L}', '\\p{M}', '\\p{N}', '\\p{P}', '\\p{S}', '\\p{Z}', '\\p{C}', '\\s', '\\w', '\\d', '\\p{Alphabetic}', '\\p{White_Space}'];
for (const gc of ['Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'Mn', 'Mc', 'Me', 'Nd', 'Nl', 'No', 'Pc', 'Pd', 'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'Sm', 'Sc', 'Sk', 'So', 'Zs', 'Zl', 'Zp', 'Cc', 'Cf', 'Co', 'Cn']) {
  regexProbes.push(`\\p{${gc}}`);
}
for (const re of regexProbes) {
  probes[`regex:${re}`] = probeRemoved(re);
  console.log(`probe ${re}: ${probes[`regex:${re}`].length} ranges`);
}
probes['digits'] = probeDigits();
console.log(`probe digits: ${probes['digits'].length} ranges`);
probes['added_token_word'] = await probeAddedToken('word');
console.log(`probe added_token_word: ${probes['added_token_word'].length} ranges`);
probes['added_token_space'] = await probeAddedToken('space');
console.log(`probe added_token_space: ${probes['added_token_space'].length} ranges`);

writeFileSync(join(root, 'tests', 'fixtures', 'tokenizer-unicode-probe.json'), JSON.stringify({
  source: 'tokenizers 0.23.2 (npm); scripts/tokenizer/gen_tokenizer_goldens.mjs',
  note: 'ranges [first, last] of the scalar values each check accepts; surrogates are never probed',
  probes,
}) + '\n');
console.log('done');
