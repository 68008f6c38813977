#include "runner/cli/train_inputs.hpp"

#include <algorithm>

#include "builtin_site.hpp"
#include "runner/cli/environment.hpp"
#include "runner/cli/local_gpu_site.hpp"
#include "config/config_error.hpp"

namespace axonn {

RunSite choose_run_site(const std::optional<std::string>& site_option) {
  const std::optional<std::string> env = environment("AXONN_SITE_CONFIG");
  RunSite site;
  if (site_option) {
    site.config = load_site_config(*site_option);
    site.chosen_by = "site " + site.config.name + " from --site " + *site_option;
    if (env && *env != *site_option)
      site.chosen_by += "; AXONN_SITE_CONFIG=" + *env +
                        " (the axonn SPANK plugin's site config, or your environment's) is not used: an explicit "
                        "--site wins";
    else if (env)
      site.chosen_by += " (AXONN_SITE_CONFIG names the same file)";
  } else if (env) {
    site.config = load_site_config(*env);
    site.chosen_by = "site " + site.config.name + " from AXONN_SITE_CONFIG=" + *env +
                     " (set by the axonn SPANK plugin or your environment; --site would take precedence)";
  } else {
    site.config = load_site_config_string(kBuiltinSiteToml, kBuiltinSiteName);
    site.chosen_by =
        "site " + site.config.name + ", the " + kBuiltinSiteName + ": neither --site nor AXONN_SITE_CONFIG names one";
    site.builtin = true;
  }
  return site;
}

TrainInputs load_train_inputs(const Args& args) {
  if (args.positionals().empty())
    throw UsageError("no job TOML: axonn train JOB.toml [options] [section.key=value ...]");
  TrainInputs in;
  in.job_path = args.positionals()[0];
  in.overrides.assign(args.positionals().begin() + 1, args.positionals().end());
  // After the job's own overrides, so the option wins over a run.trace_steps=... word.
  if (const std::optional<std::string> steps = args.value("trace-steps"))
    in.overrides.push_back("run.trace_steps=\"" + *steps + "\"");
  in.site = choose_run_site(args.value("site"));
  in.job = load_job_config(in.job_path, in.site.config, in.overrides);
  if (in.site.builtin) {
    if (std::optional<RunSite> gpu = local_gpu_site(in.site, in.job.training.device)) {
      in.site = std::move(*gpu);
      in.job = load_job_config(in.job_path, in.site.config, in.overrides);
    }
  }
  return in;
}

void check_wrapper_preempt_signal(const TrainInputs& inputs) {
  const std::optional<std::string> env = environment("AXONN_PREEMPT_SIGNAL");
  if (!env) return;
  const std::string forwarded = env->rfind("SIG", 0) == 0 ? env->substr(3) : *env;
  const std::string& job_signal = inputs.job.run.preempt_signal;
  if (forwarded == job_signal || forwarded == "TERM" || forwarded == "INT") return;  // those stop every run
  if (std::find(kPreemptSignals.begin(), kPreemptSignals.end(), forwarded) == kPreemptSignals.end())
    throw ConfigError("AXONN_PREEMPT_SIGNAL=" + *env +
                      " is not a signal axonn train can stop on: use USR1, USR2 or HUP (or TERM, INT)");
  throw ConfigError("AXONN_PREEMPT_SIGNAL=" + *env + " (the signal this job's wrapper or sbatch template forwards) " +
                    "is not the job's run.preempt_signal \"" + job_signal + "\" (" + inputs.job.source +
                    ", else policy.preempt_signal of " + inputs.site.chosen_by + "): SIG" + forwarded +
                    " would not stop the run. Set run.preempt_signal = \"" + forwarded +
                    "\" in the job (or as an override), or let the wrapper forward SIG" + job_signal);
}

TokenData load_train_data(const JobConfig& job) {
  TokenData data = job.data.path.empty() ? builtin_corpus() : TokenData::load({job.data.path, job.data.format});
  data.validate(job.model.vocab, job.model.sequence, job.training.global_batch);
  return data;
}

}  // namespace axonn
