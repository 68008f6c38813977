#include "trainer/model/sharded_linear.hpp"

namespace axonn {

ShardedLinear::ShardedLinear(Backend& backend, CommGrid& grid, int64_t k, int64_t n, Axis k_axis, ConstActPtr weight,
                             float* grad, const float* bias, float* dbias, ActPtr gathered)
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
      z_split_(grid.layout().z > 1) {
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
  backend_.gemm(Transpose::no, Transpose::no, m, n_local_, k_local_, 1.0f, x, k_local_, gemm_weight(), n_local_, 0.0f,
                y, n_local_);
  grid_.axis(comm_axis(k_axis_)).all_reduce(y.raw(), static_cast<size_t>(m * n_local_), y.type());
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

void ShardedLinear::backward(ConstActPtr dy, ConstActPtr x, ActPtr dx, int64_t m, GradScatter& scatter,
                             ConstActPtr gelu_pre) {
  const ConstActPtr w = gemm_weight();
  if (dx && gelu_pre && grid_.layout().size(n_axis_) == 1) {
    backend_.linear_input_grad_gelu(dx, dy, w, gelu_pre, m, n_local_, k_local_);
  } else if (dx) {
    backend_.gemm(Transpose::no, Transpose::yes, m, k_local_, n_local_, 1.0f, dy, n_local_, w, n_local_, 0.0f, dx,
                  k_local_);
    grid_.axis(comm_axis(n_axis_)).all_reduce(dx.raw(), static_cast<size_t>(m * k_local_), dx.type());
    if (gelu_pre) backend_.gelu_backward(dx, gelu_pre, dx, m * k_local_);
  }
  if (!z_split_) {
    backend_.linear_weight_grad(grad_, 1.0f, dbias_, x, dy, m, n_local_, k_local_);
    return;
  }
  float* dw = scatter.block(k_local_ * n_local_);
  backend_.linear_weight_grad(dw, 0.0f, dbias_, x, dy, m, n_local_, k_local_);
  scatter.add_to(grad_, dw, shard_rows_ * n_local_);
}

}  // namespace axonn
