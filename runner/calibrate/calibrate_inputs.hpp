#pragma once
// What `axonn calibrate` reads before it touches PMIx, shared with `axonn run`, which checks
// the same before it starts a rank: the options, the base site (--site, else
// AXONN_SITE_CONFIG, else the built-in site, as for axonn train: cli/train_inputs.hpp), the
// job whose GEMM shapes, dtype and device to measure with (--job), and the output file.
#include <optional>
#include <string>
#include <vector>

#include "runner/cli/args.hpp"
#include "runner/cli/train_inputs.hpp"
#include "config/job_config.hpp"
#include "layout/layout_cost.hpp"

namespace axonn {

// `axonn calibrate`'s options (its usage, and `axonn run`'s check), defined here.
const std::vector<OptionSpec>& calibrate_option_specs();

struct CalibrateInputs {
  RunSite site;                  // the base: every key it has is kept unless measured
  std::optional<JobConfig> job;  // --job
  // What picks the device and the GEMMs' dtype: the job, or without one training.device =
  // "auto" in the site's default dtype where a GPU is visible, float32 where not.
  JobConfig device_job;
  std::string output;  // --output, whose folder exists and is writable
  bool quick = false;
  std::vector<LinkTier> tiers;  // --tiers: must be measured; empty: whatever the allocation has
  double max_residual = 0;
};

// Throws UsageError for a missing or unwritable --output or a bad option, ConfigError for a
// site or job that does not load.
CalibrateInputs load_calibrate_inputs(const Args& args);

}  // namespace axonn
