#pragma once
// What a byte-level BPE tokenizer.json says, checked and in the form encoding needs
// (bpe_json.cpp reads it; bpe_tokenizer.cpp encodes and decodes with it). Tokens are held as
// the raw bytes they stand for, not as the file's byte-level characters (Ġ for a space).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runner/tokenize/pretokenize.hpp"

namespace axonn::tokenize {

struct AddedToken {
  std::string content;
  int32_t id = 0;
};

// Hashes std::string and std::string_view alike, so lookups by a piece of the text need no
// std::string made for them.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename Value>
using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

struct BpeModel {
  std::string file;  // for messages
  // id -> the token's bytes; has_token[id] false where no token has that id.
  std::vector<std::string> tokens;
  std::vector<bool> has_token;
  StringMap<int32_t> token_ids;  // model.vocab, by bytes
  std::array<int32_t, 256> byte_ids{};                 // the one-byte tokens
  struct Merge {
    int32_t rank;    // position in model.merges: lower merges first
    int32_t merged;  // id of the two tokens' concatenation
  };
  std::unordered_map<uint64_t, Merge> merges;  // key: left id << 32 | right id
  bool ignore_merges = false;
  bool nfc = false;
  bool add_prefix_space = false;
  std::optional<SplitPattern> pattern;  // none: a piece between added tokens is one pre-token
  std::vector<AddedToken> added;        // matched in the text before anything else
  std::optional<int32_t> end_of_document;
  std::string description;

  static uint64_t merge_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
};

// The byte-level alphabet (GPT-2's bytes_to_unicode): byte -> the code point that stands for
// it in the file. Printable Latin-1 bytes stand for themselves; the other 68 take 256, 257, ...
std::array<char32_t, 256> byte_level_alphabet();

BpeModel read_bpe_model(std::string_view json, const std::string& file);

}  // namespace axonn::tokenize
