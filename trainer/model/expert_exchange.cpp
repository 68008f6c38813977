#include "trainer/model/expert_exchange.hpp"

#include <stdexcept>
#include <string>

namespace axonn {

ExpertExchange plan_expert_exchange(const std::vector<int64_t>& plan_used, const std::vector<int64_t>& received_used,
                                    int64_t expert_ranks, int64_t segment) {
  const auto E = static_cast<int64_t>(plan_used.size());
  if (expert_ranks < 1 || E % expert_ranks != 0 || static_cast<int64_t>(received_used.size()) != E)
    throw std::invalid_argument("plan_expert_exchange: " + std::to_string(E) + " experts' counts and " +
                                std::to_string(received_used.size()) + " received counts do not split over " +
                                std::to_string(expert_ranks) + " expert ranks");
  const int64_t local = E / expert_ranks;
  const bool dropless = segment == 0;
  // Rows of one (rank, expert) run: its used rows, or the capacity's whole segment.
  auto run = [&](int64_t used) {
    if (!dropless && used > segment)
      throw std::invalid_argument("plan_expert_exchange: " + std::to_string(used) +
                                  " rows for one expert exceed the capacity segment of " + std::to_string(segment));
    return dropless ? used : segment;
  };
  ExpertExchange x;
  for (int64_t j = 0; j < expert_ranks; ++j) {
    int64_t sent = 0, received = 0;
    for (int64_t e = 0; e < local; ++e) {
      sent += run(plan_used[static_cast<size_t>(j * local + e)]);
      const int64_t used = received_used[static_cast<size_t>(j * local + e)];
      x.chunks.push_back({e, x.received + received, used});
      received += run(used);
    }
    x.send_rows.push_back(static_cast<size_t>(sent));
    x.receive_rows.push_back(static_cast<size_t>(received));
    x.received += received;
  }
  return x;
}

}  // namespace axonn
