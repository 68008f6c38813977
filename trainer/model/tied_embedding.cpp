#include "trainer/model/tied_embedding.hpp"

#include "trainer/model/chunked_sum.hpp"

namespace axonn {

TiedEmbedding::TiedEmbedding(Backend& backend, CommGrid& grid, int64_t vocab, int64_t hidden, ConstActPtr weight,
                             float* grad, ActPtr gathered, float* staging, bool overlap, int64_t chunks)
    : backend_(backend),
      grid_(grid),
      v_(vocab / grid.layout().y),
      c_(hidden / grid.layout().x),
      v0_(grid.coords().y * v_),
      z_(grid.layout().z),
      weight_(weight),
      grad_(grad),
      gathered_(gathered),
      staging_(staging),
      overlap_(overlap),
      chunks_(chunks) {
  if (z_ > 1 && (!gathered || staging == nullptr))
    throw BackendError("TiedEmbedding: G_z > 1 needs gathered and staging buffers");
  if (z_ > 1) gather_ = ZGather(grid.axis(CommAxis::z), weight, gather_staging(), v_ * (c_ / z_));
}

void TiedEmbedding::prefetch_weight() {
  if (z_ > 1) gather_.prefetch();
}

void TiedEmbedding::gather_weight() {
  if (z_ == 1) return;
  // The all-gather lands z-major, [G_z][v][c/G_z]; block z is columns [z·c/G_z, (z+1)·c/G_z).
  gather_.complete();
  const int64_t cz = c_ / z_;
  const ActPtr staged = gather_staging();
  for (int64_t z = 0; z < z_; ++z) backend_.copy_2d(gathered_ + z * cz, c_, staged + z * v_ * cz, cz, v_, cz);
}

void TiedEmbedding::embed(const int32_t* tokens, ActPtr out, int64_t m) {
  backend_.embedding_forward(out, tokens, full(), m, c_, v0_, v_);
  grid_.axis(CommAxis::y).all_reduce(out.raw(), static_cast<size_t>(m * c_), out.type());
}

// In training.tp_chunks row chunks where the logits are summed over x, as ShardedLinear::forward.
void TiedEmbedding::logits(ConstActPtr x, ActPtr logits, int64_t m) {
  Communicator& x_group = grid_.axis(CommAxis::x);
  ChunkedSum sum(x_group, x_group.size() > 1 ? chunks_ : 1, m, overlap_);
  sum.compute_and_add(logits, v_, false, [&](int64_t first) {
    backend_.gemm(Transpose::no, Transpose::yes, sum.rows, v_, c_, 1.0f, x + first * c_, c_, full(), c_, 0.0f,
                  logits + first * v_, v_);
  });
  sum.finish();
}

// dX first (in row chunks where it is summed over y), then the head's dW beside dX's
// all-reduce (OAR), as ShardedLinear's backward.
void TiedEmbedding::logits_backward(ConstActPtr dlogits, ConstActPtr x_head, ActPtr dx, int64_t m) {
  Communicator& y_group = grid_.axis(CommAxis::y);
  ChunkedSum sum(y_group, y_group.size() > 1 ? chunks_ : 1, m, overlap_);
  sum.compute_and_add(dx, c_, true, [&](int64_t first) {
    backend_.gemm(Transpose::no, Transpose::no, sum.rows, c_, v_, 1.0f, dlogits + first * v_, v_, full(), c_, 0.0f,
                  dx + first * c_, c_);
  });
  // [v, c]: into the gradient (G_z = 1), else into staging, free until the next forward's gather.
  if (z_ == 1)
    backend_.gemm(Transpose::yes, Transpose::no, v_, c_, m, 1.0f, dlogits, v_, x_head, c_, 1.0f, grad_, c_);
  else
    backend_.gemm(Transpose::yes, Transpose::no, v_, c_, m, 1.0f, dlogits, v_, x_head, c_, 0.0f, staging_, c_);
  sum.finish();
}

void TiedEmbedding::weight_backward(ConstActPtr d_embedded, const int32_t* tokens, int64_t m, GradScatter& scatter) {
  if (z_ == 1) {
    backend_.embedding_backward(grad_, d_embedded, tokens, m, c_, v0_, v_);
    return;
  }
  backend_.embedding_backward(staging_, d_embedded, tokens, m, c_, v0_, v_);
  // The reduce-scatter wants z-major blocks: [G_z][v][c/G_z], block z = columns of z.
  float* dw = scatter.block(v_ * c_);
  const int64_t cz = c_ / z_;
  for (int64_t z = 0; z < z_; ++z) backend_.copy_2d(dw + z * v_ * cz, cz, staging_ + z * cz, c_, v_, cz);
  scatter.add_to(grad_, dw, v_ * cz);
}

}  // namespace axonn
