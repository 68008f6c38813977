// libFuzzer target for the SPANK plugin's parsers: every value they read comes from a user or
// from srun's environment and is parsed inside srun and the root-owned slurmstepd.
// Building and running it: docs/fuzzing.md.
//
// The first input byte picks the parser, the rest is its input ('\0' separates the words of a
// plugstack.conf line or a command line). Beyond what ASan and UBSan catch, each parser must
// return or throw SpankError (anything else escapes and aborts), what it accepts must lie in
// the documented bounds, and every message must be one printable line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "plugins/spank/spank_options.hpp"

namespace {

using namespace axonn::spank;

void require(bool ok) {
  if (!ok) std::abort();
}

void check_message(const SpankError& e) {
  const std::string_view m = e.what();
  require(m.size() < 1200);
  for (char c : m) require(c >= 0x20 && c <= 0x7e);
}

std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size() && out.size() < 32; ++i)
    if (i == text.size() || text[i] == '\0') {
      out.emplace_back(text.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

void fuzz_layout(std::string_view text) {
  try {
    const axonn::Layout l = parse_layout_text(text, "fuzz");
    require(text.size() <= kMaxOptionLength);
    require(l.data >= 1 && l.x >= 1 && l.y >= 1 && l.z >= 1);
    require(l.experts >= 1 && l.data % l.experts == 0);
    require(static_cast<int64_t>(l.data) * l.x * l.y * l.z <= kMaxTasks);
    require(parse_layout_text(axonn::format_layout_with_order(l), "again") == l);
  } catch (const SpankError& e) {
    check_message(e);
  }
  try {
    const LayoutRequest r = parse_layout_option(text);
    require(r.text.size() <= kMaxOptionLength);
  } catch (const SpankError& e) {
    check_message(e);
  }
}

void fuzz_plugstack(std::string_view text) {
  const std::vector<std::string> args = words(text);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    const PluginConfig c = parse_plugstack_args(static_cast<int>(argv.size()), argv.data());
    require(!c.site_config.empty() && c.site_config[0] == '/' && c.site_config.size() <= kMaxPathLength);
    require(!c.allowed.empty() && !c.allowed.count(Mode::off));
    require(c.default_mode == Mode::off || c.allowed.count(Mode::automatic));
    for (Mode m : {Mode::off, Mode::automatic, Mode::validate, Mode::explicit_layout}) {
      try {
        check_mode_allowed(c, m, text);
      } catch (const SpankError& e) {
        check_message(e);
      }
    }
  } catch (const SpankError& e) {
    check_message(e);
  }
}

void fuzz_command(std::string_view text) {
  const std::vector<std::string> args = words(text);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  const auto job = find_job_toml(static_cast<int>(argv.size()), argv.data());
  if (!job) return;
  require(job->toml.size() > 5 && job->toml.size() <= kMaxPathLength && job->toml.ends_with(".toml"));
  for (const std::string& o : job->overrides)
    require(o.size() <= kMaxOverrideLength && o.find('=') != std::string::npos);
}

void fuzz_tasks_per_node(std::string_view text) {
  try {
    const TasksPerNode t = parse_tasks_per_node(text);
    require(t.nodes >= 1 && t.nodes <= t.tasks && t.tasks <= kMaxTasks);
    require(t.uniform == 0 || t.uniform * t.nodes == t.tasks);
  } catch (const SpankError& e) {
    check_message(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 5) {
    case 0:
      fuzz_layout(text);
      break;
    case 1:
      fuzz_plugstack(text);
      break;
    case 2:
      fuzz_command(text);
      break;
    case 3:
      fuzz_tasks_per_node(text);
      break;
    default:
      require(sanitize_line(text).size() <= kMaxOriginLength);
  }
  return 0;
}
