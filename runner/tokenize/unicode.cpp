#include "runner/tokenize/unicode.hpp"

#include <algorithm>
#include <array>

#include "runner/tokenize/unicode_tables.hpp"

namespace axonn::tokenize {
namespace {

using tables::CodePointRange;

bool in_ranges(const CodePointRange* ranges, size_t count, char32_t cp) {
  const CodePointRange* end = ranges + count;
  const CodePointRange* it =
      std::upper_bound(ranges, end, cp, [](char32_t c, const CodePointRange& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

CharClass classify_slow(char32_t cp) {
  if (cp >= kInvalidByteBase) return CharClass::other;
  if (in_ranges(tables::letters, tables::letters_count, cp)) return CharClass::letter;
  if (in_ranges(tables::numbers, tables::numbers_count, cp)) return CharClass::number;
  if (in_ranges(tables::white_space, tables::white_space_count, cp)) return CharClass::space;
  return CharClass::other;
}

// Code points below 0x800 (every Latin, Greek, Cyrillic, Hebrew and Arabic letter) by table.
const std::array<CharClass, 0x800>& small_classes() {
  static const std::array<CharClass, 0x800> table = [] {
    std::array<CharClass, 0x800> t{};
    for (char32_t cp = 0; cp < 0x800; ++cp) t[cp] = classify_slow(cp);
    return t;
  }();
  return table;
}

}  // namespace

CharClass char_class(char32_t cp) {
  if (cp < 0x800) return small_classes()[cp];
  return classify_slow(cp);
}

void decode_utf8(std::string_view text, DecodedText& out) {
  out.code_points.clear();
  out.offsets.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    out.offsets.push_back(static_cast<uint32_t>(i));
    const unsigned char b = s[i];
    if (b < 0x80) {
      out.code_points.push_back(b);
      ++i;
      continue;
    }
    // Lead byte -> sequence length and the smallest code point it may encode (no overlongs).
    size_t len = 0;
    char32_t cp = 0, min = 0;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2, cp = b & 0x1F, min = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3, cp = b & 0x0F, min = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4, cp = b & 0x07, min = 0x10000;
    }
    bool ok = len != 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (ok && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (ok) {
      out.code_points.push_back(cp);
      i += len;
    } else {
      out.code_points.push_back(kInvalidByteBase + b);
      ++i;
    }
  }
  out.offsets.push_back(static_cast<uint32_t>(n));
}

namespace {

constexpr char32_t kHangulS = 0xAC00, kHangulL = 0x1100, kHangulV = 0x1161, kHangulT = 0x11A7;
constexpr char32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
constexpr char32_t kHangulNCount = kHangulVCount * kHangulTCount, kHangulSCount = kHangulLCount * kHangulNCount;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300 || cp >= kInvalidByteBase) return 0;
  const auto* end = tables::combining_classes + tables::combining_classes_count;
  const auto* it = std::lower_bound(tables::combining_classes, end, cp,
                                    [](const tables::CombiningClass& c, char32_t v) { return c.code_point < v; });
  return it != end && it->code_point == cp ? it->combining_class : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp < 0xC0) {  // the first canonical decomposition is U+00C0's
    out.push_back(cp);
    return;
  }
  if (cp >= kHangulS && cp < kHangulS + kHangulSCount) {
    const char32_t s = cp - kHangulS;
    out.push_back(kHangulL + s / kHangulNCount);
    out.push_back(kHangulV + (s % kHangulNCount) / kHangulTCount);
    if (s % kHangulTCount != 0) out.push_back(kHangulT + s % kHangulTCount);
    return;
  }
  const auto* end = tables::decompositions + tables::decompositions_count;
  const auto* it = std::lower_bound(tables::decompositions, end, cp,
                                    [](const tables::Decomposition& d, char32_t v) { return d.code_point < v; });
  if (cp < kInvalidByteBase && it != end && it->code_point == cp) {
    decompose(it->first, out);
    if (it->second != 0) decompose(it->second, out);
    return;
  }
  out.push_back(cp);
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (b < 0x300) return 0;  // every second of a composition, Hangul jamo included, is from U+0300
  if (a >= kHangulL && a < kHangulL + kHangulLCount && b >= kHangulV && b < kHangulV + kHangulVCount) {
    return kHangulS + ((a - kHangulL) * kHangulVCount + (b - kHangulV)) * kHangulTCount;
  }
  if (a >= kHangulS && a < kHangulS + kHangulSCount && (a - kHangulS) % kHangulTCount == 0 && b > kHangulT &&
      b < kHangulT + kHangulTCount) {
    return a + (b - kHangulT);
  }
  const auto* end = tables::compositions + tables::compositions_count;
  const auto* it = std::lower_bound(tables::compositions, end, std::pair{a, b},
                                    [](const tables::Composition& c, std::pair<char32_t, char32_t> v) {
                                      return c.first != v.first ? c.first < v.first : c.second < v.second;
                                    });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp >= kInvalidByteBase) {
    out.push_back(static_cast<char>(cp - kInvalidByteBase));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::string nfc(std::string_view text) {
  // Below U+0300 no code point decomposes to anything but itself followed by a combining
  // mark, and none combines: text without a code point from U+0300 up is its own NFC.
  bool trivial = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0xCC) trivial = false;
  }
  if (trivial) return std::string(text);

  DecodedText decoded;
  decode_utf8(text, decoded);
  std::vector<char32_t> d;
  d.reserve(decoded.code_points.size());
  for (char32_t cp : decoded.code_points) decompose(cp, d);
  // Canonical ordering: a stable sort of each run of nonzero combining classes.
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition: each mark composes with the last starter unless blocked (a mark of
  // the same or a higher class, or a starter, stands between them).
  std::vector<char32_t> c;
  c.reserve(d.size());
  size_t starter = SIZE_MAX;
  int last_class = -1;
  for (char32_t cp : d) {
    const int cls = combining_class(cp);
    if (starter != SIZE_MAX && (last_class < cls || (last_class == 0 && c.size() == starter + 1 && cls == 0))) {
      const char32_t composite = compose(c[starter], cp);
      if (composite != 0) {
        c[starter] = composite;
        continue;
      }
    }
    if (cls == 0) {
      starter = c.size();
      last_class = 0;
    } else {
      last_class = cls;
    }
    c.push_back(cp);
  }
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : c) append_utf8(cp, out);
  return out;
}

}  // namespace axonn::tokenize
