#pragma once
// Which layout `axonn train` runs, decided the same way on every rank:
//   1. AXONN_LAYOUT from the environment (set by the SPANK plugin, or by hand), with
//      AXONN_LAYOUT_ORIGIN saying who set it;
//   2. else --layout;
//   3. else the chooser (`axonn layout`'s) over this job's topology and site.
// Whatever the source, the layout must have the job's rank count and divide the model and
// the batch, and its expert parallelism ("eN") the model's experts; otherwise LayoutError
// names the layout, the dimension and the axes.
#include <optional>
#include <string>

#include "config/job_config.hpp"
#include "layout/layout_search.hpp"
#include "layout/model_plan.hpp"
#include "runner/pmix/topology.hpp"

namespace axonn {

// No layout of the job's rank count fits (memory, divisibility, policy): exit code 3.
class NoFittingLayout : public LayoutError {
 public:
  explicit NoFittingLayout(const std::string& message) : LayoutError(message, exit_code::no_layout) {}
};

struct RunLayout {
  Layout layout;
  std::string origin;                    // one line for the log: where it came from and why
  ChooserInput plan;                     // what the predictions of time, bytes and memory use
  std::optional<ChooserResult> ranking;  // the chooser's table (chooser or plugin auto)
};

RunLayout decide_run_layout(const Topology& topology, const SiteConfig& site, const JobConfig& job,
                            const std::optional<std::string>& layout_option);

}  // namespace axonn
