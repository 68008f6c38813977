// slurmstepd (SPANK remote context), owned by root: reads nothing the user controls except
// srun's decision, which it parses with the bounded parser and checks again, and the admin's
// site config from plugstack.conf (the only path it opens; users cannot change it). No file
// named by a user, no shell, no exec. What Slurm 22.05 does here, as verified on the test
// cluster:
//   - a failing init_post_opt or user_init is logged and the tasks are not started, yet srun
//     exits 0; a failing task_init makes each task exit 1 and srun exit 1. So the checks and
//     the exports live in task_init, which runs in each task's process, as the user, before
//     exec: spank_setenv() there changes that task's environment only.
//   - spank_option_getopt() answers in task_init (not in init_post_opt), also for a value sbatch
//     passed on to the batch script's srun.
//   - the batch script itself runs as a step with id SLURM_BATCH_SCRIPT and gets sbatch's
//     option: it must not get AXONN_LAYOUT, or the srun inside the script would take it for the
//     user's own and keep it. The extern and interactive steps are skipped likewise.
#include <slurm/slurm.h>

#include <optional>
#include <string>
#include <vector>

#include "config/site_config.hpp"
#include "plugins/spank/layout_decision.hpp"
#include "plugins/spank/spank_contexts.hpp"
#include "plugins/spank/spank_env.hpp"

namespace axonn::spank {
namespace {

// The step's value of `name`, at most max_length bytes (longer values come back cut);
// nullopt when it is not set.
std::optional<std::string> step_env(spank_t sp, const char* name, size_t max_length) {
  std::vector<char> buf(max_length + 1);
  const spank_err_t rc = spank_getenv(sp, name, buf.data(), static_cast<int>(buf.size()));
  if (rc == ESPANK_ENV_NOEXIST) return std::nullopt;
  if (rc != ESPANK_SUCCESS && rc != ESPANK_NOSPACE)
    throw SpankError(std::string("reading ") + name + " from the step's environment failed: " + spank_strerror(rc));
  buf.back() = '\0';
  return std::string(buf.data());
}

// Sets `name` for the task unless the user's environment gives it a value. An empty value
// counts as unset, as it does for `axonn train` and `axonn selftest`.
void export_unless_user_set(spank_t sp, const char* name, const std::string& value) {
  if (const auto user = step_env(sp, name, 1); user && !user->empty()) return;
  if (const spank_err_t rc = spank_setenv(sp, name, value.c_str(), 1); rc != ESPANK_SUCCESS)
    throw SpankError(std::string("setting ") + name + " for the task failed: " + spank_strerror(rc));
}

uint32_t step_id(spank_t sp) {
  uint32_t id = 0;
  if (const spank_err_t rc = spank_get_item(sp, S_JOB_STEPID, &id); rc != ESPANK_SUCCESS)
    throw SpankError(std::string("Slurm gave no step id (S_JOB_STEPID): ") + spank_strerror(rc));
  return id;
}

}  // namespace

void remote_task_init(spank_t sp) {
  if (step_id(sp) >= SLURM_MAX_NORMAL_STEP_ID) return;  // batch script, extern or interactive step
  const std::optional<std::string> decided = step_env(sp, kHandoffLayout, kMaxOptionLength + 1);
  const std::string origin = sanitize_line(step_env(sp, kHandoffOrigin, kMaxOriginLength).value_or(""));
  spank_unsetenv(sp, kHandoffLayout);
  spank_unsetenv(sp, kHandoffOrigin);
  const PluginConfig& config = plugin_config();
  if (!decided) {
    char* value = nullptr;
    if (spank_option_getopt(sp, layout_option(), &value) != ESPANK_SUCCESS) return;
    if (parse_layout_option(value ? value : "").mode == Mode::off) return;
    throw SpankError("--axonn-layout=" + sanitize_line(value ? value : "") +
                     " reached this step but srun's decision (" + kHandoffLayout +
                     ") did not; is the axonn plugin in the plugstack.conf that srun reads?");
  }
  uint32_t tasks = 0;
  if (const spank_err_t rc = spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &tasks); rc != ESPANK_SUCCESS)
    throw SpankError(std::string("Slurm gave no task count (S_JOB_TOTAL_TASK_COUNT): ") + spank_strerror(rc));
  SiteConfig site;
  try {
    site = load_site_config(config.site_config);
  } catch (const std::exception& e) {
    throw SpankError("the site config named in plugstack.conf (site_config=" + config.site_config +
                     ") does not load on this node: " + e.what() + "; tell your site admin");
  }
  const Layout layout =
      check_handoff(*decided, tasks > static_cast<uint32_t>(kMaxTasks) ? -1 : static_cast<int>(tasks), site);
  const std::string text = format_layout_with_order(layout);

  std::string task_origin = origin.empty() ? "axonn SPANK plugin: " + text : origin;
  if (const auto user = step_env(sp, kEnvLayout, kMaxOptionLength); user && !user->empty()) {
    // The user's own AXONN_LAYOUT stays. srun checked it already; say whose it is unless it is
    // the decided layout itself (validate mode).
    bool same = false;
    try {
      same = format_layout_with_order(parse_layout_text(*user, kEnvLayout)) == text;
    } catch (const SpankError&) {
      // Not a layout: the trainer reports it; here it only changes the origin line.
    }
    if (!same) task_origin = kept_user_layout_origin(*user, task_origin);
  } else {
    export_unless_user_set(sp, kEnvLayout, text);
  }
  export_unless_user_set(sp, kEnvSiteConfig, config.site_config);
  export_unless_user_set(sp, kEnvOrigin, task_origin);
}

}  // namespace axonn::spank
