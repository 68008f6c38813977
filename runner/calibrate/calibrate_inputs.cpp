#include "runner/calibrate/calibrate_inputs.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "runner/calibrate/calibrate_links.hpp"
#include "runner/cli/local_gpu_site.hpp"
#include "comm/cuda_device.hpp"
#include "layout/alpha_beta_fit.hpp"

namespace axonn {
namespace {

namespace fs = std::filesystem;

// The output is written at the end (a temporary file beside it, renamed over it): its folder
// must exist and take files, and the path must not be a folder.
void check_output(const std::string& output) {
  const fs::path path(output);
  const fs::path folder = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  std::error_code ec;
  const auto hint = "; name a file in a folder you can write (--output site_configs/measured.toml)";
  if (fs::is_directory(path, ec)) throw UsageError("--output " + output + " is a folder" + hint);
  if (!fs::is_directory(folder, ec))
    throw UsageError("--output " + output + ": folder " + folder.string() + " does not exist" + hint);
  if (access(folder.c_str(), W_OK) != 0)
    throw UsageError("--output " + output + ": folder " + folder.string() + " is not writable (" +
                     std::strerror(errno) + ")" + hint);
  if (fs::exists(path, ec) && access(path.c_str(), W_OK) != 0)
    throw UsageError("--output " + output + " exists and is not writable (" + std::strerror(errno) + ")" + hint);
}

}  // namespace

const std::vector<OptionSpec>& calibrate_option_specs() {
  static const std::vector<OptionSpec> specs = {
      {"output", true, "the site TOML to write (required): the base site with the measured keys replaced"},
      {"site", true, "the base site TOML (default: AXONN_SITE_CONFIG, else the built-in laptop-cpu site)"},
      {"job", true, "a job TOML: measure its GEMM shapes, dtype and device (default: square GEMMs, the site's dtype)"},
      {"quick", false,
       "messages up to 4 MiB (more only while the largest is not yet twice the smallest's time), fewer repetitions: a "
       "first look in under a minute"},
      {"tiers", true,
       "link tiers that must be measured, e.g. intra-node,inter-node (default: those this allocation spans)"},
      {"max-residual", true, "largest accepted RMS relative residual of a fit (default 0.5)"},
      {"timeout-ms", true, "collective timeout (default 300000)"},
      {"help", false, "this help"},
  };
  return specs;
}

CalibrateInputs load_calibrate_inputs(const Args& args) {
  if (!args.positionals().empty())
    throw UsageError("calibrate takes no positional argument, got '" + args.positionals()[0] +
                     "'; name the job with --job " + args.positionals()[0]);
  CalibrateInputs in;
  const std::optional<std::string> output = args.value("output");
  if (!output || output->empty())
    throw UsageError("--output SITE.toml is required: the file calibrate writes the measured site to");
  in.output = *output;
  check_output(in.output);
  in.quick = args.has("quick");
  if (const auto tiers = args.value("tiers")) in.tiers = parse_tiers(*tiers);
  in.max_residual = kDefaultMaxResidual;
  if (const auto text = args.value("max-residual")) {
    char* end = nullptr;
    in.max_residual = std::strtod(text->c_str(), &end);
    if (text->empty() || *end != '\0' || !(in.max_residual > 0) || !(in.max_residual <= 100))
      throw UsageError("--max-residual " + *text + ": expected a number in (0, 100], e.g. 0.5");
  }
  args.integer("timeout-ms", kTimeoutMsMin, kTimeoutMsMax);

  in.site = choose_run_site(args.value("site"));
  const std::optional<std::string> job_path = args.value("job");
  if (job_path) in.job = load_job_config(*job_path, in.site.config);
  const std::string device = in.job ? in.job->training.device : "auto";
  if (in.site.builtin)
    if (std::optional<RunSite> gpu = local_gpu_site(in.site, device)) {
      in.site = std::move(*gpu);
      if (job_path) in.job = load_job_config(*job_path, in.site.config);
    }
  if (in.job) {
    in.device_job = *in.job;
  } else {
    in.device_job = load_job_config_string("", "(calibrate without --job)", in.site.config);
    if (cuda_device_count() == 0) in.device_job.training.dtype = ElementType::float32;
  }
  return in;
}

}  // namespace axonn
