#pragma once
// Vocab-parallel token embedding and the position embedding (see Backend for the split).
// The scatter-add of embedding_backward is deterministic and adds each table row's
// gradients in token order, like the CPU backend (same bits): the token positions are
// sorted by table row (a stable radix sort), then one thread per (row, column) adds its
// row's tokens in order.
// out, dout and the forward's table are activations of either storage type (act_storage.cuh),
// out and table of one type; the gradient dtable is float32.
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// out (m, c) = table row (tokens[i] − v0) for tokens in [v0, v0 + v_local), else 0
void embedding_forward(const Context& ctx, ActPtr out, const int32_t* tokens, ConstActPtr table, int64_t m, int64_t c,
                       int64_t v0, int64_t v_local);
// dtable (v_local, c) += dout (m, c) rows of the tokens in range
void embedding_backward(const Context& ctx, float* dtable, ConstActPtr dout, const int32_t* tokens, int64_t m,
                        int64_t c, int64_t v0, int64_t v_local);
// out (B, T, c) += wpe (T, c)
void position_forward(const Context& ctx, ActPtr out, const float* wpe, int64_t B, int64_t T, int64_t c);
// dwpe (T, c) += Σ_b dout (B, T, c), the sequences in order
void position_backward(const Context& ctx, float* dwpe, ConstActPtr dout, int64_t B, int64_t T, int64_t c);

}  // namespace axonn::cuda
