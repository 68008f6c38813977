#include "plugins/spank/spank_options.hpp"

#include <algorithm>
#include <cstdint>

namespace axonn::spank {
namespace {

// Shows an untrusted value in a message: bounded, non-printable bytes as '?'.
std::string shown(std::string_view text) {
  constexpr size_t kShown = 80;
  std::string s = sanitize_line(text.substr(0, kShown));
  if (text.size() > kShown) s += "...";
  return "'" + s + "'";
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A decimal in [1, max], at most 7 digits (kMaxTasks has 7), no sign, no spaces.
std::optional<int> small_positive(std::string_view digits, int max) {
  if (digits.empty() || digits.size() > 7) return std::nullopt;
  int64_t v = 0;
  for (char c : digits) {
    if (!is_digit(c)) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v < 1 || v > max) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<Mode> mode_by_name(std::string_view name) {
  if (name == "auto") return Mode::automatic;
  if (name == "validate") return Mode::validate;
  if (name == "explicit") return Mode::explicit_layout;
  if (name == "off") return Mode::off;
  return std::nullopt;
}

std::string allowed_list(const PluginConfig& config) {
  std::string s;
  for (Mode m : config.allowed) s += (s.empty() ? "" : ", ") + mode_name(m);
  return s;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || is_digit(s[0])) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_digit(c) || c == '_' || (c >= 'a' && c <= 'z'); });
}

// "training.micro_batch=2": what load_job_config takes as an override.
bool is_override(std::string_view word) {
  if (word.size() > kMaxOverrideLength) return false;
  const size_t eq = word.find('=');
  if (eq == std::string_view::npos) return false;
  const std::string_view key = word.substr(0, eq);
  const size_t dot = key.find('.');
  return dot != std::string_view::npos && is_identifier(key.substr(0, dot)) && is_identifier(key.substr(dot + 1));
}

}  // namespace

std::string mode_name(Mode mode) {
  switch (mode) {
    case Mode::off:
      return "off";
    case Mode::automatic:
      return "auto";
    case Mode::validate:
      return "validate";
    case Mode::explicit_layout:
      break;
  }
  return "explicit";
}

std::string sanitize_line(std::string_view text) {
  std::string s(text.substr(0, kMaxOriginLength));
  for (char& c : s)
    if (c < 0x20 || c > 0x7e) c = '?';
  return s;
}

Layout parse_layout_text(std::string_view text, std::string_view what) {
  const std::string form =
      "; expected DxXxYxZ[eN][:ORDER] (data x X x Y x Z, N the expert parallelism, a divisor of D; ORDER the "
      "letters x, y, z, d fastest first), e.g. 2x2x1x1, 4x2x1x1e2 or 2x2x1x1:yxzd";
  if (text.empty()) throw SpankError(std::string(what) + " is empty" + form);
  if (text.size() > kMaxOptionLength)
    throw SpankError(std::string(what) + " " + shown(text) + " is longer than " + std::to_string(kMaxOptionLength) +
                     " characters" + form);
  if (!std::all_of(text.begin(), text.end(),
                   [](char c) { return is_digit(c) || std::string_view("xyzde:").find(c) != std::string_view::npos; }))
    throw SpankError(std::string(what) + " " + shown(text) +
                     " has a character other than digits, x, y, z, d, e and ':'" + form);
  const size_t colon = text.find(':');
  std::string_view sizes = text.substr(0, colon);
  if (const size_t e = sizes.find('e'); e != std::string_view::npos) {
    const std::string_view experts = sizes.substr(e + 1);
    if (!small_positive(experts, kMaxTasks))
      throw SpankError(std::string(what) + " " + shown(text) + ": " + shown(experts) +
                       " after 'e' is not an expert parallelism in [1, " + std::to_string(kMaxTasks) + "]" + form);
    sizes = sizes.substr(0, e);
  }
  int64_t product = 1;
  int count = 0;
  size_t start = 0;
  for (size_t i = 0; i <= sizes.size(); ++i) {
    if (i < sizes.size() && sizes[i] != 'x') continue;
    const std::string_view part = sizes.substr(start, i - start);
    const auto v = small_positive(part, kMaxTasks);
    if (!v)
      throw SpankError(std::string(what) + " " + shown(text) + ": " + shown(part) + " is not a size in [1, " +
                       std::to_string(kMaxTasks) + "]" + form);
    product *= *v;
    if (product > kMaxTasks)
      throw SpankError(std::string(what) + " " + shown(text) + " has more than " + std::to_string(kMaxTasks) +
                       " ranks" + form);
    ++count;
    start = i + 1;
  }
  if (count != 4)
    throw SpankError(std::string(what) + " " + shown(text) + " has " + std::to_string(count) + " sizes, not four" +
                     form);
  // Bounded and well-formed sizes: the layout library parses the rest (that the expert
  // parallelism divides D, the axis order).
  try {
    return parse_layout(std::string(text));
  } catch (const LayoutError& e) {
    throw SpankError(std::string(what) + ": " + e.what());
  }
}

LayoutRequest parse_layout_option(std::string_view value) {
  LayoutRequest r;
  r.text = sanitize_line(value.substr(0, kMaxOptionLength));
  if (const auto mode = mode_by_name(value); mode && *mode != Mode::explicit_layout) {
    r.mode = *mode;
    return r;
  }
  if (value.empty() || !is_digit(value[0]))
    throw SpankError("--axonn-layout=" + sanitize_line(value.substr(0, 80)) +
                     " is not a mode or a layout; expected auto, validate, off or DxXxYxZ[eN][:ORDER] (e.g. 2x2x1x1)");
  r.mode = Mode::explicit_layout;
  r.layout = parse_layout_text(value, "--axonn-layout");
  return r;
}

PluginConfig parse_plugstack_args(int argc, const char* const* argv) {
  const std::string where = "plugstack.conf: the axonn plugin's argument ";
  const std::string keys =
      "; the keys are site_config=PATH (required), default=auto|off, allowed=auto,validate,explicit";
  if (argc < 0 || argc > kMaxPlugstackArgs || (argc > 0 && !argv))
    throw SpankError("plugstack.conf: the axonn plugin takes at most " + std::to_string(kMaxPlugstackArgs) +
                     " arguments, got " + std::to_string(argc) + keys);
  PluginConfig config;
  std::set<std::string> seen;
  for (int i = 0; i < argc; ++i) {
    if (!argv[i]) throw SpankError(where + std::to_string(i + 1) + " is missing" + keys);
    const std::string_view arg(argv[i]);
    const size_t eq = arg.find('=');
    const std::string_view key = arg.substr(0, std::min(eq, arg.size()));
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : arg.substr(eq + 1);
    if (eq == std::string_view::npos || (key != "site_config" && key != "default" && key != "allowed"))
      throw SpankError(where + shown(arg) + " is not a known key=value" + keys);
    if (!seen.insert(std::string(key)).second)
      throw SpankError(where + shown(arg) + ": " + std::string(key) + " is given twice");
    if (key == "site_config") {
      if (value.empty() || value[0] != '/' || value.size() > kMaxPathLength ||
          std::any_of(value.begin(), value.end(), [](char c) { return c < 0x21 || c > 0x7e; }))
        throw SpankError(where + shown(arg) + ": site_config must be an absolute path of at most " +
                         std::to_string(kMaxPathLength) +
                         " printable characters, e.g. site_config=/etc/axonn/site.toml");
      config.site_config = std::string(value);
    } else if (key == "default") {
      const auto mode = mode_by_name(value);
      if (!mode || (*mode != Mode::automatic && *mode != Mode::off))
        throw SpankError(where + shown(arg) + ": default must be auto or off");
      config.default_mode = *mode;
    } else {
      config.allowed.clear();
      size_t start = 0;
      for (size_t j = 0; j <= value.size(); ++j) {
        if (j < value.size() && value[j] != ',') continue;
        const auto mode = mode_by_name(value.substr(start, j - start));
        if (!mode || *mode == Mode::off)
          throw SpankError(where + shown(arg) + ": " + shown(value.substr(start, j - start)) +
                           " is not a mode; allowed= lists some of auto, validate, explicit, separated by commas");
        config.allowed.insert(*mode);
        start = j + 1;
      }
    }
  }
  if (config.site_config.empty())
    throw SpankError(
        "plugstack.conf: the axonn plugin needs site_config=PATH, the admin's site TOML (e.g. "
        "site_config=/etc/axonn/site.toml); it prices layouts and sets the site policy");
  if (config.default_mode == Mode::automatic && !config.allowed.count(Mode::automatic))
    throw SpankError("plugstack.conf: default=auto but allowed=" + allowed_list(config) +
                     " does not include auto; add auto to allowed= or set default=off");
  return config;
}

void check_mode_allowed(const PluginConfig& config, Mode mode, std::string_view given) {
  if (mode == Mode::off || config.allowed.count(mode)) return;
  throw SpankError("--axonn-layout=" + sanitize_line(given.substr(0, kMaxOptionLength)) + ": mode " + mode_name(mode) +
                   " is not allowed on this site (allowed: " + allowed_list(config) +
                   "); ask your site admin, or use one of those");
}

std::optional<JobCommand> find_job_toml(int argc, const char* const* argv) {
  if (argc <= 0 || !argv) return std::nullopt;
  const int n = std::min(argc, kMaxArgvScanned);
  for (int i = 0; i < n; ++i) {
    if (!argv[i]) return std::nullopt;
    const std::string_view word(argv[i]);
    if (word.size() <= 5 || word.size() > kMaxPathLength || !word.ends_with(".toml")) continue;
    JobCommand job{std::string(word), {}, false};
    if (n >= 2 && argv[1]) {
      const std::string_view program(argv[0]);
      const size_t slash = program.rfind('/');
      job.axonn_train = program.substr(slash == std::string_view::npos ? 0 : slash + 1) == "axonn" &&
                        std::string_view(argv[1]) == "train";
    }
    for (int j = i + 1; j < n && argv[j]; ++j)
      if (is_override(argv[j])) job.overrides.emplace_back(argv[j]);
    return job;
  }
  return std::nullopt;
}

TasksPerNode parse_tasks_per_node(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return SpankError("SLURM_TASKS_PER_NODE=" + shown(text) + " " + why +
                      "; expected counts like 4 or 2(x3),1 as srun sets it");
  };
  if (text.empty() || text.size() > kMaxTasksPerNodeLength) throw bad("is empty or too long");
  TasksPerNode t;
  int first = 0;
  bool uniform = true;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(pos, end - pos);
    int repeat = 1;
    if (const size_t paren = item.find("(x"); paren != std::string_view::npos) {
      if (!item.ends_with(")")) throw bad("has an unclosed '(x'");
      const auto r = small_positive(item.substr(paren + 2, item.size() - paren - 3), kMaxTasks);
      if (!r) throw bad("has a repeat count outside [1, " + std::to_string(kMaxTasks) + "]");
      repeat = *r;
      item = item.substr(0, paren);
    }
    const auto count = small_positive(item, kMaxTasks);
    if (!count) throw bad("has a task count outside [1, " + std::to_string(kMaxTasks) + "]");
    if (static_cast<int64_t>(t.nodes) + repeat > kMaxTasks ||
        static_cast<int64_t>(t.tasks) + static_cast<int64_t>(*count) * repeat > kMaxTasks)
      throw bad("adds up to more than " + std::to_string(kMaxTasks) + " tasks or nodes");
    if (t.nodes == 0) first = *count;
    uniform = uniform && *count == first;
    t.nodes += repeat;
    t.tasks += *count * repeat;
    pos = end + 1;
  }
  t.uniform = uniform ? first : 0;
  return t;
}

}  // namespace axonn::spank
