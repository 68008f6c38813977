#include "trainer/model/tied_embedding.hpp"

namespace axonn {

TiedEmbedding::TiedEmbedding(Backend& backend, CommGrid& grid, int64_t vocab, int64_t hidden, ConstActPtr weight,
                             float* grad, ActPtr gathered, float* staging)
    : backend_(backend),
      grid_(grid),
      v_(vocab / grid.layout().y),
      c_(hidden / grid.layout().x),
      v0_(grid.coords().y * v_),
      z_(grid.layout().z),
      weight_(weight),
      grad_(grad),
      gathered_(gathered),
      staging_(staging) {
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

void TiedEmbedding::logits(ConstActPtr x, ActPtr logits, int64_t m) {
  backend_.gemm(Transpose::no, Transpose::yes, m, v_, c_, 1.0f, x, c_, full(), c_, 0.0f, logits, v_);
  grid_.axis(CommAxis::x).all_reduce(logits.raw(), static_cast<size_t>(m * v_), logits.type());
}

void TiedEmbedding::logits_backward_input(ConstActPtr dlogits, ActPtr dx, int64_t m) {
  backend_.gemm(Transpose::no, Transpose::no, m, c_, v_, 1.0f, dlogits, v_, full(), c_, 0.0f, dx, c_);
  grid_.axis(CommAxis::y).all_reduce(dx.raw(), static_cast<size_t>(m * c_), dx.type());
}

void TiedEmbedding::weight_backward(ConstActPtr dlogits, ConstActPtr x_head, ConstActPtr d_embedded,
                                    const int32_t* tokens, int64_t m, GradScatter& scatter) {
  if (z_ == 1) {
    backend_.gemm(Transpose::yes, Transpose::no, v_, c_, m, 1.0f, dlogits, v_, x_head, c_, 1.0f, grad_, c_);
    backend_.embedding_backward(grad_, d_embedded, tokens, m, c_, v0_, v_);
    return;
  }
  float* dw = scatter.block(v_ * c_);  // [v, c]
  backend_.gemm(Transpose::yes, Transpose::no, v_, c_, m, 1.0f, dlogits, v_, x_head, c_, 0.0f, dw, c_);
  backend_.embedding_backward(dw, d_embedded, tokens, m, c_, v0_, v_);
  // The reduce-scatter wants z-major blocks: [G_z][v][c/G_z], block z = columns of z.
  const int64_t cz = c_ / z_;
  for (int64_t z = 0; z < z_; ++z) backend_.copy_2d(staging_ + z * v_ * cz, cz, dw + z * cz, c_, v_, cz);
  scatter.add_to(grad_, staging_, v_ * cz);
}

}  // namespace axonn
