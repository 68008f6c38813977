#pragma once
// The pre-tokenizer patterns of the published byte-level BPE tokenizers, each as a scanner over
// code points that gives the matches Oniguruma (Hugging Face tokenizers' regex engine) gives
// for the pattern: leftmost-first alternation, greedy repetition, the (?!\S) lookahead. No
// regex library with \p{..} classes and lookahead is among axonn's dependencies, and a
// scanner is several times faster than a backtracking engine. The three patterns:
//
//   gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//           (GPT-2, and ByteLevel's own regex when use_regex is true)
//   llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+          (Llama 3, cl100k)
//   qwen2   the llama3 pattern with \p{N} in place of \p{N}{1,3}        (Qwen 2, Qwen 2.5, Qwen 3)
//
// Every code point matches one of the alternatives, so the pieces tile the text.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runner/tokenize/unicode.hpp"

namespace axonn::tokenize {

enum class SplitPattern { gpt2, llama3, qwen2 };

// The pattern whose regex source is `regex` exactly, or nothing.
std::optional<SplitPattern> find_split_pattern(std::string_view regex);
const char* split_pattern_regex(SplitPattern pattern);
const char* split_pattern_name(SplitPattern pattern);  // "GPT-2", "Llama 3", "Qwen 2"

// Appends to `pieces` the matches of `pattern` in `text`, in order; they concatenate to text.
// `scratch` is reused between calls.
void split_pretokens(SplitPattern pattern, std::string_view text, DecodedText& scratch,
                     std::vector<std::string_view>& pieces);

}  // namespace axonn::tokenize
