#pragma once
// The chooser's input for the layout model's tiny MoE job, whose volumes the MoE layout tests
// compute by hand: L = 2, C = 8, V = 16, T = 4, E = 4 experts, top-2, block 1 is MoE (block 0
// dense); global batch 16, micro-batch 2, float32; at G_data·G_z = 8 each rank runs one
// micro-batch of mb = 2 sequences, m = 8 tokens, dropless R = m·k = 16 rows. The heads H and
// the machine (nodes of tasks_per_node ranks, 1 TB each) are the caller's.
#include "layout/layout_search.hpp"

namespace axonn::test {

inline ChooserInput tiny_moe_input(int heads, int nodes, int tasks_per_node) {
  ChooserInput in;
  in.model = {2, 8, heads, 16, 4};
  in.model.experts = 4;
  in.model.top_k = 2;
  in.model.moe_every = 2;
  in.batch = {16, 2, ElementType::float32};
  in.machine.nodes = nodes;
  in.machine.tasks_per_node = tasks_per_node;
  in.machine.memory_bytes = 1e12;
  in.overlap_comm = false;
  return in;
}

}  // namespace axonn::test
