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
  // Whether `key` is present and an array: for a key that takes a number or a list.
  bool is_array(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback, int64_t min, int64_t max);
  double number(const std::string& key, double fallback, double min, double max);  // int or float
  bool boolean(const std::string& key, bool fallback);
  // true, false, or the string "auto" (nullopt).
  std::optional<bool> boolean_or_auto(const std::string& key, std::optional<bool> fallback);
  // An integer in [min, max], or the string "auto" (nullopt).
  std::optional<int64_t> integer_or_auto(const std::string& key, std::optional<int64_t> fallback, int64_t min,
                                         int64_t max);
  std::string string(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed = {});
  std::vector<int64_t> integers(const std::string& key, int64_t min, int64_t max);
  std::vector<std::string> strings(const std::string& key);
  // An array of arrays of strings ([["a", "b"], ["c"]]); each string with its "file:line:column: ".
  struct Located {
    std::string value;
    std::string where;
  };
  std::vector<std::vector<Located>> string_lists(const std::string& key);
  // The sub-table `key` (an empty one if absent); its keys are checked by its own finish().
  TomlReader table(const std::string& key);
  // The array of tables `key` ([[section.key]] headers, or key = [{ ... }, { ... }]), empty if
  // absent; each element's keys are checked by its own finish(), its messages say key[i].
  std::vector<TomlReader> tables(const std::string& key);
  // Throws ConfigError for the first key that was never read.
  void finish() const;

  // "file:line:column: " for a node, "file: command-line override: " when it has no source
  // position (it came from an override).
  std::string where(const toml::node& node) const { return where(node.source()); }
  std::string where(const toml::source_region& region) const;
  // Throws ConfigError "<where key is>prefix.key what"; "file: " when the key is absent.
  // For checks across keys (model.heads must divide model.hidden).
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

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

// Parses a TOML file; a syntax error becomes a ConfigError with file:line:column. So does a
// path that is a directory or a file with no keys (empty, /dev/null), naming `expected`
// ("a job TOML, e.g. job_templates/tiny.toml") as the fix.
toml::table parse_toml_file(const std::string& path, const std::string& expected);
toml::table parse_toml_string(const std::string& text, const std::string& name);

// Applies "a.b.c=value" overrides onto table. The value is read as a TOML integer, float,
// boolean or quoted string, else taken as a bare string (training.dtype=float32); quote it to
// force a string (run.dir='"2024"'). Spaces around key and value are ignored. The new values
// carry no source position, so errors about them say "command-line override". Throws
// ConfigError "file: command-line override '<item>': ..." when an item is malformed.
void apply_overrides(toml::table& table, const std::vector<std::string>& overrides, const std::string& file);

}  // namespace axonn
