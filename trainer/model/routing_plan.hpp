#pragma once
// Where each routed token goes in the experts' row buffer, computed on the host from the
// router's top-k choices (docs/moe.md). Every rank of a tensor-parallel group computes the
// same plan: their router logits are equal after the x all-reduce. Pure: no backend.
//
// The buffer has `rows` rows (MoeShape::rows), expert by expert: expert e's rows are
// [start[e], start[e] + used[e]). Dropless, every routed (token, choice) gets a row, the
// experts' segments back to back (Σ used = m·k = rows). With a capacity, expert e's segment
// is [e·mb·cap, (e+1)·mb·cap) and each sequence offers it at most cap (token, choice) pairs:
// first choices before second choices, earlier tokens first (GShard's priority); the rest
// are dropped and reach the residual stream only. Counting per sequence keeps the dropped set
// the same at every layout (a sequence is never split between ranks).
#include <cstdint>
#include <vector>

namespace axonn {

struct RoutingPlan {
  int64_t rows = 0;
  std::vector<int64_t> start, used;   // [E]: each expert's first row and rows in use
  std::vector<int64_t> routed;        // [E]: (token, choice) pairs that chose the expert, kept or not
  std::vector<int64_t> listed;         // [E]: where expert e's rows begin in token_of_row
  std::vector<int32_t> token_of_row;  // [Σ used], expert by expert: the token a used row holds
  std::vector<int32_t> choice_of_row; // [Σ used]: which of the token's k choices it is
  std::vector<int32_t> slots;         // [m, k]: the row of token t's choice s, −1 when dropped
  int64_t dropped = 0;                // (token, choice) pairs without a row
};

// experts: (m, k) the router's choices, m = sequences·sequence tokens, sequence-major.
// capacity_per_sequence: 0 for dropless. Throws std::invalid_argument for an expert index
// outside [0, E) or sizes that do not match.
RoutingPlan plan_routing(const std::vector<int32_t>& experts, int64_t k, int64_t E, int64_t sequence,
                         int64_t capacity_per_sequence);

}  // namespace axonn
