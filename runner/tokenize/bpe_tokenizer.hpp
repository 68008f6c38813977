#pragma once
// Hugging Face tokenizer.json byte-level BPE, exactly as GPT-2, Llama 3 (3.1) and Qwen 2 ship
// it (docs/data.md, "Tokenizers"); anything else is refused with the JSON path and the value.
//
// encode: added tokens are cut out of the text first (leftmost, longest), then each piece
// between them is normalized (NFC, if the file says so), split by the pre-tokenizer
// (pretokenize.hpp), and each pre-token merged: its bytes start as one symbol each, and the
// adjacent pair with the lowest merge rank (leftmost on ties) merges until none is in the
// merge list. With ignore_merges, a pre-token that is a token of the vocabulary is that token.
#include <memory>
#include <string>
#include <string_view>

#include "runner/tokenize/tokenizer.hpp"

namespace axonn {

// `json`: the file's text; `file`: its name, for messages.
std::unique_ptr<Tokenizer> load_bpe_tokenizer_json(std::string_view json, const std::string& file);

}  // namespace axonn
