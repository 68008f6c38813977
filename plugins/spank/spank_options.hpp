#pragma once
// Parsing for the SPANK plugin, with no Slurm header and no I/O, so it is unit-tested and
// fuzzed on its own (tests/fuzz/). Every input here comes from a user (the --axonn-layout
// value, the step's command line, srun's environment) or from plugstack.conf, and the plugin
// runs inside srun and inside the root-owned slurmstepd: each input is bounded in length and
// character set before it is interpreted, and every failure is a SpankError whose message
// names the bad value and the fix.
#include <cstddef>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "layout/layout.hpp"

namespace axonn::spank {

// A bad option, plugstack argument or environment value: the plugin refuses the job with it.
class SpankError : public Error {
 public:
  explicit SpankError(const std::string& message) : Error(message, exit_code::bad_input) {}
};

inline constexpr size_t kMaxOptionLength = 64;          // --axonn-layout value, bytes
inline constexpr size_t kMaxPathLength = 4095;          // PATH_MAX - 1, bytes
inline constexpr size_t kMaxOriginLength = 512;         // AXONN_LAYOUT_ORIGIN, bytes
inline constexpr size_t kMaxTasksPerNodeLength = 4096;  // SLURM_TASKS_PER_NODE, bytes
inline constexpr size_t kMaxOverrideLength = 256;       // one "section.key=value" argument, bytes
inline constexpr int kMaxTasks = 1 << 20;               // largest step (and layout product) handled
inline constexpr int kMaxPlugstackArgs = 16;            // arguments on the plugstack.conf line
inline constexpr int kMaxArgvScanned = 4096;            // command-line words searched for a job TOML

// What the user asked for with --axonn-layout (or the site's default= without the option).
enum class Mode { off, automatic, validate, explicit_layout };
std::string mode_name(Mode mode);  // "off", "auto", "validate", "explicit"

struct LayoutRequest {
  Mode mode = Mode::off;
  Layout layout;     // the layout given, for Mode::explicit_layout
  std::string text;  // the option value as given (printable, at most kMaxOptionLength)
};

// "auto" | "validate" | "off" | "DxXxYxZ[eN][:ORDER]".
LayoutRequest parse_layout_option(std::string_view value);

// A layout "DxXxYxZ[eN][:ORDER]" (eN: expert parallelism N, a divisor of D) from any untrusted
// source, bounded: at most kMaxOptionLength characters from [0-9xyzde:], every size and N in
// [1, kMaxTasks] and the sizes' product too (so nothing downstream overflows an int). `what`
// names the source in messages ("--axonn-layout", "AXONN_LAYOUT").
Layout parse_layout_text(std::string_view text, std::string_view what);

// The arguments on the plugin's plugstack.conf line, e.g.
//   required /usr/lib/x86_64-linux-gnu/slurm/spank_axonn.so site_config=/etc/axonn/site.toml default=off
struct PluginConfig {
  std::string site_config;        // absolute path of the admin's site TOML; required
  Mode default_mode = Mode::off;  // what a step without --axonn-layout gets: off or automatic
  std::set<Mode> allowed = {Mode::automatic, Mode::validate, Mode::explicit_layout};  // "off" is always allowed
};
// Keys: site_config=PATH (required), default=auto|off (default off), allowed=MODE[,MODE...]
// with MODE in auto, validate, explicit (default all three). Unknown or repeated keys are errors.
PluginConfig parse_plugstack_args(int argc, const char* const* argv);

// Throws when the site does not allow `mode`; `given` is what the user wrote.
void check_mode_allowed(const PluginConfig& config, Mode mode, std::string_view given);

// The job TOML on a step's command line: the first word ending in ".toml", and after it the
// words of the form section.key=value (the job-config overrides `axonn train` accepts).
// axonn_train: the command is `axonn train` (a program named axonn, any directory), so every
// task will load this TOML with these overrides and stop on what stops the plugin.
struct JobCommand {
  std::string toml;
  std::vector<std::string> overrides;
  bool axonn_train = false;
};
std::optional<JobCommand> find_job_toml(int argc, const char* const* argv);

// SLURM_TASKS_PER_NODE as srun sets it for a step: "4", "2(x3),1" (three nodes of 2, one of 1).
struct TasksPerNode {
  int nodes = 0;
  int tasks = 0;
  int uniform = 0;  // tasks on every node when all nodes have the same count, else 0
};
TasksPerNode parse_tasks_per_node(std::string_view text);

// At most kMaxOriginLength characters, every byte outside printable ASCII replaced by '?':
// the origin line crosses from srun's environment into root's slurmstepd and the task logs.
std::string sanitize_line(std::string_view text);

}  // namespace axonn::spank
