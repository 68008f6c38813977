#include "plugins/spank/layout_decision.hpp"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace axonn::spank {
namespace {

std::string count_of(int n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

// As the user would type it: the axis order only when it is not the default.
std::string option_text(const Layout& l) {
  return l.order == Layout{}.order ? format_layout(l) : format_layout_with_order(l);
}

// The chooser's view of this step, when a job TOML gives the model. A step whose nodes have
// different task counts does not fit the chooser's block model (node = rank / tasks_per_node),
// so it is priced as one task per node: every group is taken to cross nodes, a pessimistic
// estimate that never promises bandwidth the step lacks.
std::optional<ChooserInput> chooser_for(const StepShape& step, const SiteConfig& site, const JobInput* job) {
  if (!job) return std::nullopt;
  if (step.tasks_per_node > 0) return chooser_input(site, job->config, step.nodes, step.tasks_per_node, step.hostnames);
  return chooser_input(site, job->config, step.tasks, 1);
}

// Without a model: pure data parallel when the site policy allows it, else the allowed layout
// with the fewest tensor-parallel ranks, those on x first (x groups are node-local first),
// then y, then z.
std::optional<Layout> layout_without_model(int tasks, const SiteConfig& site) {
  Layout best;
  best.data = tasks;
  if (policy_problem(site, best).empty()) return best;
  std::optional<Layout> found;
  const auto key = [](const Layout& l) { return std::make_tuple(l.tensor_parallel(), -l.x, -l.y, -l.z); };
  for (const Layout& l : enumerate_layouts(tasks)) {
    if (l.order != Layout{}.order || !policy_problem(site, l).empty()) continue;
    if (!found || key(l) < key(*found)) found = l;
  }
  return found;
}

// What --axonn-layout=auto picks: the chooser's best with a model, else layout_without_model.
std::optional<Layout> auto_choice(const StepShape& step, const SiteConfig& site, const ChooserInput* input) {
  if (!input) return layout_without_model(step.tasks, site);
  const ChooserResult result = choose_layout(*input);
  if (!result.fits()) return std::nullopt;
  return result.best().layout;
}

// A layout of the step's task count that runs: the wanted tensor-parallel sizes and expert
// parallelism with the data-parallel size scaled to the tasks (when the expert parallelism
// still divides it), else auto's choice.
std::optional<Layout> alternative(const Layout& wanted, const StepShape& step, const SiteConfig& site,
                                  const ChooserInput* input) {
  if (step.tasks % wanted.tensor_parallel() == 0 && (step.tasks / wanted.tensor_parallel()) % wanted.experts == 0) {
    Layout l = wanted;
    l.data = step.tasks / wanted.tensor_parallel();
    const std::string why = input ? rejection_reason(*input, l) : policy_problem(site, l);
    if (why.empty()) return l;
  }
  return auto_choice(step, site, input);
}

// Where a layout came from, which decides how the fix is phrased.
enum class Source { option, validated_env, overriding_env };

std::string fix_for(Source source, const std::optional<Layout>& alt, const StepShape& step, const ChooserInput* input) {
  if (!alt) {
    const std::string why = input ? smallest_fitting_change(*input) : "the site policy allows none";
    return "; no layout of " + count_of(step.tasks, "task") + " runs it (" + why + ")";
  }
  const std::string a = option_text(*alt);
  switch (source) {
    case Source::option:
      return "; use --axonn-layout=" + a + " or --axonn-layout=auto";
    case Source::validated_env:
      return "; set AXONN_LAYOUT=" + a + " or use --axonn-layout=auto";
    case Source::overriding_env:
      break;
  }
  return "; unset AXONN_LAYOUT to use the plugin's choice, or set AXONN_LAYOUT=" + a;
}

// Throws unless `l` runs on the step: product = tasks, then (with a model) divisibility (the
// expert parallelism's too), site policy and memory, or (without) the site policy alone.
// `shown` is how the user gave it.
void check_layout(const Layout& l, const std::string& shown, Source source, const StepShape& step,
                  const SiteConfig& site, const JobInput* job, const ChooserInput* input) {
  if (l.world() != step.tasks)
    throw SpankError(shown + " has " + count_of(l.world(), "rank") + " (data " + std::to_string(l.data) + " x X " +
                     std::to_string(l.x) + " x Y " + std::to_string(l.y) + " x Z " + std::to_string(l.z) +
                     ") but the step has " + count_of(step.tasks, "task") +
                     fix_for(source, alternative(l, step, site, input), step, input));
  const std::string why = input ? rejection_reason(*input, l) : policy_problem(site, l);
  if (!why.empty())
    throw SpankError(shown + " cannot run " + (job ? "job " + job->label : "on site " + site.name) + " with " +
                     count_of(step.tasks, "task") + ": " + why +
                     fix_for(source, alternative(l, step, site, input), step, input));
}

std::string context_of(const SiteConfig& site, const JobInput* job, const std::string& what_job_did) {
  return "site " + site.name + (job ? ", job " + job->label + what_job_did : "");
}

}  // namespace

std::string describe(const StepShape& step) {
  std::string s = count_of(step.tasks, "task") + " on " + count_of(step.nodes, "node");
  if (step.tasks_per_node == 0) s += " (uneven tasks per node, priced as 1 per node)";
  return s;
}

std::string policy_problem(const SiteConfig& site, const Layout& l) { return policy_problem(site_policy(site), l); }

Decision decide_layout(const LayoutRequest& request, const StepShape& step, const SiteConfig& site, const JobInput* job,
                       const std::optional<std::string>& env_layout) {
  const std::optional<ChooserInput> chooser = chooser_for(step, site, job);
  const ChooserInput* input = chooser ? &*chooser : nullptr;
  const std::string given = "--axonn-layout=" + request.text;
  Decision d;
  if (step.tasks_per_node > site.gpus_per_node)
    d.warnings.push_back(count_of(step.tasks_per_node, "task") + " per node, but site " + site.name + " has " +
                         count_of(site.gpus_per_node, "GPU") + " per node (node.gpus_per_node in " + site.source +
                         "): tasks will share GPUs");
  const std::string step_text = " for " + describe(step);
  switch (request.mode) {
    case Mode::automatic: {
      if (input) {
        const ChooserResult result = choose_layout(*input);
        if (!result.fits())
          throw SpankError(given + ": no layout of " + count_of(step.tasks, "task") + " fits job " + job->label +
                           " on site " + site.name + ": " + smallest_fitting_change(*input));
        d.layout = result.best().layout;
        char predicted[160];
        std::snprintf(predicted, sizeof predicted,
                      ": predicted step %.3f ms, recompute %s, optimizer %s, best of %zu ranked",
                      result.best().cost.step_s() * 1e3, recompute_name(result.best().recompute),
                      result.best().shard_optimizer ? "sharded" : "unsharded", result.ranked.size());
        d.summary = given + " chose " + format_layout_with_order(d.layout) + step_text + " (" +
                    context_of(site, job, predicted) + ")";
      } else {
        const auto l = layout_without_model(step.tasks, site);
        if (!l)
          throw SpankError(given + ": no layout of " + count_of(step.tasks, "task") + " satisfies the policy of site " +
                           site.name + " (" + site.source + ")");
        d.layout = *l;
        d.summary =
            given + " chose " + format_layout_with_order(d.layout) + step_text + " (site " + site.name +
            "; no job TOML on the command line, so no model to price: " +
            (l->tensor_parallel() == 1 ? "pure data parallel)" : "fewest tensor-parallel ranks the policy allows)");
      }
      break;
    }
    case Mode::explicit_layout:
      check_layout(request.layout, given, Source::option, step, site, job, input);
      d.layout = request.layout;
      d.summary = given + " gives " + format_layout_with_order(d.layout) + step_text + " (" +
                  context_of(site, job, ": divisibility, policy and memory checked") +
                  (job ? ")" : "; task count and site policy checked, no job TOML on the command line)");
      break;
    case Mode::validate: {
      if (!env_layout) {
        const auto alt = auto_choice(step, site, input);
        throw SpankError(
            given + " checks the layout in AXONN_LAYOUT, which is not set in your environment; " +
            (alt ? "export AXONN_LAYOUT=" + option_text(*alt) + " (for example) " : std::string("set it ")) +
            "or use --axonn-layout=auto");
      }
      const Layout l = parse_layout_text(*env_layout, "AXONN_LAYOUT");
      check_layout(l, "AXONN_LAYOUT=" + sanitize_line(*env_layout), Source::validated_env, step, site, job, input);
      d.layout = l;
      d.summary = given + " checked AXONN_LAYOUT=" + format_layout_with_order(l) + step_text + " (" +
                  context_of(site, job, ": divisibility, policy and memory checked") +
                  (job ? ")" : "; task count and site policy checked, no job TOML on the command line)");
      break;
    }
    case Mode::off:
      throw SpankError("decide_layout: mode off decides nothing (the caller skips it)");
  }
  if (env_layout && request.mode != Mode::validate) {
    const std::string shown = "AXONN_LAYOUT=" + sanitize_line(*env_layout) + " (from your environment)";
    const Layout user = parse_layout_text(*env_layout, "AXONN_LAYOUT (from your environment)");
    check_layout(user, shown, Source::overriding_env, step, site, job, input);
    d.warnings.push_back(shown + " is what the tasks get: the plugin never overrides it (" + given + " gives " +
                         format_layout_with_order(d.layout) + "); unset AXONN_LAYOUT to use the plugin's choice");
  }
  d.summary = sanitize_line(d.summary);
  return d;
}

Layout check_handoff(std::string_view text, int tasks, const SiteConfig& site) {
  const Layout l = parse_layout_text(text, "the layout srun decided");
  if (l.world() != tasks)
    throw SpankError("srun decided layout " + format_layout_with_order(l) + " with " + count_of(l.world(), "rank") +
                     ", but this step has " + count_of(tasks, "task") + " on slurmstepd");
  const std::string why = policy_problem(site, l);
  if (!why.empty())
    throw SpankError("srun decided layout " + format_layout_with_order(l) + ", which site " + site.name +
                     " forbids: " + why);
  return l;
}

std::string kept_user_layout_origin(std::string_view user_layout, std::string_view origin) {
  constexpr std::string_view kPrefix = "axonn SPANK plugin: ";
  if (origin.starts_with(kPrefix)) origin.remove_prefix(kPrefix.size());
  return sanitize_line("AXONN_LAYOUT=" + std::string(user_layout.substr(0, kMaxOptionLength)) +
                       " from the user's environment, kept by the axonn SPANK plugin, which never overrides it (it had "
                       "decided: " +
                       std::string(origin) + ")");
}

}  // namespace axonn::spank
