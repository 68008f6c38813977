// axonn layout --site S --job J --nodes N [--gpus-per-node G] [--top K] [--explain] [--json]
// Ranks every 4D layout of N nodes x G GPUs for the job on the site. Exit 0 with the best,
// 2 on bad input, 3 when nothing fits (naming the smallest change that would make one fit).
#include <cstdio>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/layout_json.hpp"
#include "config/job_config.hpp"
#include "layout/layout_report.hpp"

namespace axonn {

int command_layout(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"site", true, "site config TOML (site_configs/*.toml)"},
      {"job", true, "job TOML (job_templates/*.toml)"},
      {"model", true, "same as --job"},
      {"nodes", true, "number of nodes"},
      {"gpus-per-node", true, "GPUs (ranks) per node; default: the site's gpus_per_node"},
      {"top", true, "rows of the ranked table (default 10)"},
      {"explain", false, "memory formula, why runner-ups lost, rejected layouts"},
      {"json", false, "print the result as JSON"},
      {"help", false, "this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::printf("usage: axonn layout --site S --job J --nodes N [options]\n%s", format_options(specs).c_str());
    return exit_code::ok;
  }
  if (!args.positionals().empty()) throw UsageError("unexpected argument '" + args.positionals()[0] + "'");
  const std::string job_path = args.value("job").value_or(args.value("model").value_or(""));
  if (job_path.empty()) throw UsageError("missing required option '--job' (a job TOML, e.g. job_templates/tiny.toml)");
  const SiteConfig site = load_site_config(args.required("site"));
  const JobConfig job = load_job_config(job_path, site);
  const int nodes = static_cast<int>(args.integer("nodes", 1, 1 << 20).value_or(1));
  const int per_node = static_cast<int>(args.integer("gpus-per-node", 1, 4096).value_or(site.gpus_per_node));
  const int top = static_cast<int>(args.integer("top", 1, 1 << 20).value_or(10));

  const ChooserInput input = chooser_input(site, job, nodes, per_node);
  const ChooserResult result = choose_layout(input);
  const std::string change = result.fits() ? "" : smallest_fitting_change(input);

  if (args.has("json")) {
    std::fputs(layout_result_json(result, top, change).c_str(), stdout);
  } else {
    std::printf("site %s, job %s: %d nodes x %d GPUs = %d ranks\n", site.name.c_str(), job_path.c_str(), nodes,
                per_node, input.world());
    if (result.fits()) {
      const Candidate& best = result.best();
      std::printf("best layout: %s (data x X x Y x Z = %s, rank order fastest first %s), predicted step %.3f ms\n\n",
                  format_layout_with_order(best.layout).c_str(), format_layout(best.layout).c_str(),
                  format_order(best.layout).c_str(), best.cost.step_s() * 1e3);
      std::fputs(format_ranked_table(result, top).c_str(), stdout);
    }
    if (args.has("explain")) std::printf("\n%s", format_explain(result, top).c_str());
  }
  if (!result.fits()) {
    std::fprintf(stderr, "axonn layout: no layout of %d ranks fits this job: %s\n", input.world(), change.c_str());
    return exit_code::no_layout;
  }
  return exit_code::ok;
}

}  // namespace axonn
