// srun (SPANK local context) and sbatch/salloc (allocator context): runs as the user, so it
// may read the job TOML named on the step's command line. What Slurm 22.05 gives here, as
// verified on the test cluster:
//   - option callbacks run while srun/sbatch parse options; a failing one stops the command
//     ("Invalid --axonn-layout argument") before anything is submitted. In the batch script's
//     srun they run again for the value sbatch passed on through the job's environment, then
//     for srun's own --axonn-layout, which wins.
//   - init_post_opt has no step yet (spank_get_item answers ESPANK_NOT_AVAIL);
//     local_user_init runs after the step is created and before any task starts, with
//     S_JOB_TOTAL_TASK_COUNT, S_JOB_NNODES and S_JOB_ARGV (the step's command), and srun's
//     environment already holds the step's SLURM_TASKS_PER_NODE ("2,1"), but SLURM_NODELIST is
//     still the whole allocation's and SLURM_STEP_NODELIST is not set yet.
//     A failing local_user_init ends srun at once (exit 1, no task started), with a `required`
//     or an `optional` plugstack line alike.
//   - slurm_info() prints "srun: <message>" on srun's stderr (silenced by srun --quiet).
// spank_getenv()/spank_setenv() answer ESPANK_NOT_REMOTE here: srun's own environment is read
// and written with getenv()/setenv(), and srun copies it into the step's environment.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "config/hostlist.hpp"
#include "plugins/spank/layout_decision.hpp"
#include "plugins/spank/spank_contexts.hpp"
#include "plugins/spank/spank_env.hpp"

namespace axonn::spank {
namespace {

constexpr size_t kMaxNodelistLength = 1 << 16;  // SLURM_NODELIST, bytes

// A variable of srun's (the user's) environment, at most max_length + 1 bytes of it, so a
// bounded parser still sees that it was too long. Empty counts as unset, as in `axonn train`.
std::optional<std::string> env_value(const char* name, size_t max_length) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v, strnlen(v, max_length + 1));
}

uint32_t step_item(spank_t sp, spank_item_t item, const char* name) {
  uint32_t value = 0;
  const spank_err_t rc = spank_get_item(sp, item, &value);
  if (rc != ESPANK_SUCCESS || value == 0 || value > static_cast<uint32_t>(kMaxTasks))
    throw SpankError(std::string("Slurm gave no usable ") + name + " for this step (" + spank_strerror(rc) +
                     ", value " + std::to_string(value) + "; at most " + std::to_string(kMaxTasks) + ")");
  return value;
}

// Task and node counts come from Slurm's items. SLURM_TASKS_PER_NODE (srun's own variable)
// says whether every node has the same count; when it is missing or disagrees with the items,
// an even split is assumed where the counts divide. The node names let a site's named switches
// place the nodes (network.switches), as the trainer's PMIx names do; srun knows only the
// allocation's here, which are the step's when the step spans every node of the allocation.
StepShape step_shape(spank_t sp) {
  StepShape step;
  step.tasks = static_cast<int>(step_item(sp, S_JOB_TOTAL_TASK_COUNT, "task count (S_JOB_TOTAL_TASK_COUNT)"));
  step.nodes = static_cast<int>(step_item(sp, S_JOB_NNODES, "node count (S_JOB_NNODES)"));
  step.tasks_per_node = step.tasks % step.nodes == 0 ? step.tasks / step.nodes : 0;
  if (const auto text = env_value("SLURM_TASKS_PER_NODE", kMaxTasksPerNodeLength)) {
    try {
      const TasksPerNode t = parse_tasks_per_node(*text);
      if (t.nodes == step.nodes && t.tasks == step.tasks) step.tasks_per_node = t.uniform;
    } catch (const SpankError&) {
      // Not srun's format: the items above stand.
    }
  }
  if (step.tasks_per_node > 0) {
    if (const auto list = env_value("SLURM_NODELIST", kMaxNodelistLength); list && list->size() <= kMaxNodelistLength) {
      try {
        auto names = expand_hostlist(*list);
        if (static_cast<int>(names.size()) == step.nodes) step.hostnames = std::move(names);
      } catch (const std::exception&) {
        // Unnamed nodes fill the site's switches in order (allocation_nodes_per_switch).
      }
    }
  }
  return step;
}

// Whether the tasks of an `axonn train` step load `command`'s job as the plugin does: the file
// is here (not a node-local copy only the compute nodes hold) and they read the same site
// config (the plugin's, unless the user's AXONN_SITE_CONFIG names another one).
bool tasks_load_it_as_here(const JobCommand& command, const PluginConfig& config) {
  std::error_code ec;
  if (!command.axonn_train || !std::filesystem::is_regular_file(command.toml, ec)) return false;
  const auto user_site = env_value(kEnvSiteConfig, kMaxPathLength);
  return !user_site || *user_site == config.site_config;
}

// The job TOML named on the step's command line, if it loads. When the tasks of an `axonn
// train` step would load it as the plugin does, each would stop on a TOML that does not load
// and print the same error: the step is refused here instead, once, before any task starts.
// For another program the .toml may not be an axonn job at all: auto needs it to price a
// model, so there a bad one is an error; explicit and validate check without it, with a warning.
std::optional<JobInput> job_from_command(spank_t sp, const PluginConfig& config, const SiteConfig& site, Mode mode) {
  int argc = 0;
  char** argv = nullptr;
  if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS) return std::nullopt;
  const auto command = find_job_toml(argc, argv);
  if (!command) return std::nullopt;
  try {
    return JobInput{command->toml, load_job_config(command->toml, site, command->overrides)};
  } catch (const std::exception& e) {
    if (tasks_load_it_as_here(*command, config))
      throw SpankError("the step was not started: axonn train's job " + command->toml + " does not load: " +
                       e.what() + "; every task would stop on it. Fix what the message names (in the file or in "
                       "a section.key=value argument after it) and run the step again");
    if (mode == Mode::automatic)
      throw SpankError("--axonn-layout=auto prices the first .toml on the step's command line as the job, and " +
                       command->toml + " does not load: " + e.what() +
                       "; if it is an axonn job, fix it; if it is not, give the layout yourself "
                       "(--axonn-layout=DxXxYxZ)");
    slurm_info(
        "axonn: warning: %s on the command line is not a job TOML the plugin can read (%s); the layout is "
        "checked against the task count and site policy only",
        command->toml.c_str(), e.what());
    return std::nullopt;
  }
}

void decide_and_hand_off(spank_t sp, const PluginConfig& config, const LayoutRequest& request) {
  SiteConfig site;
  try {
    site = load_site_config(config.site_config);
  } catch (const std::exception& e) {
    throw SpankError("the site config named in plugstack.conf (site_config=" + config.site_config +
                     ") does not load: " + e.what() + "; tell your site admin");
  }
  const StepShape step = step_shape(sp);
  const std::optional<JobInput> job = job_from_command(sp, config, site, request.mode);
  const Decision d = decide_layout(request, step, site, job ? &*job : nullptr, env_value(kEnvLayout, kMaxOptionLength));
  for (const std::string& w : d.warnings) slurm_info("axonn: warning: %s", w.c_str());
  slurm_info("axonn: %s", d.summary.c_str());
  const std::string origin = sanitize_line("axonn SPANK plugin: " + d.summary);
  if (setenv(kHandoffLayout, format_layout_with_order(d.layout).c_str(), 1) != 0 ||
      setenv(kHandoffOrigin, origin.c_str(), 1) != 0)
    throw SpankError(std::string("could not put the decision in srun's environment: ") + std::strerror(errno));
}

}  // namespace

void check_option_value(const char* value) {
  const LayoutRequest request = parse_layout_option(value ? value : "");
  check_mode_allowed(plugin_config(), request.mode, request.text);
}

void local_user_init(spank_t sp) {
  // A decision inherited from an enclosing step is never passed on: only this srun decides.
  unsetenv(kHandoffLayout);
  unsetenv(kHandoffOrigin);
  const PluginConfig& config = plugin_config();
  char* value = nullptr;
  const bool given = spank_option_getopt(sp, layout_option(), &value) == ESPANK_SUCCESS;
  LayoutRequest request;
  if (given) {
    request = parse_layout_option(value ? value : "");
  } else {
    request.mode = config.default_mode;
    request.text = mode_name(config.default_mode);
  }
  if (request.mode == Mode::off) return;
  check_mode_allowed(config, request.mode, request.text);
  try {
    decide_and_hand_off(sp, config, request);
  } catch (const std::exception& e) {
    // The site's default applies to every srun, most of which never asked for a layout: it
    // must not stop them. The user's own --axonn-layout does.
    if (given) throw;
    slurm_info("axonn: warning: the site's default --axonn-layout=%s was skipped, AXONN_LAYOUT is not set: %s",
               request.text.c_str(), e.what());
  }
}

}  // namespace axonn::spank
