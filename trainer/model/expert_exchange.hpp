#pragma once
// Where the rows of one token exchange land on the expert ranks (docs/moe.md, "Expert
// parallelism"). Pure: no backend, no communication.
//
// Under expert parallelism E_p = P, expert rank r holds local experts [r·E_l, (r+1)·E_l),
// E_l = E/P. Each rank's routing plan (routing_plan.hpp) lays its rows out expert by expert,
// so the rows for rank j's experts are one run of its buffer: send_counts[j] rows. Rank j
// receives them from every source s, source by source, each source's run expert by expert:
//
//   received buffer = [ from s=0: e_0 rows | e_1 rows | ... ][ from s=1: ... ] ...
//
// Dropless, a source sends each expert the rows it used (the counts, exchanged first). With a
// capacity, every (source, expert) run is a fixed `segment` of mb·cap rows whose used rows are
// its first ones, so the buffers' sizes, and the bytes of every collective on them, do not
// depend on the routing. At P = 1 the received buffer is the plan's own buffer.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace axonn {

// A run of the received buffer that one local expert computes on.
struct ExpertChunk {
  int64_t expert = 0;  // local expert index, [0, E_l)
  int64_t start = 0;   // first row in the received buffer
  int64_t rows = 0;    // rows in use (the padding after them, capacity mode, is not computed)
  bool operator==(const ExpertChunk&) const = default;
};

struct ExpertExchange {
  std::vector<size_t> send_rows;     // [P]: rows this rank sends to expert rank j (padding included)
  std::vector<size_t> receive_rows;  // [P]: rows it receives from rank s (padding included)
  std::vector<ExpertChunk> chunks;   // [P·E_l], source by source, each expert by expert
  int64_t received = 0;              // Σ receive_rows: the received buffer's rows
  // [P·E_l], peer by peer, each local expert: the rows (padding included) of this rank's
  // buffer that go to peer j's local expert e, and those it receives from source s for e.
  std::vector<int64_t> send_runs, receive_runs;
};

// plan_used: [E] rows this rank's plan uses per expert. received_used: [P·E_l] rows each
// source uses for each of this rank's experts, source-major (the counts exchange's result;
// at P = 1, plan_used). segment: rows per (source, expert) with a capacity (mb·cap), 0 for
// dropless. Throws std::invalid_argument when the sizes do not fit P, or a count exceeds its
// segment.
ExpertExchange plan_expert_exchange(const std::vector<int64_t>& plan_used, const std::vector<int64_t>& received_used,
                                    int64_t expert_ranks, int64_t segment);

// One round of an exchange pipelined by local expert (MoeShape::rounds): the rows of local
// experts [first_expert, end_expert) to and from every peer. This rank's buffer holds the
// rows for peer p's experts of the round as one run of send_rows[p] rows from send_first[p];
// the received buffer holds source s's as one run of receive_rows[s] rows from
// receive_first[s]. Packed peer by peer, a round is one all_to_allv.
struct ExchangeRound {
  int64_t first_expert = 0, end_expert = 0;
  std::vector<int64_t> send_first, receive_first;  // [P]
  std::vector<size_t> send_rows, receive_rows;     // [P]
  size_t sent() const;                             // Σ send_rows
  size_t received() const;                         // Σ receive_rows
};

// The exchange in `rounds` rounds (1 <= rounds <= E_l, else std::invalid_argument), round i
// with local experts [i·E_l/rounds, (i+1)·E_l/rounds). The rounds' runs tile both buffers.
std::vector<ExchangeRound> plan_rounds(const ExpertExchange& exchange, int64_t rounds);

}  // namespace axonn
