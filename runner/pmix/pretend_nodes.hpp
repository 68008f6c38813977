#pragma once
// How `axonn run -n N --nodes-sim K` places N ranks on K pretend nodes of this machine.
#include <string>
#include <vector>

namespace axonn {

struct PretendNode {
  std::string hostname;    // "<host>-n<i>" when there are several nodes, else "<host>"
  std::vector<int> ranks;  // world ranks on this node, ascending and consecutive
};

// Splits `ranks` into `nodes` blocks in rank order, like `srun -m block`: the first
// ranks % nodes nodes get one rank more. Throws std::invalid_argument unless
// 1 <= nodes <= ranks.
std::vector<PretendNode> pretend_nodes(int ranks, int nodes, const std::string& host);

// This machine's host name (gethostname).
std::string this_hostname();

}  // namespace axonn
