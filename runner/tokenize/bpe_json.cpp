// tokenizer.json -> BpeModel, refusing what axonn does not reproduce exactly. Every refusal
// names the file, the JSON path and the value, and says what is supported.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/json_reader.hpp"
#include "runner/tokenize/bpe_model.hpp"
#include "runner/tokenize/tokenizer.hpp"
#include "runner/tokenize/unicode.hpp"

namespace axonn::tokenize {
namespace {

constexpr size_t kExcerpt = 80;  // bytes of a value quoted in a message
// Ids index tables of this many entries at most (the largest published vocabularies have
// about 256k): a lone id of two billion would otherwise make a 64 GB table.
constexpr int32_t kMaxTokenIds = 1 << 24;

// A value from the file as a message quotes it: printable ASCII as is (a regex stays
// readable, backslashes included), any other byte as \xNN, at most kExcerpt bytes of it.
std::string quote(std::string_view value) {
  std::string out = "\"";
  for (char c : value.substr(0, kExcerpt)) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7f) {
      out.push_back(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", b);
      out.append(hex);
    }
  }
  out.append("\"");
  if (value.size() > kExcerpt) out.append(" (").append(std::to_string(value.size())).append(" bytes, the first ").append(std::to_string(kExcerpt)).append(")");
  return out;
}

// What Llama 2's and Mistral's tokenizer.json (a SentencePiece model converted) have and
// byte-level BPE has not: the fix is the .model file beside it.
constexpr const char* kSentencePieceFix =
    "; this looks like a SentencePiece model converted to tokenizer.json (Llama 2, Mistral): "
    "give axonn the tokenizer.model beside it";

// The value as a message shows it: a string quoted, anything else by its type.
std::string shown(const JsonValue& v) {
  if (v.is_string()) return quote(v.string());
  if (v.type() == JsonValue::Type::boolean) return v.boolean() ? "true" : "false";
  if (v.is_number()) {
    char text[32];
    std::snprintf(text, sizeof text, "%.15g", v.number());
    return text;
  }
  return v.type_name();
}

class Reader {
 public:
  explicit Reader(const std::string& file) : file_(file) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    std::string m = file_;
    m.append(": ").append(path).append(" ").append(what);
    throw TokenizerError(m);
  }
  [[noreturn]] void unsupported(const std::string& path, const JsonValue& v, const std::string& supported) const {
    unsupported_shown(path, shown(v), supported);
  }
  // A boolean flag with an unsupported value, which may be its default (the member absent).
  [[noreturn]] void unsupported_flag(const JsonValue& obj, const std::string& key, const std::string& path,
                                     bool default_value, const std::string& supported) const {
    const JsonValue* v = obj.is_object() ? obj.find(key) : nullptr;
    std::string value = v != nullptr ? shown(*v) : std::string("absent (default ") + (default_value ? "true)" : "false)");
    unsupported_shown(join(path, key), value, supported);
  }
  [[noreturn]] void unsupported_shown(const std::string& path, const std::string& value, const std::string& supported) const {
    std::string what = "is ";
    what.append(value).append(": axonn supports ").append(supported);
    if (supported.find("; ") == std::string::npos) {
      what.append(" (byte-level BPE as GPT-2, Llama 3 and Qwen 2 ship it); tokenize with Hugging Face tokenizers instead");
    }
    fail(path, what);
  }

  const JsonValue& member(const JsonValue& obj, const std::string& key, const std::string& path) const {
    if (!obj.is_object()) fail(path, std::string("is ").append(obj.type_name()).append(", not an object"));
    const JsonValue* v = obj.find(key);
    if (v == nullptr) fail(join(path, key), "is missing");
    return *v;
  }
  // An optional member: nullptr when absent or null.
  const JsonValue* optional(const JsonValue& obj, const std::string& key) const {
    const JsonValue* v = obj.is_object() ? obj.find(key) : nullptr;
    return v == nullptr || v->is_null() ? nullptr : v;
  }
  const std::string& string(const JsonValue& v, const std::string& path) const {
    if (!v.is_string()) fail(path, std::string("is ").append(v.type_name()).append(", not a string"));
    return v.string();
  }
  bool boolean(const JsonValue& obj, const std::string& key, const std::string& path, bool missing) const {
    const JsonValue* v = optional(obj, key);
    if (v == nullptr) return missing;
    if (v->type() != JsonValue::Type::boolean) fail(join(path, key), std::string("is ").append(v->type_name()).append(", not true or false"));
    return v->boolean();
  }
  int32_t id(const JsonValue& v, const std::string& path) const {
    // Range first: casting a double beyond int64 is undefined.
    if (!v.is_number() || !(v.number() >= 0 && v.number() < kMaxTokenIds) || v.number() != std::floor(v.number())) {
      fail(path, std::string("is ").append(shown(v)).append(": a token id is an integer from 0 to ").append(std::to_string(kMaxTokenIds - 1)));
    }
    return static_cast<int32_t>(v.number());
  }
  // A boolean member that must have the value `want`.
  void require_bool(const JsonValue& obj, const std::string& key, const std::string& path, bool missing, bool want) const {
    if (boolean(obj, key, path, missing) != want) {
      unsupported_flag(obj, key, path, missing, want ? "only true" : "only false");
    }
  }

  static std::string join(const std::string& path, const std::string& key) {
    if (path.empty()) return key;
    std::string out = path;
    out.append(".").append(key);
    return out;
  }
  static std::string index(const std::string& path, size_t i) {
    std::string out = path;
    out.append("[").append(std::to_string(i)).append("]");
    return out;
  }

 private:
  const std::string& file_;
};

// The file's byte-level characters -> bytes; nothing when a character is outside the alphabet.
std::optional<std::string> to_bytes(const std::string& text, const std::array<int, 324>& byte_of) {
  DecodedText d;
  decode_utf8(text, d);
  std::string out;
  out.reserve(d.code_points.size());
  for (char32_t cp : d.code_points) {
    if (cp >= byte_of.size() || byte_of[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(byte_of[cp]));
  }
  return out;
}

void read_pre_tokenizer(const Reader& r, const JsonValue* pre, BpeModel& m) {
  const std::string path = "pre_tokenizer";
  if (pre == nullptr) r.fail(path, "is null: axonn supports ByteLevel, or a Sequence of Split and ByteLevel");
  const std::string& type = r.string(r.member(*pre, "type", path), path + ".type");
  auto byte_level = [&](const JsonValue& b, const std::string& p) {
    m.add_prefix_space = r.boolean(b, "add_prefix_space", p, false);
    return r.boolean(b, "use_regex", p, true);
  };
  if (type == "ByteLevel") {
    if (byte_level(*pre, path)) m.pattern = SplitPattern::gpt2;
    return;
  }
  if (type == "Metaspace") {
    r.unsupported(path + ".type", r.member(*pre, "type", path), std::string("ByteLevel or Sequence").append(kSentencePieceFix));
  }
  if (type != "Sequence") r.unsupported(path + ".type", r.member(*pre, "type", path), "ByteLevel or Sequence");
  const JsonValue& list = r.member(*pre, "pretokenizers", path);
  const std::string lp = path + ".pretokenizers";
  if (!list.is_array() || list.array().size() != 2) {
    r.fail(lp, "is not a list of two (Split, then ByteLevel with use_regex false): the only Sequence axonn supports");
  }
  const JsonValue& split = list.array()[0];
  const std::string sp = Reader::index(lp, 0);
  const JsonValue& split_type = r.member(split, "type", sp);
  if (r.string(split_type, sp + ".type") != "Split") r.unsupported(sp + ".type", split_type, "Split first");
  const JsonValue& pattern = r.member(split, "pattern", sp);
  const JsonValue* regex = pattern.is_object() ? pattern.find("Regex") : nullptr;
  if (regex == nullptr) r.fail(sp + ".pattern", "is not {\"Regex\": ...}: axonn supports the regex patterns of GPT-2, Llama 3 and Qwen 2");
  const std::string& source = r.string(*regex, sp + ".pattern.Regex");
  m.pattern = find_split_pattern(source);
  if (!m.pattern) {
    r.unsupported(sp + ".pattern.Regex", *regex, "the regex patterns of GPT-2, Llama 3 and Qwen 2, character for character");
  }
  const JsonValue& behavior = r.member(split, "behavior", sp);
  if (r.string(behavior, sp + ".behavior") != "Isolated") r.unsupported(sp + ".behavior", behavior, "Isolated");
  r.require_bool(split, "invert", sp, false, false);
  const JsonValue& bl = list.array()[1];
  const std::string bp = Reader::index(lp, 1);
  const JsonValue& bl_type = r.member(bl, "type", bp);
  if (r.string(bl_type, bp + ".type") != "ByteLevel") r.unsupported(bp + ".type", bl_type, "ByteLevel second");
  if (byte_level(bl, bp)) r.unsupported_flag(bl, "use_regex", bp, true, "false after a Split");
  if (m.add_prefix_space) r.unsupported_flag(bl, "add_prefix_space", bp, false, "false after a Split");
}

void read_vocab(const Reader& r, const JsonValue& model, BpeModel& m, const std::array<int, 324>& byte_of,
                int64_t& max_id) {
  const JsonValue& vocab = r.member(model, "vocab", "model");
  if (!vocab.is_object()) r.fail("model.vocab", std::string("is ").append(vocab.type_name()).append(", not an object of token: id"));
  std::vector<std::pair<int32_t, std::string>> by_id;
  by_id.reserve(vocab.object().size());
  for (const auto& [text, value] : vocab.object()) {
    const std::string path = "model.vocab[" + quote(text) + "]";
    const int32_t id = r.id(value, path);
    std::optional<std::string> bytes = to_bytes(text, byte_of);
    if (!bytes) {
      r.fail(path, "has a character outside the byte-level alphabet: not a byte-level BPE vocabulary");
    }
    if (!m.token_ids.emplace(*bytes, id).second) r.fail(path, "is a second token for the same bytes");
    by_id.emplace_back(id, std::move(*bytes));
    max_id = std::max<int64_t>(max_id, id);
  }
  m.tokens.assign(static_cast<size_t>(max_id + 1), std::string());
  m.has_token.assign(static_cast<size_t>(max_id + 1), false);
  for (auto& [id, bytes] : by_id) {
    if (m.has_token[static_cast<size_t>(id)]) {
      r.fail("model.vocab", "gives id " + std::to_string(id) + " to two tokens (" + quote(m.tokens[static_cast<size_t>(id)]) +
                                " and " + quote(bytes) + "): ids must be unique");
    }
    m.has_token[static_cast<size_t>(id)] = true;
    m.tokens[static_cast<size_t>(id)] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = m.token_ids.find(std::string(1, static_cast<char>(b)));
    if (it == m.token_ids.end()) {
      r.fail("model.vocab", "has no token for byte " + std::to_string(b) +
                                ": a byte-level BPE vocabulary has all 256 (byte_fallback is not supported)");
    }
    m.byte_ids[static_cast<size_t>(b)] = it->second;
  }
}

void read_merges(const Reader& r, const JsonValue& model, BpeModel& m, const std::array<int, 324>& byte_of) {
  const JsonValue& merges = r.member(model, "merges", "model");
  if (!merges.is_array()) r.fail("model.merges", std::string("is ").append(merges.type_name()).append(", not a list"));
  m.merges.reserve(merges.array().size());
  int32_t rank = 0;
  for (const JsonValue& merge : merges.array()) {
    const std::string path = Reader::index("model.merges", static_cast<size_t>(rank));
    std::string left, right;
    if (merge.is_string()) {
      const std::string& s = merge.string();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        r.fail(path, "is " + quote(s) + ": a merge is two tokens separated by one space");
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (merge.is_array() && merge.array().size() == 2) {
      left = r.string(merge.array()[0], path + "[0]");
      right = r.string(merge.array()[1], path + "[1]");
    } else {
      r.fail(path, "is neither \"left right\" nor [left, right]");
    }
    const std::optional<std::string> lb = to_bytes(left, byte_of), rb = to_bytes(right, byte_of);
    const auto li = lb ? m.token_ids.find(*lb) : m.token_ids.end();
    const auto ri = rb ? m.token_ids.find(*rb) : m.token_ids.end();
    const auto mi = lb && rb ? m.token_ids.find(*lb + *rb) : m.token_ids.end();
    if (li == m.token_ids.end()) r.fail(path, "names " + quote(left) + ", which is not in model.vocab");
    if (ri == m.token_ids.end()) r.fail(path, "names " + quote(right) + ", which is not in model.vocab");
    if (mi == m.token_ids.end()) r.fail(path, "makes " + quote(left + right) + ", which is not in model.vocab");
    // A repeated pair keeps its last rank, as Hugging Face tokenizers' map does.
    m.merges.insert_or_assign(BpeModel::merge_key(li->second, ri->second), BpeModel::Merge{rank, mi->second});
    ++rank;
  }
}

void read_added_tokens(const Reader& r, const JsonValue* added, BpeModel& m, int64_t& max_id) {
  if (added == nullptr) return;
  if (!added->is_array()) r.fail("added_tokens", std::string("is ").append(added->type_name()).append(", not a list"));
  for (size_t i = 0; i < added->array().size(); ++i) {
    const JsonValue& t = added->array()[i];
    const std::string path = Reader::index("added_tokens", i);
    AddedToken a;
    a.id = r.id(r.member(t, "id", path), path + ".id");
    a.content = r.string(r.member(t, "content", path), path + ".content");
    if (a.content.empty()) r.fail(path + ".content", "is empty");
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) r.require_bool(t, flag, path, false, false);
    // `normalized` matters only with a normalizer: the token is then matched in normalized text.
    if (m.nfc) r.require_bool(t, "normalized", path, false, false);
    for (const AddedToken& other : m.added) {
      if (other.content == a.content) r.fail(path + ".content", "is " + quote(a.content) + " a second time");
      if (other.id == a.id) r.fail(path + ".id", "is " + std::to_string(a.id) + " a second time: ids must be unique");
    }
    const auto u = static_cast<size_t>(a.id);
    if (u < m.has_token.size() && m.has_token[u] && m.tokens[u] != a.content) {
      r.fail(path + ".id", "is " + std::to_string(a.id) + ", the id of model.vocab's " + quote(m.tokens[u]) +
                               " too: ids must be unique");
    }
    max_id = std::max<int64_t>(max_id, a.id);
    m.added.push_back(std::move(a));
  }
}

void require_byte_level_decoder(const Reader& r, const JsonValue* decoder) {
  if (decoder == nullptr) return;
  const JsonValue& type = r.member(*decoder, "type", "decoder");
  if (r.string(type, "decoder.type") != "ByteLevel") r.unsupported("decoder.type", type, "ByteLevel");
}

}  // namespace

std::array<char32_t, 256> byte_level_alphabet() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

BpeModel read_bpe_model(std::string_view json, const std::string& file) {
  const Reader r(file);
  JsonValue root;
  try {
    root = parse_json(json);
  } catch (const JsonError& e) {
    throw TokenizerError(file + ": not valid JSON: " + e.what());
  }
  BpeModel m;
  m.file = file;
  if (!root.is_object()) r.fail("(the document)", "is not an object: not a tokenizer.json");

  const JsonValue& model = r.member(root, "model", "");
  // Files saved by older Hugging Face tokenizers leave the type out; their loader takes a
  // model with merges for BPE, and so does axonn.
  const JsonValue* model_type = r.optional(model, "type");
  if (model_type == nullptr && r.optional(model, "merges") == nullptr) {
    r.fail("model.type", "is missing and model has no merges: axonn supports BPE");
  }
  if (model_type != nullptr && r.string(*model_type, "model.type") != "BPE") r.unsupported("model.type", *model_type, "BPE");
  if (r.boolean(model, "byte_fallback", "model", false)) {
    r.unsupported("model.byte_fallback", *model.find("byte_fallback"), std::string("only false").append(kSentencePieceFix));
  }
  for (const char* absent : {"dropout", "unk_token"}) {
    if (const JsonValue* v = r.optional(model, absent)) r.unsupported(std::string("model.") + absent, *v, "only null");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const JsonValue* v = r.optional(model, affix);
    if (v != nullptr && !(v->is_string() && v->string().empty())) {
      r.unsupported(std::string("model.") + affix, *v, "only null or \"\"");
    }
  }
  m.ignore_merges = r.boolean(model, "ignore_merges", "model", false);

  if (const JsonValue* normalizer = r.optional(root, "normalizer")) {
    const JsonValue& type = r.member(*normalizer, "type", "normalizer");
    if (r.string(type, "normalizer.type") != "NFC") r.unsupported("normalizer.type", type, "null or NFC");
    m.nfc = true;
  }
  read_pre_tokenizer(r, r.optional(root, "pre_tokenizer"), m);
  require_byte_level_decoder(r, r.optional(root, "decoder"));

  std::array<int, 324> byte_of{};
  byte_of.fill(-1);
  const std::array<char32_t, 256> alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) byte_of[alphabet[static_cast<size_t>(b)]] = b;
  int64_t max_id = -1;
  read_vocab(r, model, m, byte_of, max_id);
  read_merges(r, model, m, byte_of);
  read_added_tokens(r, r.optional(root, "added_tokens"), m, max_id);
  m.tokens.resize(static_cast<size_t>(max_id + 1));
  m.has_token.resize(static_cast<size_t>(max_id + 1), false);
  for (const AddedToken& a : m.added) {
    m.tokens[static_cast<size_t>(a.id)] = a.content;
    m.has_token[static_cast<size_t>(a.id)] = true;
    if (a.content == "<|endoftext|>" || a.content == "<|end_of_text|>") {
      if (!m.end_of_document) m.end_of_document = a.id;
    }
  }

  m.description = "tokenizer.json: byte-level BPE, " + std::to_string(max_id + 1) + " ids, ";
  m.description.append(m.pattern ? split_pattern_name(*m.pattern) : "no").append(" pre-tokenizer");
  if (m.nfc) m.description.append(", NFC");
  if (m.ignore_merges) m.description.append(", ignore_merges");
  return m;
}

}  // namespace axonn::tokenize
