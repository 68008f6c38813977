#include "runner/pmix/pretend_nodes.hpp"

#include <unistd.h>

#include <climits>
#include <stdexcept>

namespace axonn {

std::vector<PretendNode> pretend_nodes(int ranks, int nodes, const std::string& host) {
  if (ranks < 1) throw std::invalid_argument("the number of ranks must be at least 1 (got " + std::to_string(ranks) + ")");
  if (nodes < 1 || nodes > ranks)
    throw std::invalid_argument("the number of pretend nodes must be between 1 and the " + std::to_string(ranks) +
                                " ranks (got " + std::to_string(nodes) + ")");
  std::vector<PretendNode> out(static_cast<size_t>(nodes));
  int next = 0;
  for (int n = 0; n < nodes; ++n) {
    PretendNode& node = out[static_cast<size_t>(n)];
    node.hostname = nodes > 1 ? host + "-n" + std::to_string(n) : host;
    const int count = ranks / nodes + (n < ranks % nodes ? 1 : 0);
    for (int i = 0; i < count; ++i) node.ranks.push_back(next++);
  }
  return out;
}

std::string this_hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace axonn
