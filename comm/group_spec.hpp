#pragma once
// A process group as the bootstraps (gloo_mesh.hpp, nccl_groups.hpp) take it: a name and
// its members' world ranks in group-rank order.
#include <string>
#include <vector>

namespace axonn {

struct GroupSpec {
  std::string name;          // "x", "y", "z", "data", "world", ...
  std::vector<int> members;  // world ranks in group-rank order; must contain this rank
};

// "0,2,4": world ranks as error messages list them.
std::string format_ranks(const std::vector<int>& ranks);

// This rank's position in the group; throws CommError if it is not a member.
int group_rank_of(const GroupSpec& group, int world_rank);

}  // namespace axonn
