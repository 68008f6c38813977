#include "runner/tokenize/pretokenize.hpp"

namespace axonn::tokenize {
namespace {

constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The text being scanned: code points and their classes, read past the end as `other`.
struct Scan {
  const std::vector<char32_t>& cps;
  std::vector<CharClass> classes;
  size_t n;

  explicit Scan(const std::vector<char32_t>& code_points) : cps(code_points), n(code_points.size()) {
    classes.reserve(n);
    for (char32_t cp : cps) classes.push_back(char_class(cp));
  }
  char32_t at(size_t i) const { return i < n ? cps[i] : 0; }
  bool is(size_t i, CharClass c) const { return i < n && classes[i] == c; }
  bool is_crlf(size_t i) const { return i < n && (cps[i] == '\r' || cps[i] == '\n'); }
  size_t run(size_t i, CharClass c) const {
    while (i < n && classes[i] == c) ++i;
    return i;
  }
  size_t crlf_run(size_t i) const {
    while (is_crlf(i)) ++i;
    return i;
  }
};

char32_t lower_ascii(char32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// 's 't 're 've 'm 'll 'd at i: the match's length, or 0.
size_t contraction(const Scan& s, size_t i, bool ignore_case) {
  if (s.at(i) != '\'') return 0;
  auto c = [&](size_t k) { return ignore_case ? lower_ascii(s.at(i + k)) : s.at(i + k); };
  const char32_t a = c(1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const char32_t b = c(2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a space i: the whole run when it ends the text, else all but its last
// code point (which then starts the next piece with what follows), else the one code point.
size_t space_run_end(const Scan& s, size_t i) {
  const size_t j = s.run(i, CharClass::space);
  if (j == s.n) return j;
  return j - 1 > i ? j - 1 : j;
}

size_t gpt2_next(const Scan& s, size_t i) {
  if (const size_t len = contraction(s, i, false)) return i + len;
  const size_t after_space = s.at(i) == ' ' ? i + 1 : i;
  if (s.is(after_space, CharClass::letter)) return s.run(after_space, CharClass::letter);
  if (s.is(after_space, CharClass::number)) return s.run(after_space, CharClass::number);
  if (s.is(after_space, CharClass::other)) return s.run(after_space, CharClass::other);
  return space_run_end(s, i);
}

size_t llama3_next(const Scan& s, size_t i, size_t max_digits) {
  if (const size_t len = contraction(s, i, true)) return i + len;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (s.is(i, CharClass::letter)) return s.run(i, CharClass::letter);
  if (!s.is_crlf(i) && !s.is(i, CharClass::number) && s.is(i + 1, CharClass::letter)) {
    return s.run(i + 1, CharClass::letter);
  }
  // \p{N}{1,max_digits}
  if (s.is(i, CharClass::number)) {
    size_t j = i;
    while (j - i < max_digits && s.is(j, CharClass::number)) ++j;
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  const size_t after_space = s.at(i) == ' ' ? i + 1 : i;
  if (s.is(after_space, CharClass::other)) return s.crlf_run(s.run(after_space, CharClass::other));
  // i is a space. \s*[\r\n]+: through the run's last \r or \n, if it has one.
  const size_t j = s.run(i, CharClass::space);
  for (size_t k = j; k > i; --k) {
    if (s.is_crlf(k - 1)) return k;
  }
  return space_run_end(s, i);
}

}  // namespace

std::optional<SplitPattern> find_split_pattern(std::string_view regex) {
  for (SplitPattern p : {SplitPattern::gpt2, SplitPattern::llama3, SplitPattern::qwen2}) {
    if (regex == split_pattern_regex(p)) return p;
  }
  return std::nullopt;
}

const char* split_pattern_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::gpt2: return kGpt2Regex;
    case SplitPattern::llama3: return kLlama3Regex;
    case SplitPattern::qwen2: return kQwen2Regex;
  }
  return "";
}

const char* split_pattern_name(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::gpt2: return "GPT-2";
    case SplitPattern::llama3: return "Llama 3";
    case SplitPattern::qwen2: return "Qwen 2";
  }
  return "";
}

void split_pretokens(SplitPattern pattern, std::string_view text, DecodedText& scratch,
                     std::vector<std::string_view>& pieces) {
  decode_utf8(text, scratch);
  const Scan s(scratch.code_points);
  for (size_t i = 0; i < s.n;) {
    size_t j = 0;
    switch (pattern) {
      case SplitPattern::gpt2: j = gpt2_next(s, i); break;
      case SplitPattern::llama3: j = llama3_next(s, i, 3); break;
      case SplitPattern::qwen2: j = llama3_next(s, i, 1); break;
    }
    if (j <= i) j = i + 1;  // unreachable: every code point matches; never loop
    pieces.push_back(text.substr(scratch.offsets[i], scratch.offsets[j] - scratch.offsets[i]));
    i = j;
  }
}

}  // namespace axonn::tokenize
