#pragma once
// What `axonn train` reads before it trains, shared with `axonn run`, which checks the same
// inputs before it starts a rank: the command line, the site config, the job TOML with its
// overrides, the preemption signal a wrapper announced, and the training data.
//
// The site config, first match wins:
//   1. --site PATH: an explicit flag beats the environment, as for every other option;
//   2. AXONN_SITE_CONFIG: the SPANK plugin sets it for each task to the admin's site config
//      (plugstack.conf site_config=, which srun priced the layout with), unless the user's
//      environment set it first; a hand-set value reads the same;
//   3. the built-in laptop-cpu site; for a job whose ranks run on this machine's GPUs, a site
//      described from those GPUs instead (local_gpu_site.hpp).
// Rank 0 logs which one it used and why, so a --site that shadows the plugin's site shows.
#include <optional>
#include <string>
#include <vector>

#include "runner/cli/args.hpp"
#include "config/job_config.hpp"
#include "config/site_config.hpp"
#include "trainer/data/data_mixture.hpp"

namespace axonn {

// `axonn train`'s options (its usage, and `axonn run`'s check of a train command line);
// defined beside the command, in train_command.cpp.
const std::vector<OptionSpec>& train_option_specs();

// --timeout-ms: the collective timeout's range, in milliseconds.
inline constexpr long kTimeoutMsMin = 100;
inline constexpr long kTimeoutMsMax = 86'400'000;

struct RunSite {
  SiteConfig config;
  std::string chosen_by;  // one log line: which file, from where, and what it took precedence over
  bool builtin = false;   // neither --site nor AXONN_SITE_CONFIG named one
};

// The site per the rule above; throws ConfigError for a file that does not load.
RunSite choose_run_site(const std::optional<std::string>& site_option);

struct TrainInputs {
  std::string job_path;
  std::vector<std::string> overrides;  // section.key=value words after the job
  RunSite site;
  JobConfig job;
};

// Parses the job TOML (the first positional) with its overrides on the chosen site. Throws
// UsageError without a job, ConfigError for a bad site, job or override.
TrainInputs load_train_inputs(const Args& args);

// AXONN_PREEMPT_SIGNAL names the signal the job's wrapper (the sbatch templates) forwards
// to the ranks ("USR2" or "SIGUSR2"). Throws ConfigError naming both values and the fixes
// when it is set and is not the job's run.preempt_signal: that wrapper's signal would not
// stop the run, and on the job's own signal nobody would send.
void check_wrapper_preempt_signal(const TrainInputs& inputs);

// The job's training data (trainer/data/data_mixture.hpp): every source of [data] (data.path,
// or [[data.sources]]; the built-in corpus for an empty path), its ids inside model.vocab and
// its training part at least one global batch of samples; and the held-out data, data.valid
// or the last data.valid_fraction of every source's samples (at least one each, no longer
// trained on), of at least run.eval_batches global batches when run.eval_interval asks for
// evaluations. Throws DataError naming the file and the fix.
TrainingData load_train_data(const JobConfig& job);

}  // namespace axonn
