#include "config/hostlist.hpp"

#include <cstdint>

#include "config/config_error.hpp"

namespace axonn {
namespace {

[[noreturn]] void bad(const std::string& expression, const std::string& why) {
  throw ConfigError("host list \"" + expression + "\": " + why +
                    "; write names like \"nid[001-016,020]\" or \"gpu01,gpu02\"");
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// "001-003,7" -> {"001", "002", "003", "7"}
std::vector<std::string> expand_ranges(const std::string& body, const std::string& expression) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    const size_t comma = std::min(body.find(',', start), body.size());
    const std::string item = body.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
      bad(expression, "\"" + item + "\" is not a number or a range lo-hi of decimal numbers");
    const int64_t first = std::stoll(lo), last = std::stoll(hi);
    if (first > last) bad(expression, "range \"" + item + "\" runs backwards");
    if (static_cast<size_t>(last - first) + out.size() >= kMaxHostlistNames)
      bad(expression, "more than " + std::to_string(kMaxHostlistNames) + " names");
    for (int64_t v = first; v <= last; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(digits);
    }
    start = comma + 1;
  }
  return out;
}

// One name with any number of bracket groups, appended to `out`.
void expand_name(const std::string& name, const std::string& expression, std::vector<std::string>& out) {
  const size_t open = name.find('[');
  if (open == std::string::npos) {
    if (name.find(']') != std::string::npos) bad(expression, "']' without '['");
    if (name.empty()) bad(expression, "empty name");
    out.push_back(name);
    if (out.size() > kMaxHostlistNames) bad(expression, "more than " + std::to_string(kMaxHostlistNames) + " names");
    return;
  }
  const size_t close = name.find(']', open);
  if (close == std::string::npos) bad(expression, "'[' without ']'");
  const std::string prefix = name.substr(0, open), rest = name.substr(close + 1);
  for (const auto& value : expand_ranges(name.substr(open + 1, close - open - 1), expression))
    expand_name(prefix + value + rest, expression, out);
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& expression) {
  std::vector<std::string> out;
  size_t start = 0, depth = 0;
  // Split at commas outside brackets: "a[1-2,4],b" -> "a[1-2,4]" and "b".
  for (size_t i = 0; i <= expression.size(); ++i) {
    const char c = i < expression.size() ? expression[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') {
      if (depth == 0) bad(expression, "']' without '['");
      --depth;
    }
    if (c == ',' && depth == 0) {
      expand_name(expression.substr(start, i - start), expression, out);
      start = i + 1;
    }
  }
  if (depth != 0) bad(expression, "'[' without ']'");
  return out;
}

}  // namespace axonn
