#include "runner/cli/args.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace axonn {
namespace {

const OptionSpec* find_spec(const std::vector<OptionSpec>& specs, const std::string& name) {
  auto it = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == name; });
  return it == specs.end() ? nullptr : &*it;
}

std::string valid_names(const std::vector<OptionSpec>& specs) {
  std::string out;
  for (const auto& s : specs) out += (out.empty() ? "--" : ", --") + s.name;
  return out.empty() ? "(none)" : out;
}

}  // namespace

Args::Args(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--") {
      positionals_.insert(positionals_.end(), argv.begin() + static_cast<long>(i) + 1, argv.end());
      break;
    }
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      positionals_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const OptionSpec* spec = find_spec(specs, name);
    if (!spec) throw UsageError("unknown option '--" + name + "'; valid options: " + valid_names(specs));
    if (!spec->takes_value) {
      if (inline_value) throw UsageError("option '--" + name + "' takes no value (got '" + *inline_value + "')");
      values_[name] = "";
    } else if (inline_value) {
      values_[name] = *inline_value;
    } else {
      if (i + 1 >= argv.size()) throw UsageError("option '--" + name + "' needs a value");
      values_[name] = argv[++i];
    }
  }
}

bool Args::has(const std::string& name) const { return values_.count(name) != 0; }

std::optional<std::string> Args::value(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::required(const std::string& name) const {
  auto v = value(name);
  if (!v || v->empty()) throw UsageError("missing required option '--" + name + "'");
  return *v;
}

std::optional<long> Args::integer(const std::string& name, long min, long max) const {
  auto v = value(name);
  if (!v) return std::nullopt;
  long parsed = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), parsed);
  if (ec != std::errc() || end != v->data() + v->size())
    throw UsageError("option '--" + name + "' needs an integer, got '" + *v + "'");
  if (parsed < min || parsed > max)
    throw UsageError("option '--" + name + "' must be in [" + std::to_string(min) + ", " + std::to_string(max) +
                     "], got " + *v);
  return parsed;
}

std::string format_options(const std::vector<OptionSpec>& specs) {
  std::string out;
  for (const auto& s : specs) {
    std::string left = "  --" + s.name + (s.takes_value ? " VALUE" : "");
    left.resize(std::max<size_t>(left.size() + 2, 26), ' ');
    out += left + s.help + "\n";
  }
  return out;
}

void print_usage(const std::string& usage, const std::vector<OptionSpec>& specs) {
  std::printf("usage: %s\n%s", usage.c_str(), format_options(specs).c_str());
}

std::optional<Args> parse_or_usage(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs,
                                   const std::string& usage) {
  Args args(argv, specs);
  if (!args.has("help")) return args;
  print_usage(usage, specs);
  return std::nullopt;
}

}  // namespace axonn
