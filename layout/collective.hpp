#pragma once
// Collective kinds and the ring formulas that price them, written once and used by the
// cost model, the benchmarks and the communicators' byte counters.
//
// Sizes follow nccl-tests: all-reduce and broadcast count their buffer, all-gather its
// gathered output, reduce-scatter its input. Bytes each rank sends on a ring are
// bus_factor(kind, n) * size; the ring needs ring_steps(kind, n) messages.
#include <string>

namespace axonn {

enum class CollectiveKind {
  all_reduce = 0,
  all_gather = 1,
  reduce_scatter = 2,
  broadcast = 3,
  barrier = 4,
  all_to_all = 5
};
inline constexpr int kCollectiveKindCount = 6;
const char* collective_name(CollectiveKind kind);  // "all_reduce", ...

// 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all (each rank
// keeps its own block and sends the other n-1), 1 for broadcast
// (nccl-tests' busbw factors), 0 for a barrier or a group of one.
double bus_factor(CollectiveKind kind, int n);
// Latency terms: 2(n-1) for all-reduce, n-1 for the others, 0 for a group of one.
int ring_steps(CollectiveKind kind, int n);

}  // namespace axonn
