#pragma once
// A small, strict command-line parser for the axonn subcommands:
// `--name value`, `--name=value`, boolean `--flag`, and positionals.
// Unknown options are errors that list the valid ones.
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace axonn {

// Bad command line: the message names the argument and what is expected. Exit code 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message, exit_code::bad_input) {}
};

struct OptionSpec {
  std::string name;  // without dashes, e.g. "site"
  bool takes_value = true;
  std::string help;  // one line, shown in usage
};

class Args {
 public:
  // Parses argv[first..argc). A "--" ends option parsing: the rest are positionals.
  Args(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs);

  bool has(const std::string& name) const;
  std::optional<std::string> value(const std::string& name) const;
  std::string required(const std::string& name) const;
  // The value as an integer in [min, max]; UsageError naming the option otherwise.
  std::optional<long> integer(const std::string& name, long min, long max) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positionals_;
};

// "  --site PATH   site config TOML\n" lines for a usage message.
std::string format_options(const std::vector<OptionSpec>& specs);

// "usage: <usage>\n" and format_options(specs), on stdout.
void print_usage(const std::string& usage, const std::vector<OptionSpec>& specs);

// How every command reads its arguments: parses argv against specs (which list "help");
// on --help prints the usage (print_usage) and returns nullopt, and the command returns
// exit_code::ok. A bad argument is Args's UsageError, naming it.
std::optional<Args> parse_or_usage(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs,
                                   const std::string& usage);

}  // namespace axonn
