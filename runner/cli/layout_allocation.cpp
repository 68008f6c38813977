#include "runner/cli/layout_allocation.hpp"

#include <charconv>

#include "runner/cli/args.hpp"
#include "runner/cli/environment.hpp"

namespace axonn {
namespace {

struct Variable {
  std::string name;
  int value = 0;
  std::string shown() const { return name + "=" + std::to_string(value); }
};

// The first of `names` that is set and not empty, as a count in [1, max_count].
std::optional<Variable> count_variable(std::initializer_list<const char*> names, int max_count) {
  for (const char* name : names) {
    const std::optional<std::string> text = environment(name);
    if (!text) continue;
    const std::string& s = *text;
    int value = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size() || value < 1 || value > max_count)
      throw UsageError(std::string(name) + "='" + s + "' is not a count in [1, " + std::to_string(max_count) +
                       "]; give --nodes N and --gpus-per-node G instead of reading the allocation");
    return Variable{name, value};
  }
  return std::nullopt;
}

}  // namespace

std::optional<AllocationShape> slurm_allocation(int max_count) {
  const auto nodes = count_variable({"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}, max_count);
  if (!nodes) return std::nullopt;
  AllocationShape shape;
  shape.nodes = nodes->value;
  shape.nodes_from = nodes->shown();
  if (const auto per_node = count_variable({"SLURM_NTASKS_PER_NODE"}, max_count)) {
    shape.ranks_per_node = per_node->value;
    shape.ranks_per_node_from = per_node->shown();
  } else if (const auto tasks = count_variable({"SLURM_NTASKS"}, max_count)) {
    if (tasks->value % shape.nodes != 0)
      throw UsageError(tasks->shown() + " tasks do not split evenly over " + nodes->shown() +
                       " nodes; give --gpus-per-node G (ranks per node) to price an even split");
    shape.ranks_per_node = tasks->value / shape.nodes;
    shape.ranks_per_node_from = tasks->shown() + " / " + std::to_string(shape.nodes) + " nodes";
  } else if (const auto gpus = count_variable({"SLURM_GPUS_ON_NODE"}, max_count)) {
    shape.ranks_per_node = gpus->value;
    shape.ranks_per_node_from = gpus->shown();
  }
  return shape;
}

}  // namespace axonn
