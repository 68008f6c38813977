#pragma once
// Bytes each rank moves per optimizer step, per (axis, collective kind): the prediction
// the trainer's communicator counters must match exactly (docs/parallel-plan.md).
//
// Per micro-batch (A per step, m = mb*T tokens, e = element bytes of the job's dtype,
// statistics always float32 = 4 bytes), for every linear layer (k, n, k-axis a, n-axis b):
//   all_gather     z : k/G_a * n/G_b * e      forward: the z-shards of W
//   all_reduce     a : m * n/G_b * e          forward: partial Y
//   all_reduce     b : m * k/G_a * e          backward: partial dX
//   reduce_scatter z : k/G_a * n/G_b * e      backward: dW back to z-shards
// and further:
//   all_reduce     y : m * C/G_x * e          token embedding (vocab-parallel lookup)
//   all_reduce     x : 2 calls of m * 4       each LayerNorm forward (mean, then variance)
//   all_reduce     x : m * 2 * 4              each LayerNorm backward; 2L+1 LayerNorms
//   all_gather     y : m * G_y * 4            loss: row maxima of the logits
//   all_reduce     y : m * 2 * 4              loss: sum of exp and target logit
// Per step:
//   all_reduce     z : small * e              gradients of LayerNorm, biases, wpe
//   all_reduce  data : L calls of one block's weight shards * e, then the wte shard * e
//                      and small * e: every gradient once, in L + 2 buckets (gradient_sync.hpp)
//   all_reduce world : 4 * 4                  loss sum, token count, squared grad norm, stop votes
// A collective on a group of one is not made and counts nothing.
#include <array>
#include <cstdint>

#include "layout/collective.hpp"
#include "layout/layout.hpp"

namespace axonn {

struct CollectiveVolume {
  int64_t calls = 0;
  int64_t bytes = 0;  // nccl-tests size, summed over the calls
};

struct StepVolume {
  // [axis][kind]
  std::array<std::array<CollectiveVolume, kCollectiveKindCount>, kCommAxisCount> table{};
  std::array<int, kCommAxisCount> group_size{};  // members of this axis' groups

  const CollectiveVolume& at(CommAxis a, CollectiveKind k) const {
    return table[static_cast<size_t>(a)][static_cast<size_t>(k)];
  }
  // Adds `calls` collectives of `bytes` each; ignored on groups of one.
  void add(CommAxis a, CollectiveKind k, int64_t calls, int64_t bytes);
  int64_t bytes(CommAxis a) const;         // all kinds
  double wire_bytes(CommAxis a) const;     // sum of bus_factor * size: what one rank sends
};

StepVolume predict_step_volume(const ChooserInput& input, const Layout& layout);

}  // namespace axonn
