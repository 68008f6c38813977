#include "trainer/model/sharded_linear.hpp"

#include <string>

#include "trainer/model/chunked_sum.hpp"

namespace axonn {

ShardedLinear::ShardedLinear(Backend& backend, CommGrid& grid, int64_t k, int64_t n, Axis k_axis, ConstActPtr weight,
                             float* grad, const float* bias, float* dbias, ActPtr gathered, bool overlap,
                             int64_t chunks)
    : backend_(backend),
      grid_(grid),
      k_axis_(k_axis),
      n_axis_(k_axis == Axis::x ? Axis::y : Axis::x),
      k_local_(k / grid.layout().size(k_axis)),
      n_local_(n / grid.layout().size(n_axis_)),
      shard_rows_(k_local_ / grid.layout().z),
      weight_(weight),
      grad_(grad),
      bias_(bias),
      dbias_(dbias),
      gathered_(gathered),
      z_split_(grid.layout().z > 1),
      overlap_(overlap),
      chunks_(chunks) {
  if (z_split_ && !gathered) throw BackendError("ShardedLinear: G_z > 1 needs a gathered-weight buffer");
  if (z_split_) gather_ = ZGather(grid.axis(CommAxis::z), weight, gathered, shard_rows_ * n_local_);
}

void ShardedLinear::prefetch_weight() {
  if (z_split_) gather_.prefetch();
}

void ShardedLinear::gather_weight() {
  if (z_split_) gather_.complete();
}

ConstActPtr ShardedLinear::gemm_weight() const { return z_split_ ? ConstActPtr(gathered_) : weight_; }

bool ShardedLinear::bias_in_epilogue() const { return bias_ != nullptr && grid_.layout().size(k_axis_) == 1; }

void ShardedLinear::forward(ConstActPtr x, ActPtr y, int64_t m) {
  if (bias_in_epilogue()) {
    backend_.linear_forward(y, x, gemm_weight(), bias_, m, n_local_, k_local_);
    return;
  }
  Communicator& a_group = grid_.axis(comm_axis(k_axis_));
  ChunkedSum sum(a_group, chunks_of(a_group), m, overlap_);
  sum.compute_and_add(y, n_local_, false, [&](int64_t first) {
    backend_.gemm(Transpose::no, Transpose::no, sum.rows, n_local_, k_local_, 1.0f, x + first * k_local_, k_local_,
                  gemm_weight(), n_local_, 0.0f, y + first * n_local_, n_local_);
  });
  sum.finish();
  if (bias_ != nullptr) backend_.bias_forward(y, bias_, m, n_local_, n_local_);
}

void ShardedLinear::forward_gelu(ConstActPtr x, ActPtr pre, ActPtr out, int64_t m) {
  if (bias_in_epilogue()) {
    backend_.linear_gelu_forward(pre, out, x, gemm_weight(), bias_, m, n_local_, k_local_);
    return;
  }
  forward(x, pre, m);
  backend_.gelu_forward(out, pre, m * n_local_);
}

// dX first, then dW: the dW GEMM reads x and dy, not dx, so with overlap it is the compute
// that dX's all-reduce over b runs beside (OAR); the other order would leave the all-reduce
// nothing to hide behind, as the caller reads dx next. The GELU's backward reads the summed
// dx, so it waits for the sum. With G_b = 1 nothing is summed and the GELU path fuses into
// the dX GEMM; the order is then free and stays the same. Recomputation reruns a block's
// forwards before its backward starts, never between these GEMMs, so every mode hides the
// same; the MoE experts order theirs the same way (moe_layer.cpp).
void ShardedLinear::backward(ConstActPtr dy, ConstActPtr x, ActPtr dx, int64_t m, GradScatter& scatter,
                             ConstActPtr gelu_pre) {
  const ConstActPtr w = gemm_weight();
  Communicator& b_group = grid_.axis(comm_axis(n_axis_));
  const bool sums_dx = dx && b_group.size() > 1;
  ChunkedSum sum(b_group, dx ? chunks_of(b_group) : 1, m, overlap_);
  if (dx && gelu_pre && !sums_dx) {
    backend_.linear_input_grad_gelu(dx, dy, w, gelu_pre, m, n_local_, k_local_);
  } else if (dx) {
    // The last chunk's sum beside the dW GEMM.
    sum.compute_and_add(dx, k_local_, true, [&](int64_t first) {
      backend_.gemm(Transpose::no, Transpose::yes, sum.rows, k_local_, n_local_, 1.0f, dy + first * n_local_,
                    n_local_, w, n_local_, 0.0f, dx + first * k_local_, k_local_);
    });
  }
  weight_backward(dy, x, m, scatter);
  sum.finish();
  if (dx && gelu_pre && sums_dx) backend_.gelu_backward(dx, gelu_pre, dx, m * k_local_);
}

int64_t ShardedLinear::chunks_of(const Communicator& group) const { return group.size() > 1 ? chunks_ : 1; }

void ShardedLinear::weight_backward(ConstActPtr dy, ConstActPtr x, int64_t m, GradScatter& scatter) {
  if (!z_split_) {
    backend_.linear_weight_grad(grad_, 1.0f, dbias_, x, dy, m, n_local_, k_local_);
    return;
  }
  float* dw = scatter.block(k_local_ * n_local_);
  backend_.linear_weight_grad(dw, 0.0f, dbias_, x, dy, m, n_local_, k_local_);
  scatter.add_to(grad_, dw, shard_rows_ * n_local_);
}

}  // namespace axonn
