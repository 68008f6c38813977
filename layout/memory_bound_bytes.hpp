#pragma once
// The bytes a rank's memory-bound ops move per step: the passes over activations and
// parameters that are not GEMMs or attention (LayerNorm, GELU, bias, cross-entropy, AdamW,
// gradient zeroing, the bf16 copy of the weights). Their time is these bytes at the
// elementwise rate `axonn calibrate` measures (Machine::elementwise_bytes_per_s); the GEMMs
// and attention are priced by FLOPs (layout_cost.hpp).
//
// Each op counts its inputs read once and its outputs written once, in the activation type
// for activations (batch.dtype) and float32 for parameters, gradients and optimizer state.
// Per micro-batch and block, with m its tokens on this rank and the rank's shards of the
// widths (the residual stream (m, C/G_x), mlp.fc's output (m, 4C/G_y), qkv's (m, 3C/G_y)):
//   LayerNorm x2, forward with the residual add:  read a, b; write x, out   4·m·C/G_x each
//   LayerNorm x2, backward:                       read dout, x, dx; write dx 4·m·C/G_x each
//   GELU as separate passes:                      forward 2, backward 3      ·m·4C/G_y
//        inside the GEMMs: the pre-activation written and read              2·m·4C/G_y
//   bias as separate passes, per linear (m, n):   forward 2, column sums 1   ·m·n
//        inside the GEMMs:                        nothing beyond the GEMM
// Inside the GEMMs means Machine::gemm_epilogues (the CUDA backend's cuBLASLt epilogues) and
// no collective between the pieces: a bias forward where the layer's k-axis has size 1, GELU
// where G_x = 1; the bias gradient is always inside (docs/gpu-performance.md).
// per micro-batch, once: the final LayerNorm (2 + 4)·m·C/G_x and cross-entropy over the
// logits (two reads, the gradient written over them) 3·m·V/G_y; with bf16 activations the
// bf16 copy of the big weights (4 read + 2 written bytes each). Per step: AdamW over the
// parameters this rank owns (p, g, m, v read, p, m, v written: 28 bytes each) and the
// gradients zeroed (4 bytes each held). Recomputation reruns, for each recomputed block, the
// forward passes of what it recomputes (attention: ln1 and qkv's bias; block: both
// LayerNorms, every bias but mlp.proj's, GELU's forward).
//
// The staged LayerNorm of G_x > 1 re-reads its rows between its collectives; that extra
// traffic, the embedding's gather and scatter, and the residual adds that no LayerNorm
// absorbs are not counted (each under 2·m·C/G_x per block).
#include "layout/layout.hpp"
#include "layout/layout_inputs.hpp"

namespace axonn {

// Bytes per rank per step at recomputation `mode`, optimizer sharded or not.
double memory_bound_bytes_per_rank(const ChooserInput& input, const Layout& layout, MemoryModes modes);

// One transformer block's memory-bound elements per micro-batch, forward and backward, as
// counted above (both LayerNorms, the four biases, GELU; fused per Machine::gemm_epilogues):
// what `axonn calibrate` times its elementwise rate over, so that the rate is in the model's
// own bytes.
double block_memory_bound_elements(const ChooserInput& input, const Layout& layout);

}  // namespace axonn
