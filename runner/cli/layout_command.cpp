// axonn layout [--site S] --job J [--nodes N] [--gpus-per-node G] [--top K] [--explain] [--json]
// Ranks every 4D layout of N nodes x G GPUs for the job on the site (--site, else
// AXONN_SITE_CONFIG, else the built-in one, as axonn train chooses); without --nodes, of the
// Slurm allocation it runs in. Exit 0 with the best, 2 on bad input, 3 when nothing fits
// (naming the smallest change that would make one fit).
// axonn layout --site S --job J --scan A:B|A,B,C [--gpus-per-node G] [--json]
// The best layout at each GPU count and what it buys (runner/scan/layout_scan.hpp); exit 3 only when
// no layout fits at any count, after saying why at each.
#include <cstdio>

#include "runner/cli/args.hpp"
#include "runner/cli/commands.hpp"
#include "runner/cli/layout_allocation.hpp"
#include "runner/cli/layout_json.hpp"
#include "runner/scan/layout_scan.hpp"
#include "runner/cli/run_layout.hpp"
#include "runner/scan/scan_counts.hpp"
#include "runner/cli/train_inputs.hpp"
#include "config/job_config.hpp"
#include "core/exit_codes.hpp"
#include "layout/layout_report.hpp"

namespace axonn {
namespace {

struct RankCount {
  int nodes = 0;
  int per_node = 0;
  std::string from;  // "" for the command line, else "the Slurm allocation: ..."
};

// --nodes and --gpus-per-node, else the allocation's counts, else the site's GPUs per node.
RankCount rank_count(const Args& args, const SiteConfig& site) {
  const auto nodes = args.integer("nodes", 1, 1 << 20);
  const auto per_node = args.integer("gpus-per-node", 1, 4096);
  RankCount count;
  if (nodes) {
    count.nodes = static_cast<int>(*nodes);
    count.per_node = static_cast<int>(per_node.value_or(site.gpus_per_node));
  } else {
    const auto allocation = slurm_allocation(kMaxWorld);
    if (!allocation)
      throw UsageError(
          "missing --nodes N: outside a Slurm allocation there is no node count to price; give --nodes N "
          "[--gpus-per-node G], or run it inside salloc or sbatch, where it reads SLURM_JOB_NUM_NODES");
    count.nodes = allocation->nodes;
    count.from = "the Slurm allocation: " + allocation->nodes_from + "; ";
    if (per_node) {
      count.per_node = static_cast<int>(*per_node);
      count.from += "--gpus-per-node " + std::to_string(*per_node);
    } else if (allocation->ranks_per_node > 0) {
      count.per_node = allocation->ranks_per_node;
      count.from += allocation->ranks_per_node_from;
    } else {
      count.per_node = site.gpus_per_node;
      count.from += "no task count, so site " + site.name + "'s gpus_per_node";
    }
  }
  if (int64_t{count.nodes} * count.per_node > kMaxWorld)
    throw UsageError(std::to_string(count.nodes) + " nodes x " + std::to_string(count.per_node) +
                     " GPUs = " + std::to_string(int64_t{count.nodes} * count.per_node) + " ranks is more than the " +
                     std::to_string(kMaxWorld) + " the chooser handles; give fewer --nodes or --gpus-per-node");
  return count;
}

// --scan: the counts, whole nodes of --gpus-per-node (else the site's) GPUs each.
int scan_command(const Args& args, const SiteConfig& site, const JobConfig& job, const std::string& job_path) {
  for (const char* single : {"nodes", "top", "explain"})
    if (args.has(single))
      throw UsageError(std::string("--") + single + " prices one GPU count and --scan many; drop --" + single +
                       ", or drop --scan and run axonn layout --nodes N");
  const std::vector<int> counts = parse_scan_counts(*args.value("scan"), kMaxWorld);
  const auto per_node_option = args.integer("gpus-per-node", 1, 4096);
  const int per_node = static_cast<int>(per_node_option.value_or(site.gpus_per_node));
  const std::string per_node_from = per_node_option ? "--gpus-per-node" : "site " + site.name + "'s gpus_per_node";
  require_whole_nodes(counts, per_node, per_node_from);
  const LayoutScan scan = scan_layouts(site, job, job_path, counts, per_node, per_node_from);
  std::fputs((args.has("json") ? layout_scan_json(scan) : format_layout_scan(scan)).c_str(), stdout);
  if (scan.rows.empty()) {
    std::fflush(stdout);
    throw NoFittingLayout("no layout fits this job at any GPU count of --scan " + *args.value("scan") +
                          "; each count's reason is above");
  }
  return exit_code::ok;
}

}  // namespace

int command_layout(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"site", true,
       "site config TOML (site_configs/*.toml); default: AXONN_SITE_CONFIG, else the built-in laptop-cpu site"},
      {"job", true, "job TOML (job_templates/*.toml)"},
      {"model", true, "same as --job"},
      {"nodes", true, "number of nodes; default: the Slurm allocation's (SLURM_JOB_NUM_NODES)"},
      {"gpus-per-node", true,
       "GPUs (ranks) per node; default: the allocation's tasks or GPUs per node, else the site's gpus_per_node"},
      {"top", true, "rows of the ranked table (default 10)"},
      {"explain", false, "memory formula, why runner-ups lost, rejected layouts"},
      {"scan", true,
       "A:B (GPU counts doubling from A to B) or A,B,C: the best layout at each count, its throughput, the knee "
       "where added GPUs stop paying, energy and cost (with the site's [cost]); instead of --nodes; nodes of "
       "--gpus-per-node, else the site's gpus_per_node, GPUs"},
      {"json", false, "print the result as JSON"},
      {"help", false, "this help"},
  };
  const std::optional<Args> parsed =
      parse_or_usage(argv, specs, "axonn layout [--site S] --job J [--nodes N | --scan A:B] [options]");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  if (!args.positionals().empty()) throw UsageError("unexpected argument '" + args.positionals()[0] + "'");
  const std::string job_path = args.value("job").value_or(args.value("model").value_or(""));
  if (job_path.empty()) throw UsageError("missing required option '--job' (a job TOML, e.g. job_templates/tiny.toml)");
  // The site as `axonn train` chooses it: --site, else AXONN_SITE_CONFIG, else the built-in one.
  const RunSite run_site = choose_run_site(args.value("site"));
  const SiteConfig& site = run_site.config;
  if (!args.has("site") && !args.has("json")) std::printf("%s\n", run_site.chosen_by.c_str());
  const JobConfig job = load_job_config(job_path, site);
  if (args.has("scan")) return scan_command(args, site, job, job_path);
  const RankCount count = rank_count(args, site);
  const int top = static_cast<int>(args.integer("top", 1, 1 << 20).value_or(10));

  const ChooserInput input = chooser_input(site, job, count.nodes, count.per_node);
  const ChooserResult result = choose_layout(input);
  const std::string change = result.fits() ? "" : smallest_fitting_change(input);

  if (args.has("json")) {
    std::fputs(layout_result_json(result, top, change, count.from).c_str(), stdout);
  } else {
    const std::string from = count.from.empty() ? "" : " (" + count.from + ")";
    std::printf("site %s, job %s: %d nodes x %d GPUs = %d ranks%s\n", site.name.c_str(), job_path.c_str(), count.nodes,
                count.per_node, input.world(), from.c_str());
    if (result.fits()) {
      const Candidate& best = result.best();
      std::printf(
          "best layout: %s (data x X x Y x Z = %s, rank order fastest first %s), predicted step %.3f ms, recompute "
          "%s, optimizer %s\n\n",
          format_layout_with_order(best.layout).c_str(), format_layout(best.layout).c_str(),
          format_order(best.layout).c_str(), best.cost.step_s() * 1e3, recompute_name(best.recompute),
          best.shard_optimizer ? "sharded" : "unsharded");
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
