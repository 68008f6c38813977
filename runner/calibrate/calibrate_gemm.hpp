#pragma once
// What `axonn calibrate` measures of one rank's compute: GEMM throughput at the shapes the
// layout model prices (layout_cost.hpp, local_gemm_shapes), the rate of a memory-bound
// elementwise op, and the memory a rank has. The caller keeps the node's ranks measuring at
// the same time (a barrier after each shape's warm-up, then the same window on every rank),
// so the rates are what a rank gets while its neighbours compute too, as in training.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "layout/layout_inputs.hpp"
#include "trainer/backend.hpp"

namespace axonn {

// With a job: the GEMM of every linear layer on one rank of every layout of `world` ranks
// that divides the job (what `axonn layout` and `axonn train` at this size look up). Without
// one: square shapes m = k = n of 256 to 2048 (to 1024 when quick). Each shape once, sorted.
std::vector<GemmShape> calibration_gemm_shapes(const std::optional<ChooserInput>& job, int world, bool quick);

// A shape's three GEMMs: 6·m·k·n FLOPs.
double linear_flops(const GemmShape& shape);

// How long every rank times one GEMM or attention shape, or the elementwise probe, in each
// pass (median_over_passes): 0.2 s, 0.05 s when quick (at least kMinTimedRuns runs;
// mean_seconds_within).
double compute_window_seconds(bool quick);
inline constexpr int kMinTimedRuns = 3;

// The working set that calibrate's GEMMs cycle through, larger than a core's caches and a
// GPU's L2 (50 MB on an H100): in training a layer's GEMMs read activations and weights that
// the rest of the step has long since pushed out of the caches, so a rate measured on one
// set of operands kept hot in cache is what no training step gets (about 1.25x too high for
// the small shapes of a tiny model on a CPU core).
inline constexpr double kColdWorkingSetBytes = 64.0 * 1024 * 1024;

// Sets of operands of `shape` that together fill kColdWorkingSetBytes: 1 for a shape that
// does alone, at most 256.
int cold_operand_sets(const GemmShape& shape, ElementType dtype);

// Mean seconds of one run of the three GEMMs of a linear layer Y = X·W in `dtype`, as the
// trainer calls them (backend.hpp): Y = X·W, dX = dY·W^T, dW += X^T·dY, each run on the next
// of cold_operand_sets sets of operands (written when made), so that they come from memory,
// as in training. After one run untimed, `start` (the caller's barrier: a node's ranks start
// timing together), then the runs that start within `window_s`.
double time_linear_gemms(Backend& backend, ElementType dtype, const GemmShape& shape, double window_s,
                         const std::function<void()>& start);

// One block's causal attention on one rank: `batch` sequences (the micro-batch) of
// `sequence` tokens, `heads` heads (the model's over G_y) of `head_size`.
struct AttentionShape {
  int64_t batch = 0, sequence = 0, heads = 0, head_size = 0;
  bool operator==(const AttentionShape&) const = default;
};

// With a job: the attention of one block on one rank of every layout of `world` ranks that
// divides the job. Without one: 1 sequence of 512 tokens (256 when quick), 4 heads of 64.
// Each shape once, sorted.
std::vector<AttentionShape> calibration_attention_shapes(const std::optional<ChooserInput>& job, int world, bool quick);

// Forward and backward as the layout model counts them (flops_per_rank): 12·B·h·T²·d. The
// kernels skip the masked half of the scores, so the rate measured with this count is the
// model's effective one.
double attention_flops(const AttentionShape& shape);

// Sets of attention operands of `shape` that together fill kColdWorkingSetBytes, at most 256.
int cold_operand_sets(const AttentionShape& shape, ElementType dtype);

// Mean seconds of one attention forward and backward at `shape` in `dtype`, q, k and v
// packed as the model's qkv output, each run on the next of cold_operand_sets sets (training
// reads a block's q, k and v in backward long after its forward wrote them); `window_s` and
// `start` as for time_linear_gemms.
double time_attention(Backend& backend, ElementType dtype, const AttentionShape& shape, double window_s,
                      const std::function<void()>& start);

// The forward GEMM of one linear layer, Y = X·W at `shape` in `dtype`, on buffers it keeps:
// the compute a collective follows in training (calibrate_links.hpp, time_collective).
class ForwardGemm {
 public:
  ForwardGemm(Backend& backend, ElementType dtype, const GemmShape& shape);
  ~ForwardGemm();
  ForwardGemm(const ForwardGemm&) = delete;
  ForwardGemm& operator=(const ForwardGemm&) = delete;
  void run();  // one GEMM, waited for

 private:
  struct Buffers;
  Backend& backend_;
  GemmShape shape_;
  std::unique_ptr<Buffers> buffers_;
};

// The shape of calibration_gemm_shapes' median FLOPs: a typical layer's GEMM of the job.
GemmShape typical_gemm_shape(const std::vector<GemmShape>& shapes);

// The elementwise probe: one transformer block's memory-bound ops for one micro-batch, run as
// the trainer runs them on its backend, as separate passes (calibrate knows no GEMM to fuse
// them into): both residual LayerNorms forward and backward, the four linear layers' biases
// forward and their column sums, GELU forward and backward. Its rate is the model's bytes
// for those passes over their time, so the model prices every memory-bound byte
// (memory_bound_bytes.hpp) at what the trainer's own ops reach: on a CPU LayerNorm and GELU
// are bound by arithmetic more than by memory, and a streaming probe (y += a·x) ran 10-16x
// faster per byte than they do.
struct ElementwiseProbe {
  int64_t rows = 0;   // tokens of a micro-batch
  int64_t width = 0;  // the residual stream's width, C
  int64_t mlp = 0;    // the MLP's inner width, 4C
  double bytes = 0;   // block_memory_bound_elements (nothing fused) x the activation size
};
// With a job: its micro-batch at its full width (the layout 1x1x1x1). Without: 2048 rows of
// width 1024 on a CPU, 8192 on a GPU (buffers of 16-64 MiB in bf16, past its L2).
ElementwiseProbe elementwise_probe(const std::optional<ChooserInput>& job, ElementType dtype, bool cuda);

// Mean seconds of one run of the probe's ops: one run untimed, then `start`, then the runs
// within `window_s` (as time_linear_gemms).
double time_elementwise(Backend& backend, ElementType dtype, const ElementwiseProbe& probe, double window_s,
                        const std::function<void()>& start);

// The memory one rank may use, in bytes: its GPU's (CUDA), or this node's memory divided among
// `ranks_sharing` ranks (CPU: /proc/meminfo's MemTotal).
double rank_memory_bytes(bool cuda, int gpu, int ranks_sharing);

}  // namespace axonn
