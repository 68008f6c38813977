#include "comm/group_spec.hpp"

#include <algorithm>

#include "comm/communicator.hpp"

namespace axonn {

std::string format_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return s;
}

int group_rank_of(const GroupSpec& group, int world_rank) {
  auto it = std::find(group.members.begin(), group.members.end(), world_rank);
  if (it == group.members.end())
    throw CommError("group '" + group.name + "' (world ranks " + format_ranks(group.members) +
                    ") does not contain this rank " + std::to_string(world_rank));
  return static_cast<int>(it - group.members.begin());
}

}  // namespace axonn
