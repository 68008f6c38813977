#include "runner/cli/train_inputs.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

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

namespace {

// A token file (or the built-in corpus, for an empty path) whose ids all fit the model and
// that holds at least `min_samples` samples: one pass over the ids (a mapped corpus is read
// once per rank at start-up, not twice).
std::shared_ptr<const TokenData> load_checked(const std::string& path, const std::string& format,
                                              const JobConfig& job, int min_samples) {
  TokenData data = path.empty() ? builtin_corpus() : TokenData::load({path, format});
  data.validate(job.model.vocab, job.model.sequence, min_samples);
  return std::make_shared<const TokenData>(std::move(data));
}

}  // namespace

TrainingData load_train_data(const JobConfig& job) {
  const int sequence = job.model.sequence;
  const int64_t batch = job.training.global_batch;
  const int64_t eval_samples = int64_t{job.run.eval_batches} * batch;
  std::vector<DataMixture::Source> train, held_out;
  const std::vector<DataSourceConfig> sources = job.data.training_sources();
  for (const DataSourceConfig& source : sources) {
    const bool holds_out = job.data.valid_fraction > 0;
    const std::shared_ptr<const TokenData> data =
        load_checked(source.path, source.format, job, holds_out ? 1 : job.training.global_batch);
    if (!holds_out) {
      train.push_back({data, 0, data->size(), source.weight});
      continue;
    }
    // The last valid_fraction of the source's windows (at least one) are held out; the
    // training windows end where the held-out ones begin.
    const int64_t samples = (data->size() - 1) / sequence;
    const auto held = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(job.data.valid_fraction * static_cast<double>(samples))));
    const int64_t trained = samples - held;
    if (trained < batch)
      throw DataError(data->description() + " holds " + std::to_string(samples) + " samples of sequence " +
                      std::to_string(sequence) + "; with data.valid_fraction = " +
                      std::to_string(job.data.valid_fraction) + " holding out " + std::to_string(held) + ", " +
                      std::to_string(trained) + " remain for training, fewer than one global batch of " +
                      std::to_string(batch) + "; use more data or a smaller valid_fraction or training.global_batch");
    train.push_back({data, 0, trained * sequence + 1, source.weight});
    held_out.push_back({data, trained * sequence, held * sequence + 1, source.weight});
  }
  if (!job.data.valid.empty()) {
    const std::shared_ptr<const TokenData> data = load_checked(job.data.valid, job.data.valid_format, job, 1);
    held_out.push_back({data, 0, data->size(), 1.0});
  }
  TrainingData result{DataMixture(std::move(train), job.training.seed, sequence), std::nullopt};
  if (held_out.empty()) return result;
  result.held_out.emplace(std::move(held_out), job.training.seed, sequence);
  int64_t held_samples = 0;
  for (int s = 0; s < result.held_out->source_count(); ++s) held_samples += result.held_out->samples_of(s);
  if (job.run.eval_interval > 0 && held_samples < eval_samples)
    throw DataError("the held-out data (" + result.held_out->description() + ") holds " +
                    std::to_string(held_samples) + " samples, fewer than run.eval_batches x training.global_batch = " +
                    std::to_string(eval_samples) + " that each evaluation reads; lower run.eval_batches, or hold "
                    "out more data");
  return result;
}

}  // namespace axonn
