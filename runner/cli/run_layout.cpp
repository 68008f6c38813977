#include "runner/cli/run_layout.hpp"

#include "runner/cli/environment.hpp"
#include "layout/layout_memory.hpp"

namespace axonn {
namespace {

// A layout that cannot run this job: a clear error naming what does not fit and a fix.
void check_layout(const Layout& layout, const ChooserInput& plan, const std::string& source) {
  if (layout.world() != plan.world())
    throw LayoutError("layout " + format_layout(layout) + " (" + source + ") has " + std::to_string(layout.world()) +
                      " ranks but the job has " + std::to_string(plan.world()) + "; give a layout whose product is " +
                      std::to_string(plan.world()) + " (e.g. " + std::to_string(plan.world()) +
                      "x1x1x1) or unset it to let the chooser pick");
  // Its own fix ("set model.experts or drop 'e4'"), not the axis sizes': a dense job's
  // layouts have no expert parallelism to suggest.
  const std::string experts = expert_problem(plan.model, layout);
  if (!experts.empty())
    throw LayoutError("layout " + format_layout(layout) + " (" + source + ") does not fit the job: " + experts);
  // Its own counts that would run, not the axis sizes'.
  const std::string chunks = tp_chunks_problem(plan.model, plan.batch, layout);
  if (!chunks.empty()) throw LayoutError(chunks + " (layout from " + source + ")");
  const std::string problem = divisibility_problem(plan.model, plan.batch, layout);
  if (!problem.empty())
    throw LayoutError("layout " + format_layout(layout) + " (" + source + ") does not fit the job: " + problem +
                      "; pick axis sizes that divide the model (`axonn layout` lists the ones that do)");
  // A mode the job forces that the layout cannot run with: names both settings.
  const std::string modes = sharding_problem(plan, layout);
  if (!modes.empty()) throw LayoutError(modes + " (layout from " + source + ")");
}

}  // namespace

RunLayout decide_run_layout(const Topology& topology, const SiteConfig& site, const JobConfig& job,
                            const std::optional<std::string>& layout_option) {
  // Uneven nodes (e.g. 5 ranks on 2 nodes) are priced as one node: the chooser's block
  // placement needs equal ranks per node.
  const int per_node = topology.uniform_tasks_per_node();
  const int nodes = per_node > 0 ? topology.nodes : 1;
  RunLayout run;
  run.plan = chooser_input(site, job, nodes, per_node > 0 ? per_node : topology.world, topology.hostnames);

  if (const auto env = environment("AXONN_LAYOUT")) {
    run.layout = parse_layout(*env);
    run.origin = environment("AXONN_LAYOUT_ORIGIN").value_or("AXONN_LAYOUT=" + *env + " from the environment");
    check_layout(run.layout, run.plan, "AXONN_LAYOUT");
    // The plugin's auto mode chose it with the same deterministic chooser: show its table.
    if (run.origin.find("auto") != std::string::npos) run.ranking = choose_layout(run.plan);
    return run;
  }
  if (layout_option) {
    run.layout = parse_layout(*layout_option);
    run.origin = "--layout " + *layout_option;
    check_layout(run.layout, run.plan, "--layout");
    return run;
  }
  ChooserResult result = choose_layout(run.plan);
  if (!result.fits()) {
    // A training.tp_chunks that splits no layout's micro-batch is the job's error, not the
    // resources': name it at the layout the chooser picks without it.
    if (run.plan.batch.tp_chunks > 1) {
      ChooserInput one_chunk = run.plan;
      one_chunk.batch.tp_chunks = 1;
      const ChooserResult without = choose_layout(one_chunk);
      if (without.fits())
        throw LayoutError(tp_chunks_problem(run.plan.model, run.plan.batch, without.best().layout) +
                          " (the layout the chooser picks with one chunk)");
    }
    throw NoFittingLayout("no layout of " + std::to_string(run.plan.world()) +
                          " ranks fits this job: " + smallest_fitting_change(run.plan));
  }
  run.layout = result.best().layout;
  run.origin = "the chooser: best of " + std::to_string(result.ranked.size()) + " ranked layouts for " +
               std::to_string(run.plan.world()) + " ranks on " + std::to_string(nodes) + " node(s) (site " + site.name +
               "; set AXONN_LAYOUT or --layout to override)";
  run.ranking = std::move(result);
  return run;
}

}  // namespace axonn
