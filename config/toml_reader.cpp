#include "config/toml_reader.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "config/config_error.hpp"

namespace axonn {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

// What a value of the wrong kind was, for "must be X, got ...": a string quoted, else its
// type. Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict on "literal" + a
// temporary string.
std::string got(const toml::node& node) {
  if (!node.is_string()) return type_name(node);
  std::string text = "\"";
  text += *node.value_exact<std::string>();
  text += '"';
  return text;
}

std::string describe(const toml::parse_error& e, const std::string& name) {
  std::ostringstream out;
  out << name << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
  return out.str();
}

}  // namespace

TomlReader::TomlReader(const toml::table& table, std::string file, std::string prefix)
    : table_(table), file_(std::move(file)), prefix_(std::move(prefix)) {}

std::string TomlReader::where(const toml::source_region& region) const {
  const auto& begin = region.begin;
  if (begin.line == 0) return file_ + ": command-line override: ";
  return file_ + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column) + ": ";
}

void TomlReader::fail(const toml::node& node, const std::string& key, const std::string& what) const {
  throw ConfigError(where(node) + path(key) + " " + what);
}

void TomlReader::fail(const std::string& key, const std::string& what) const {
  if (const toml::node* node = table_.get(key)) fail(*node, key, what);
  throw ConfigError(file_ + ": " + path(key) + " " + what);
}

bool TomlReader::has(const std::string& key) const { return table_.contains(key); }

bool TomlReader::is_array(const std::string& key) const {
  const toml::node* node = table_.get(key);
  return node != nullptr && node->is_array();
}

const toml::node* TomlReader::find(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  read_.insert(key);
  return table_.get(key);
}

int64_t TomlReader::integer(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  const toml::node* node = find(key);
  if (!node) return fallback;
  const auto v = node->value_exact<int64_t>();
  if (!v) fail(*node, key, "must be an integer, got " + type_name(*node));
  if (*v < min || *v > max)
    fail(*node, key, "= " + std::to_string(*v) + " is out of range; allowed [" + std::to_string(min) + ", " +
                         std::to_string(max) + "]");
  return *v;
}

double TomlReader::number(const std::string& key, double fallback, double min, double max) {
  const toml::node* node = find(key);
  if (!node) return fallback;
  std::optional<double> v;
  if (node->is_integer()) v = static_cast<double>(*node->value_exact<int64_t>());
  if (node->is_floating_point()) v = *node->value_exact<double>();
  if (!v) fail(*node, key, "must be a number, got " + type_name(*node));
  if (!(*v >= min && *v <= max)) {
    std::ostringstream out;
    out << "= " << *v << " is out of range; allowed [" << min << ", " << max << "]";
    fail(*node, key, out.str());
  }
  return *v;
}

bool TomlReader::boolean(const std::string& key, bool fallback) {
  const toml::node* node = find(key);
  if (!node) return fallback;
  const auto v = node->value_exact<bool>();
  if (!v) fail(*node, key, "must be true or false, got " + type_name(*node));
  return *v;
}

std::optional<bool> TomlReader::boolean_or_auto(const std::string& key, std::optional<bool> fallback) {
  const toml::node* node = find(key);
  if (!node) return fallback;
  if (const auto v = node->value_exact<bool>()) return *v;
  if (const auto v = node->value_exact<std::string>(); v && *v == "auto") return std::nullopt;
  std::string message = "must be true, false or \"auto\", got ";
  message += got(*node);
  fail(*node, key, message);
}

std::optional<int64_t> TomlReader::integer_or_auto(const std::string& key, std::optional<int64_t> fallback,
                                                   int64_t min, int64_t max) {
  const toml::node* node = find(key);
  if (!node) return fallback;
  if (const auto v = node->value_exact<std::string>(); v && *v == "auto") return std::nullopt;
  if (!node->is_integer()) {
    std::string message = "must be an integer or \"auto\", got ";
    message += got(*node);
    fail(*node, key, message);
  }
  return integer(key, 0, min, max);
}

std::string TomlReader::string(const std::string& key, const std::string& fallback,
                               const std::vector<std::string>& allowed) {
  const toml::node* node = find(key);
  if (!node) return fallback;
  const auto v = node->value_exact<std::string>();
  if (!v) {
    const bool override = node->source().begin.line == 0;
    fail(*node, key, "must be a string, got " + type_name(*node) +
                         (override ? "; quote it on the command line: " + path(key) + "='\"...\"'" : ""));
  }
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), *v) == allowed.end()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
    fail(*node, key, "= \"" + *v + "\" is not allowed; use one of " + list);
  }
  return *v;
}

std::vector<int64_t> TomlReader::integers(const std::string& key, int64_t min, int64_t max) {
  const toml::node* node = find(key);
  if (!node) return {};
  const toml::array* array = node->as_array();
  if (!array) fail(*node, key, "must be an array of integers, got " + type_name(*node));
  std::vector<int64_t> out;
  for (const auto& item : *array) {
    const auto v = item.value_exact<int64_t>();
    if (!v) fail(item, key, "must hold only integers, got " + type_name(item));
    if (*v < min || *v > max)
      fail(item, key, "holds " + std::to_string(*v) + ", out of range; allowed [" + std::to_string(min) + ", " +
                          std::to_string(max) + "]");
    out.push_back(*v);
  }
  return out;
}

std::vector<std::string> TomlReader::strings(const std::string& key) {
  const toml::node* node = find(key);
  if (!node) return {};
  const toml::array* array = node->as_array();
  if (!array) fail(*node, key, "must be an array of strings, got " + type_name(*node));
  std::vector<std::string> out;
  for (const auto& item : *array) {
    const auto v = item.value_exact<std::string>();
    if (!v) fail(item, key, "must hold only strings, got " + type_name(item));
    out.push_back(*v);
  }
  return out;
}

std::vector<std::vector<TomlReader::Located>> TomlReader::string_lists(const std::string& key) {
  const toml::node* node = find(key);
  if (!node) return {};
  const std::string expected = "must be an array of arrays of strings ([[\"a\", \"b\"], [\"c\"]])";
  const toml::array* outer = node->as_array();
  if (!outer) fail(*node, key, expected + ", got " + type_name(*node));
  std::vector<std::vector<Located>> out;
  for (const auto& item : *outer) {
    const toml::array* inner = item.as_array();
    if (!inner) fail(item, key, expected + "; this element is " + type_name(item));
    auto& list = out.emplace_back();
    for (const auto& leaf : *inner) {
      const auto v = leaf.value_exact<std::string>();
      if (!v) fail(leaf, key, expected + "; this element is " + type_name(leaf));
      list.push_back({*v, where(leaf)});
    }
  }
  return out;
}

TomlReader TomlReader::table(const std::string& key) {
  static const toml::table empty;
  const toml::node* node = find(key);
  if (!node) return TomlReader(empty, file_, path(key));
  const toml::table* sub = node->as_table();
  if (!sub) fail(*node, key, "must be a table ([" + path(key) + "]), got " + type_name(*node));
  return TomlReader(*sub, file_, path(key));
}

std::vector<TomlReader> TomlReader::tables(const std::string& key) {
  const toml::node* node = find(key);
  if (!node) return {};
  const std::string expected = "must be an array of tables ([[" + path(key) + "]] or " + key + " = [{ ... }])";
  const toml::array* array = node->as_array();
  if (!array) fail(*node, key, expected + ", got " + type_name(*node));
  std::vector<TomlReader> out;
  for (const auto& item : *array) {
    const toml::table* sub = item.as_table();
    if (!sub) fail(item, key, expected + "; this element is " + type_name(item));
    out.emplace_back(*sub, file_, path(key) + "[" + std::to_string(out.size()) + "]");
  }
  return out;
}

void TomlReader::finish() const {
  for (const auto& [key, node] : table_) {
    const std::string name(key.str());
    if (read_.count(name)) continue;
    std::string valid, closest;
    size_t best = SIZE_MAX;
    for (const auto& k : known_) {
      valid += (valid.empty() ? "" : ", ") + k;
      const size_t d = edit_distance(name, k);
      if (d < best) best = d, closest = k;
    }
    std::string msg = where(key.source().begin.line ? key.source() : node.source()) + "unknown key '" + path(name) + "'";
    if (best <= std::max<size_t>(2, name.size() / 3)) msg += " (did you mean '" + path(closest) + "'?)";
    msg += "; valid keys" + std::string(prefix_.empty() ? "" : " in [" + prefix_ + "]") + ": " +
           (valid.empty() ? "(none)" : valid);
    throw ConfigError(msg);
  }
}

toml::table parse_toml_file(const std::string& path, const std::string& expected) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ConfigError(path + ": is a directory; name " + expected);
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    if (e.source().begin.line == 0) throw ConfigError(path + ": cannot read: " + std::string(e.description()));
    throw ConfigError(describe(e, path));
  }
  // All defaults is never what a config file is for: an empty file, /dev/null or a wrong path
  // that happened to exist.
  if (table.empty()) throw ConfigError(path + ": holds no settings (empty or only comments); name " + expected);
  return table;
}

toml::table parse_toml_string(const std::string& text, const std::string& name) {
  try {
    return toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    throw ConfigError(describe(e, name));
  }
}

namespace {

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The override's value as a fresh node (no source position): a TOML scalar, else the text.
std::optional<toml::table> scalar_value(const std::string& text) {
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
  if (parsed.size() != 1) return std::nullopt;  // "1\nx = 2": not one value
  toml::table fresh;
  const toml::node& v = *parsed.get("v");
  if (auto i = v.value_exact<int64_t>())
    fresh.insert("v", *i);
  else if (auto d = v.value_exact<double>())
    fresh.insert("v", *d);
  else if (auto b = v.value_exact<bool>())
    fresh.insert("v", *b);
  else if (auto str = v.value_exact<std::string>())
    fresh.insert("v", *str);
  return fresh;  // empty for arrays, tables, dates: the caller rejects them
}

}  // namespace

void apply_overrides(toml::table& table, const std::vector<std::string>& overrides, const std::string& file) {
  for (const auto& item : overrides) {
    const auto bad = [&](const std::string& why) {
      return ConfigError(file + ": command-line override '" + item + "': " + why);
    };
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw bad("expected section.key=value, e.g. training.steps=20");
    const std::string key = trimmed(item.substr(0, eq)), text = trimmed(item.substr(eq + 1));
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
      const size_t dot = key.find('.', start);
      parts.push_back(trimmed(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start)));
      if (parts.back().empty()) throw bad("empty name in key '" + key + "'; expected section.key=value");
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    toml::table* at = &table;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!at->contains(parts[i])) at->insert(parts[i], toml::table{});
      at = (*at)[parts[i]].as_table();
      if (!at) throw bad("'" + parts[i] + "' is a value, not a table");
    }
    std::optional<toml::table> value = scalar_value(text);
    if (!value) {
      value.emplace();
      value->insert("v", text);  // a bare word: a string
    }
    if (value->empty()) throw bad("the value must be an integer, a float, a boolean or a string");
    at->insert_or_assign(parts.back(), std::move(*value->get("v")));
  }
}

}  // namespace axonn
