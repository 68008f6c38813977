#pragma once
// What the plugin decides for a step, as pure functions of the request, the step's shape, the
// admin's site config and (when the step's command line names one) the job TOML. srun's local
// context calls decide_layout(); slurmstepd's remote context calls check_handoff() on what srun
// decided. Same chooser as `axonn layout` (choose_layout on chooser_input), so the answer is
// the one the CLI prints for the same site, job, nodes and tasks per node.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/job_config.hpp"
#include "config/site_config.hpp"
#include "layout/layout_search.hpp"
#include "plugins/spank/spank_options.hpp"

namespace axonn::spank {

// The step as srun knows it in local_user_init (Slurm 22.05: S_JOB_TOTAL_TASK_COUNT and
// S_JOB_NNODES, plus SLURM_TASKS_PER_NODE and SLURM_NODELIST in srun's environment).
struct StepShape {
  int tasks = 1;
  int nodes = 1;
  int tasks_per_node = 1;              // 0 when the nodes have different task counts
  std::vector<std::string> hostnames;  // node order; empty when unknown
};
std::string describe(const StepShape& step);  // "4 tasks on 1 node", "3 tasks on 2 nodes (2,1 per node)"

// The job TOML from the step's command line, loaded as the user in srun.
struct JobInput {
  std::string label;  // the path as the command line gave it
  JobConfig config;
};

struct Decision {
  Layout layout;                      // what the tasks get as AXONN_LAYOUT
  std::string summary;                // one line: "--axonn-layout=auto chose 2x2x1x1:xyzd for 4 tasks on 1 node (...)"
  std::vector<std::string> warnings;  // lines srun prints before the summary
};

// Decides the layout for `request` (not Mode::off) or throws SpankError naming the layout, the
// task count and a valid alternative. `job` is null when the command line names no job TOML:
// then auto falls back to pure data parallel (a model cannot be priced without one) and the
// other modes check only the task count and the site policy. `env_layout` is AXONN_LAYOUT from
// the user's environment: the layout validate checks; in the other modes it is checked too,
// since it wins at the tasks (the plugin never overrides it), with a warning.
Decision decide_layout(const LayoutRequest& request, const StepShape& step, const SiteConfig& site, const JobInput* job,
                       const std::optional<std::string>& env_layout);

// Why the site policy ([policy] allowed_axis_sizes, max_tensor_parallel) forbids `layout`;
// empty when it allows it. Needs no model, so it also serves steps without a job TOML.
std::string policy_problem(const SiteConfig& site, const Layout& layout);

// The slurmstepd side: srun's decision as it arrived in the step's environment, checked again
// (bounded text, product = the step's `tasks`, site policy) before it reaches the tasks.
Layout check_handoff(std::string_view text, int tasks, const SiteConfig& site);

// AXONN_LAYOUT_ORIGIN when the user's own AXONN_LAYOUT is kept: says so, and what the plugin
// had decided (`origin`), within kMaxOriginLength.
std::string kept_user_layout_origin(std::string_view user_layout, std::string_view origin);

}  // namespace axonn::spank
