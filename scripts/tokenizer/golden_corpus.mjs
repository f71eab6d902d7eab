// The adversarial text corpus of the differential goldens (see
// gen_tokenizer_goldens.mjs). Deterministic: everything random comes from
// mulberry32 with fixed seeds.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const C = (cp) => String.fromCodePoint(cp);
const kCategories = {
  Lu: 'Uppercase_Letter', Ll: 'Lowercase_Letter', Lt: 'Titlecase_Letter', Lm: 'Modifier_Letter',
  Lo: 'Other_Letter', Mn: 'Nonspacing_Mark', Mc: 'Spacing_Mark', Me: 'Enclosing_Mark',
  Nd: 'Decimal_Number', Nl: 'Letter_Number', No: 'Other_Number', Pc: 'Connector_Punctuation',
  Pd: 'Dash_Punctuation', Ps: 'Open_Punctuation', Pe: 'Close_Punctuation', Pi: 'Initial_Punctuation',
  Pf: 'Final_Punctuation', Po: 'Other_Punctuation', Sm: 'Math_Symbol', Sc: 'Currency_Symbol',
  Sk: 'Modifier_Symbol', So: 'Other_Symbol', Zs: 'Space_Separator', Zl: 'Line_Separator',
  Zp: 'Paragraph_Separator', Cc: 'Control', Cf: 'Format', Co: 'Private_Use', Cn: 'Unassigned',
};

export const kWhitespace = [
  0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x20, 0x85, 0xa0, 0x1680, 0x180e,
  0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a,
  0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff, 0x200b, 0x200c, 0x200d, 0x2060, 0x1c,
].map(C);

async function loadCategories(ucd) {
  const out = {};
  for (const [short, long] of Object.entries(kCategories)) {
    const mod = await import(pathToFileURL(join(ucd, 'General_Category', long, 'code-points.mjs')).href);
    out[short] = mod.default;
  }
  return out;
}

function categorySamples(cats, rand) {
  const texts = [];
  const templates = [
    (c) => c, (c) => `a${c}b`, (c) => ` ${c}`, (c) => `${c} `, (c) => `${c}${c}${c}`,
    (c) => `1${c}2`, (c) => `中${c}文`, (c) => `,${c}x`, (c) => `${c}\n`, (c) => `x ${c} y`,
  ];
  for (const [gc, cps] of Object.entries(cats)) {
    const picks = new Set();
    for (let k = 0; k < 6; k++) picks.add(cps[Math.floor((k * cps.length) / 6)]);
    for (let k = 0; k < 4; k++) picks.add(cps[Math.floor(rand() * cps.length)]);
    picks.add(cps[cps.length - 1]);
    let t = 0;
    for (const cp of picks) {
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      texts.push(templates[t++ % templates.length](C(cp)));
      texts.push(templates[t++ % templates.length](C(cp)));
    }
    void gc;
  }
  return texts;
}

function whitespaceCases() {
  const texts = [];
  const tpl = [
    (w) => w, (w) => w + w, (w) => `a${w}b`, (w) => `a${w}`, (w) => `${w}a`, (w) => `a${w}${w}b`,
    (w) => `${w}\n`, (w) => `\n${w}`, (w) => `${w}\r\n`, (w) => `a${w}\n${w}b`, (w) => ` ${w}x`,
    (w) => `${w} x`, (w) => `${w}1`, (w) => `${w}。`, (w) => `${w}中`, (w) => `!${w}`, (w) => `${w}!`,
    (w) => `${w}\u0301`, (w) => `x${w}  `, (w) => `x  ${w}`, (w) => `${w}'s`, (w) => `${w}\u0000`,
  ];
  for (const w of kWhitespace) for (const f of tpl) texts.push(f(w));
  const some = [' ', '\t', '\n', '\r', '\u00a0', '\u3000', '\u2028', '\u0085', '\u180e', '\u200b'];
  for (const a of some) for (const b of some) {
    texts.push(`x${a}${b}y`);
    texts.push(`${a}${b}`);
    texts.push(`x${a}${b}`);
  }
  return texts;
}

function digitCases(cats) {
  const texts = [];
  const nd = cats.Nd;
  const zeros = nd.filter((cp, i) => i === 0 || nd[i - 1] !== cp - 1);
  for (const z of zeros) {
    const ds = Array.from({ length: 10 }, (_, k) => C(z + k));
    texts.push(ds.join(''));
    texts.push(`x${ds.slice(1, 5).join('')}y`);
    texts.push(`${ds[1]} ${ds[2]}${ds[3]}`);
    texts.push(`1${ds[7]}2${ds[8]}34`);
  }
  texts.push('²³', '½¼', '①②③④⑤', 'ⅠⅡⅢⅣ', 'x²', '10½', '๑๒๓๔', '١٢٣٤٥٦٧', '１２３４', '𝟏𝟐𝟑𝟒𝟓', '〇一二三');
  for (let n = 1; n <= 9; n++) texts.push('7'.repeat(n), `a${'5'.repeat(n)}b`, ` ${'3'.repeat(n)} `);
  return texts;
}

const kFixed = [
  // lookahead and newline handling
  'a', ' ', '  ', '   ', 'a ', 'a  ', 'a   b', ' a', '  a', 'a \n', 'a\n ', '\n', '\n\n', '\r', '\r\n',
  '\r\n\r\n', '\n\r', ' \n', '\n ', ' \n ', '  \n  x', '\t\t\n', '\t\tx', 'x\t\t', 'x \u00a0y',
  'x\u00a0\u00a0', 'line\r\nline\r\n\r\n  indented', '  \r\n  \r\n', 'a\n\n\nb', 'a \n \n b',
  ' \r \r x', 'x\r', 'x \r', '\n\t', 'end   ', '   start', 'mid   dle', 'a\u3000\u3000b',
  // the first alternative of the V3 pattern: one ASCII punctuation then ASCII letters
  "'s", "'S", "it's", "IT'S", '"Hello"', '(abc)', '@user', '#tag', '$var', '.NET', '_init_', 'a_b',
  'x.y.z', '--flag', '->', '::', 'a::b', '=>', '"""doc"""', '[a-z]', '{}', '<|>', 'é.é', '.é', '.1',
  '~/path', '`code`', '\\n', 'a\\b', '*ptr', '&ref', '!!x', '?!a', 'x?y', '%d', '^caret', '|pipe',
  '.ab\n', ' .ab', ' ..ab', '..ab', '!.,ab', ',Ǆa', '-ǅ', '.Ⅸ', '-ª', '.ａ',
  // marks
  'e\u0301', '\u0301', ' \u0301', 'a\u0301\u0302\u0303', '1\u0301', '中\u0301', '.\u0301', '\u0301a',
  '\n\u0301', '\u20dd', 'ก\u0e31', 'क्षि', 'שָׁלוֹם', 'مَرْحَبًا', '\u0903', 'x \u0301\u0301y',
  '\t\u0301', '\u00a0\u0301a', '\u3000\u0301', ' \u0301\u0301', '\u0301\u0301 ', '\u200d\u0301',
  // CJK boundaries
  ...[0x4dff, 0x4e00, 0x4e01, 0x9fa5, 0x9fa6, 0x9fff, 0x3040, 0x3041, 0x309f, 0x30a0, 0x30ff, 0x3100,
    0x3005, 0x3007, 0x3400, 0x20000, 0xac00, 0xd7a3, 0xd7ff, 0x0800, 0xff66, 0x30fb, 0x30fc, 0x3099,
    0x31350, 0x2ebf0].flatMap((cp) => {
    const c = C(cp);
    return [c + c, `a${c}b`, `${c}1`, `1${c}`, `${c} `, ` ${c}`, `${c}。`, `${c}中`, `中${c}中`, `${c}\n`, `${c}あ`];
  }),
  // emoji
  '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇯🇵🇺🇸', '👍🏿', '1️⃣#️⃣', '❤️', '❤︎', '🏴󠁧󠁢󠁳󠁣󠁴󠁿', 'a👍b', ' 👍', '👍 ', '😀😀', '\u{1f9d1}\u{200d}\u{1f4bb}',
  // special-token strings as text
  '<｜User｜>hi<｜Assistant｜>', '<｜begin▁of▁sentence｜>', '<｜User', '<｜User｜><｜User｜>',
  'x<｜end▁of▁sentence｜>y', '<|EOT|>', '<｜fim▁hole｜>', ' <｜User｜> ', '<｜tool▁sep｜>\n',
  '<｜<｜User｜>', '<｜Assistant｜>'.repeat(3),
  // odd code points
  '\u0000', 'a\u0000b', '\u0000\u0000', '\u{10ffff}', '\uffff', '\ufffe', '\u{e000}', '\u{f0000}', '\u{e0001}',
  '\u0001\u0002\u001f\u007f', '\u009f', '\u00ad', '\u061c', '\u{1d173}',
];

const kPools = [
  { w: 10, chars: 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ' },
  { w: 3, chars: '0123456789' },
  { w: 4, chars: `!"#$%&'()*+,-./:;<=>?@[\\]^_\`{|}~` },
  { w: 6, chars: ' ' },
  { w: 2, chars: '\n\r\t' },
  { w: 1, chars: kWhitespace.join('') },
  { w: 3, chars: '的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴奇演片' },
  { w: 2, chars: 'あいうえおかきくけこアイウエオカキクケコーッ・' },
  { w: 1, chars: '한국어안녕하세요' },
  { w: 2, chars: 'абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГД' },
  { w: 1, chars: 'αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔ' },
  { w: 1, chars: 'مرحبابالعالم' },
  { w: 1, chars: 'नमस्तेदुनिया' },
  { w: 2, chars: '\u0300\u0301\u0302\u0308\u0327\u064b\u093f\u094d\u0e31\u20dd\u0903' },
  { w: 1, chars: '😀👍🏽🇨🇳\u200d❤️' },
  { w: 1, chars: '²³½①ⅠⅫ٣٤۵७๓１𝟐' },
  { w: 1, chars: '。、，！？：；“”‘’（）《》【】…—～·' },
  { w: 1, chars: '\u0000\u0001\u001b\u007f\u0085\u00ad\u200b\u2060\ufeff\u00a0\u3000' },
];
const kPoolTotal = kPools.reduce((s, p) => s + p.w, 0);

function randomText(rand, maxLen) {
  const len = 1 + Math.floor(rand() * maxLen);
  let s = '';
  let count = 0;
  while (count < len) {
    let r = rand() * kPoolTotal;
    let pool = kPools[0];
    for (const p of kPools) { if (r < p.w) { pool = p; break; } r -= p.w; }
    const chars = [...pool.chars];
    const run = rand() < 0.3 ? 1 + Math.floor(rand() * 6) : 1;
    for (let k = 0; k < run; k++) {
      if (rand() < 0.03) {
        // any scalar value, assigned or not
        let cp = Math.floor(rand() * 0x110000);
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xe000;
        s += C(cp);
      } else {
        s += chars[Math.floor(rand() * chars.length)];
      }
      count++;
    }
  }
  return s;
}

function addedTokenCases(rand) {
  const tokens = ['<L>', '<R>', '<LR>', 'word', '<sw>', ' spaced', '<ab', '<abc>', '<a', 'bc>', 'é', 'Ġ',
    '<｜User｜>', '<｜Assistant｜>', '<｜begin▁of▁sentence｜>'];
  const fillers = ['', ' ', '  ', '\t', '\n', ' \n ', 'x', 'xx ', ' x', 'a_', '_', '1', '中', 'é', '\u00a0', '\u3000', '.'];
  const texts = [
    'a <L> b', 'a   <L>b', '<L>', '  <L>', '<R>   b', '<R>', 'a <LR>  b', '  <LR>  ', '<R> <L>', '<R>  <LR>  <L>',
    'word', 'a word b', 'awordb', 'a wordb', 'words', '_word', 'word_', 'wordword', 'word word', '1word', 'éword',
    '<sw>', 'x<sw>', '<sw>x', ' <sw> ', ' spaced', 'a spaced   x', ' spaced spaced', '<R> spaced', '<ab', '<abc>',
    '<abcd>', '<a', 'bc>', '<abc', 'x<abc>bc>', '<a<ab<abc>', 'café', 'é', 'ée', 'Ġ', 'ĠĠ', 'aĠb', '<R>\n\n<L>',
    '<R><R>', '<L><L>', '   <L>   <L>', '<R>   spaced', '<R>  <sw>', 'x<R> word', ' <L>word',
  ];
  for (let n = 0; n < 150; n++) {
    let s = '';
    const parts = 1 + Math.floor(rand() * 6);
    for (let k = 0; k < parts; k++) {
      s += fillers[Math.floor(rand() * fillers.length)];
      s += tokens[Math.floor(rand() * tokens.length)];
    }
    s += fillers[Math.floor(rand() * fillers.length)];
    texts.push(s);
  }
  return texts;
}

export async function buildCorpus(ucd) {
  const cats = await loadCategories(ucd);
  const rand = mulberry32(20250601);
  const structured = [
    ...categorySamples(cats, rand), ...whitespaceCases(), ...digitCases(cats),
  ];
  const randoms = (n, maxLen, seed) => {
    const r = mulberry32(seed);
    return Array.from({ length: n }, () => randomText(r, maxLen));
  };
  const every = (arr, k) => arr.filter((_, i) => i % k === 0);
  const uniq = (arr) => [...new Set(arr)];
  return {
    full: uniq([...kFixed, ...structured, ...randoms(1500, 120, 1)]),
    medium: uniq([...kFixed, ...every(structured, 3), ...randoms(400, 120, 2)]),
    small: uniq([...kFixed, ...every(structured, 12), ...randoms(150, 100, 3)]),
    tiny: uniq([...every(kFixed, 3), ...every(structured, 40), ...randoms(40, 80, 4)]),
    added: uniq([...addedTokenCases(mulberry32(5)), ...every(kFixed, 4), ...randoms(60, 80, 6)]),
  };
}
