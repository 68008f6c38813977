#include "trainer/model/routing_plan.hpp"

#include <stdexcept>
#include <string>

namespace axonn {

RoutingPlan plan_routing(const std::vector<int32_t>& experts, int64_t k, int64_t E, int64_t sequence,
                         int64_t capacity_per_sequence) {
  const auto pairs = static_cast<int64_t>(experts.size());
  if (k < 1 || E < 1 || sequence < 1 || pairs % (k * sequence) != 0)
    throw std::invalid_argument("plan_routing: " + std::to_string(pairs) + " choices do not make tokens of k=" +
                                std::to_string(k) + " choices in sequences of " + std::to_string(sequence));
  const int64_t m = pairs / k, sequences = m / sequence;
  const bool dropless = capacity_per_sequence == 0;
  RoutingPlan plan;
  plan.start.assign(static_cast<size_t>(E), 0);
  plan.used.assign(static_cast<size_t>(E), 0);
  plan.routed.assign(static_cast<size_t>(E), 0);
  plan.slots.assign(static_cast<size_t>(pairs), -1);
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t e = experts[static_cast<size_t>(i)];
    if (e < 0 || e >= E)
      throw std::invalid_argument("plan_routing: token " + std::to_string(i / k) + " chose expert " +
                                  std::to_string(e) + " of " + std::to_string(E));
    ++plan.routed[static_cast<size_t>(e)];
  }

  // Per expert, the (token, choice) pairs it keeps, in row order.
  std::vector<std::vector<int64_t>> kept(static_cast<size_t>(E));
  std::vector<int64_t> offered(static_cast<size_t>(E));
  for (int64_t b = 0; b < sequences; ++b) {
    offered.assign(static_cast<size_t>(E), 0);
    // Dropless keeps token order with a token's choices together; a capacity goes by priority.
    for (int64_t pass = 0; pass < (dropless ? 1 : k); ++pass)
      for (int64_t t = b * sequence; t < (b + 1) * sequence; ++t)
        for (int64_t s = dropless ? 0 : pass; s < (dropless ? k : pass + 1); ++s) {
          const auto e = static_cast<size_t>(experts[static_cast<size_t>(t * k + s)]);
          if (!dropless && offered[e] >= capacity_per_sequence) {
            ++plan.dropped;
            continue;
          }
          ++offered[e];
          kept[e].push_back(t * k + s);
        }
  }

  const int64_t segment = sequences * capacity_per_sequence;
  int64_t next = 0;
  for (int64_t e = 0; e < E; ++e) {
    const auto ei = static_cast<size_t>(e);
    plan.start[ei] = dropless ? next : e * segment;
    plan.used[ei] = static_cast<int64_t>(kept[ei].size());
    plan.listed.push_back(next);
    next += plan.used[ei];
    for (size_t j = 0; j < kept[ei].size(); ++j) {
      const int64_t pair = kept[ei][j];
      plan.slots[static_cast<size_t>(pair)] = static_cast<int32_t>(plan.start[ei] + static_cast<int64_t>(j));
      plan.token_of_row.push_back(static_cast<int32_t>(pair / k));
      plan.choice_of_row.push_back(static_cast<int32_t>(pair % k));
    }
  }
  plan.rows = dropless ? pairs : E * segment;
  return plan;
}

}  // namespace axonn
