#include "trainer/model/expert_exchange.hpp"

#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

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
      x.send_runs.push_back(run(plan_used[static_cast<size_t>(j * local + e)]));
      sent += x.send_runs.back();
      const int64_t used = received_used[static_cast<size_t>(j * local + e)];
      x.chunks.push_back({e, x.received + received, used});
      x.receive_runs.push_back(run(used));
      received += x.receive_runs.back();
    }
    x.send_rows.push_back(static_cast<size_t>(sent));
    x.receive_rows.push_back(static_cast<size_t>(received));
    x.received += received;
  }
  return x;
}

size_t ExchangeRound::sent() const { return std::accumulate(send_rows.begin(), send_rows.end(), size_t{0}); }
size_t ExchangeRound::received() const {
  return std::accumulate(receive_rows.begin(), receive_rows.end(), size_t{0});
}

std::vector<ExchangeRound> plan_rounds(const ExpertExchange& x, int64_t rounds) {
  const auto P = static_cast<int64_t>(x.send_rows.size());
  const int64_t local = P > 0 ? static_cast<int64_t>(x.send_runs.size()) / P : 0;
  if (rounds < 1 || rounds > local)
    throw std::invalid_argument("plan_rounds: " + std::to_string(rounds) + " rounds for " + std::to_string(local) +
                                " local experts; use 1 to " + std::to_string(local));
  // Where each peer's runs begin in this rank's buffer and in the received buffer.
  std::vector<int64_t> send_base(static_cast<size_t>(P)), receive_base(static_cast<size_t>(P));
  for (int64_t p = 1; p < P; ++p) {
    const auto q = static_cast<size_t>(p);
    send_base[q] = send_base[q - 1] + static_cast<int64_t>(x.send_rows[q - 1]);
    receive_base[q] = receive_base[q - 1] + static_cast<int64_t>(x.receive_rows[q - 1]);
  }
  std::vector<ExchangeRound> out;
  for (int64_t i = 0; i < rounds; ++i) {
    ExchangeRound r;
    r.first_expert = i * local / rounds;
    r.end_expert = (i + 1) * local / rounds;
    for (int64_t p = 0; p < P; ++p) {
      const auto q = static_cast<size_t>(p);
      int64_t send_before = 0, receive_before = 0, send_rows = 0, receive_rows = 0;
      for (int64_t e = 0; e < r.end_expert; ++e) {
        const auto at = static_cast<size_t>(p * local + e);
        (e < r.first_expert ? send_before : send_rows) += x.send_runs[at];
        (e < r.first_expert ? receive_before : receive_rows) += x.receive_runs[at];
      }
      r.send_first.push_back(send_base[q] + send_before);
      r.receive_first.push_back(receive_base[q] + receive_before);
      r.send_rows.push_back(static_cast<size_t>(send_rows));
      r.receive_rows.push_back(static_cast<size_t>(receive_rows));
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace axonn
