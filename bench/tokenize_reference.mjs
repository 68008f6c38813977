// bench_tokenize's reference: transformers.js's tokenizers (npm's @lenml/tokenizers) encoding
// a text file with a tokenizer.json, one thread, best of 3 runs after a warm-up.
//   node bench/tokenize_reference.mjs NODE_PREFIX TOKENIZER_JSON TEXT
// prints one line: "<tokens> <seconds>".
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [prefix, tokenizerPath, textPath] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(prefix), "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(tokenizerPath, "utf8")),
  tokenizerConfig: { tokenizer_class: "PreTrainedTokenizer" },
});
const text = fs.readFileSync(textPath, "utf8");
let best = Infinity;
let tokens = 0;
for (let run = 0; run < 4; ++run) {
  const start = process.hrtime.bigint();
  tokens = tokenizer.encode(text, { add_special_tokens: false }).length;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  if (run > 0) best = Math.min(best, seconds);
}
console.log(`${tokens} ${best}`);
