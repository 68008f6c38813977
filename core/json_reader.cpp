#include "core/json_reader.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <unordered_set>

#include "core/printable.hpp"

namespace axonn {
namespace {

// How much of a key or a number an error message quotes: messages stay one bounded line.
constexpr size_t kQuotedBytes = 128;
constexpr size_t kScannedKeys = 32;  // objects up to this many keys are scanned for a repeat

}  // namespace

const char* JsonValue::type_name() const {
  switch (type_) {
    case Type::null:
      return "null";
    case Type::boolean:
      return "a boolean";
    case Type::number:
      return "a number";
    case Type::string:
      return "a string";
    case Type::array:
      return "an array";
    case Type::object:
      return "an object";
  }
  return "?";
}

namespace {

[[noreturn]] void wrong_type(const JsonValue& v, const char* wanted) {
  throw JsonError(std::string("expected ") + wanted + ", got " + v.type_name());
}

}  // namespace

bool JsonValue::boolean() const {
  if (type_ != Type::boolean) wrong_type(*this, "a boolean");
  return bool_;
}

double JsonValue::number() const {
  if (type_ != Type::number) wrong_type(*this, "a number");
  return number_;
}

int64_t JsonValue::integer() const {
  if (type_ != Type::number) wrong_type(*this, "an integer");
  if (!integral_) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", number_);
    throw JsonError(std::string("expected an integer, got ") + text);
  }
  return integer_;
}

const std::string& JsonValue::string() const {
  if (type_ != Type::string) wrong_type(*this, "a string");
  return string_;
}

const std::vector<JsonValue>& JsonValue::array() const {
  if (type_ != Type::array) wrong_type(*this, "an array");
  return array_;
}

const std::vector<std::pair<std::string, JsonValue>>& JsonValue::object() const {
  if (type_ != Type::object) wrong_type(*this, "an object");
  return object_;
}

const JsonValue& JsonValue::at(size_t i) const {
  const std::vector<JsonValue>& a = array();
  if (i >= a.size())
    throw JsonError("expected an array of more than " + std::to_string(i) + " elements, got " +
                    std::to_string(a.size()));
  return a[i];
}

const JsonValue* JsonValue::find(const std::string& key) const {
  for (const auto& [k, v] : object())
    if (k == key) return &v;
  return nullptr;
}

const JsonValue& JsonValue::at(const std::string& key) const {
  const JsonValue* v = find(key);
  if (v == nullptr) throw JsonError("no key \"" + escaped_excerpt(key, kQuotedBytes) + "\"");
  return *v;
}

// Recursive descent over the text, one character of lookahead.
class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  JsonValue document() {
    JsonValue v = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw JsonError("malformed JSON at byte " + std::to_string(pos_) + " (line " + std::to_string(line) +
                    ", column " + std::to_string(column) + "): " + what);
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void expect(char c) {
    if (peek() != c || pos_ >= text_.size()) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("expected " + std::string(word));
    pos_ += word.size();
  }

  JsonValue value(int depth) {
    if (depth >= kMaxJsonDepth) fail("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    skip_space();
    JsonValue v;
    if (pos_ >= text_.size()) fail("expected a value, got the end of the text");
    switch (text_[pos_]) {
      case '{':
        v.type_ = JsonValue::Type::object;
        members(v, depth);
        break;
      case '[':
        v.type_ = JsonValue::Type::array;
        elements(v, depth);
        break;
      case '"':
        v.type_ = JsonValue::Type::string;
        v.string_ = string_literal();
        break;
      case 't':
        literal("true");
        v.type_ = JsonValue::Type::boolean;
        v.bool_ = true;
        break;
      case 'f':
        literal("false");
        v.type_ = JsonValue::Type::boolean;
        break;
      case 'n':
        literal("null");
        break;
      default:
        number(v);
    }
    return v;
  }

  void members(JsonValue& v, int depth) {
    expect('{');
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    // Repeated keys: a scan while the object is small, a hash set of its keys once it is not
    // (a tokenizer.json's vocabulary has 150k keys: scanning took 20 s there).
    std::unordered_set<std::string> keys;
    for (;;) {
      skip_space();
      if (peek() != '"') fail("expected a key in double quotes");
      const size_t key_at = pos_;
      std::string key = string_literal();
      bool repeated = false;
      if (v.object_.size() < kScannedKeys) {
        for (const auto& member : v.object_) repeated = repeated || member.first == key;
      } else {
        if (keys.empty())
          for (const auto& member : v.object_) keys.insert(member.first);
        repeated = !keys.insert(key).second;
      }
      if (repeated) {
        pos_ = key_at;
        fail("the key \"" + escaped_excerpt(key, kQuotedBytes) + "\" appears twice in one object");
      }
      skip_space();
      expect(':');
      JsonValue member = value(depth + 1);
      v.object_.emplace_back(std::move(key), std::move(member));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return;
    }
  }

  void elements(JsonValue& v, int depth) {
    expect('[');
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    for (;;) {
      v.array_.push_back(value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return;
    }
  }

  unsigned hex4() {
    if (pos_ + 4 > text_.size()) fail("expected four hex digits after \\u");
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      u <<= 4;
      if (c >= '0' && c <= '9')
        u |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        u |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        u |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("expected four hex digits after \\u");
    }
    return u;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string_literal() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) fail("a string without its closing quote");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        fail("a control character in a string (escape it)");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("a string without its closing quote");
      switch (const char e = text_[pos_++]) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate: its low one must follow
            if (text_.substr(pos_, 2) != "\\u") fail("a high surrogate without its low surrogate");
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("a high surrogate without its low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("a low surrogate without its high surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail(std::string("an unknown escape \\") + escaped_excerpt(std::string(1, e), 1));
      }
    }
  }

  // -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
  void number(JsonValue& v) {
    const size_t start = pos_;
    const auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (digits() == 0) {
      pos_ = start;
      fail("expected a value");
    }
    bool integral = true;
    if (peek() == '.') {
      ++pos_;
      integral = false;
      if (digits() == 0) fail("expected a digit after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      integral = false;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    const std::string token(text_.substr(start, pos_ - start));
    v.type_ = JsonValue::Type::number;
    v.number_ = std::strtod(token.c_str(), nullptr);
    if (!std::isfinite(v.number_)) fail("a number out of range: " + escaped_excerpt(token, kQuotedBytes));
    if (integral) {
      errno = 0;
      const long long i = std::strtoll(token.c_str(), nullptr, 10);
      if (errno == 0) {
        v.integral_ = true;
        v.integer_ = i;
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

JsonValue parse_json(std::string_view text) { return JsonParser(text).document(); }

}  // namespace axonn
