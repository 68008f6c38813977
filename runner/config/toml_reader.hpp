#pragma once
// Strict reading of one TOML table: every key read is checked for type and range, and
// finish() rejects the keys nobody read, naming the valid keys and the closest match.
// Errors carry file:line:column from toml++'s source regions.
#include <toml++/toml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace axonn {

class TomlReader {
 public:
  // table: the table to read; file: its file name for messages; prefix: its dotted path
  // ("training"), empty for the root.
  TomlReader(const toml::table& table, std::string file, std::string prefix);

  bool has(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback, int64_t min, int64_t max);
  double number(const std::string& key, double fallback, double min, double max);  // int or float
  std::string string(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed = {});
  std::vector<int64_t> integers(const std::string& key, int64_t min, int64_t max);
  // The sub-table `key` (an empty one if absent); its keys are checked by its own finish().
  TomlReader table(const std::string& key);
  // Throws ConfigError for the first key that was never read.
  void finish() const;

  // "file:line:column: " for a node, "file: " when it has no source position.
  std::string where(const toml::node& node) const { return where(node.source()); }
  std::string where(const toml::source_region& region) const;

 private:
  const toml::node* find(const std::string& key);
  std::string path(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }
  [[noreturn]] void fail(const toml::node& node, const std::string& key, const std::string& what) const;

  const toml::table& table_;
  std::string file_;
  std::string prefix_;
  std::set<std::string> read_;
  std::vector<std::string> known_;  // every key asked for, in order, for "valid keys" lists
};

// Parses a TOML file; a syntax error becomes a ConfigError with file:line:column.
toml::table parse_toml_file(const std::string& path);
toml::table parse_toml_string(const std::string& text, const std::string& name);

// Applies "a.b.c=value" overrides onto table (value parsed as a TOML value, else taken as
// a string). Throws ConfigError naming the override when it is malformed.
void apply_overrides(toml::table& table, const std::vector<std::string>& overrides);

}  // namespace axonn
