#pragma once
// JSON as the files axonn reads from other programs hold it (a safetensors header, a sharded
// model's index, config.json): RFC 8259, strictly. No JSON library is among the project's
// dependencies, and the documents are small (headers of at most a few MiB), so one parse into a
// tree of values is enough.
//
//   const JsonValue header = parse_json(text);            // JsonError on malformed text
//   const JsonValue& t = header.at("lm_head.weight");     // JsonError naming the missing key
//   int64_t begin = t.at("data_offsets").at(0).integer(); // JsonError on a wrong type
//
// Errors say where (byte offset, line and column) and what was expected; a caller adds the
// file's name. Nesting deeper than kMaxJsonDepth is an error rather than a deep recursion.
// Numbers keep their double value and, where they are integers that fit, their int64 value.
// Strings are UTF-8, \u escapes (surrogate pairs included) decoded; an object keeps its keys
// in file order and rejects a repeated key (which a lying header could use to hide a tensor).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace axonn {

// Malformed JSON, or a value of another type or shape than the caller needs. Exit code 2
// (bad input): the file is the user's.
class JsonError : public Error {
 public:
  explicit JsonError(const std::string& message) : Error(message, exit_code::bad_input) {}
};

inline constexpr int kMaxJsonDepth = 64;

class JsonValue {
 public:
  enum class Type { null, boolean, number, string, array, object };

  Type type() const { return type_; }
  // "null", "a boolean", "a number", "a string", "an array", "an object": for messages.
  const char* type_name() const;

  bool is_null() const { return type_ == Type::null; }
  bool is_object() const { return type_ == Type::object; }
  bool is_array() const { return type_ == Type::array; }
  bool is_string() const { return type_ == Type::string; }
  bool is_number() const { return type_ == Type::number; }

  // The value as that type; JsonError naming what it is otherwise.
  bool boolean() const;
  double number() const;
  // An integral number within int64 (not 1.5, not 1e30); JsonError otherwise.
  int64_t integer() const;
  const std::string& string() const;
  const std::vector<JsonValue>& array() const;
  const std::vector<std::pair<std::string, JsonValue>>& object() const;

  // Array element i; JsonError for an index past the end or a value that is no array.
  const JsonValue& at(size_t i) const;
  // Object member `key`; JsonError naming the key when absent or when this is no object.
  const JsonValue& at(const std::string& key) const;
  // The member or nullptr (this must be an object).
  const JsonValue* find(const std::string& key) const;

 private:
  friend class JsonParser;
  Type type_ = Type::null;
  bool bool_ = false;
  double number_ = 0;
  bool integral_ = false;  // number_ is exactly integer_
  int64_t integer_ = 0;
  std::string string_;
  std::vector<JsonValue> array_;
  std::vector<std::pair<std::string, JsonValue>> object_;
};

// The one value `text` holds (whitespace around it allowed, nothing else after it).
JsonValue parse_json(std::string_view text);

}  // namespace axonn
