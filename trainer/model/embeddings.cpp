#include "trainer/model/embeddings.hpp"

#include "trainer/model/chunked_sum.hpp"

namespace axonn {

Embeddings::Embeddings(Backend& backend, CommGrid& grid, int64_t vocab, int64_t hidden, Weight wte, Weight head,
                       ActPtr gathered, float* staging, bool overlap, int64_t chunks)
    : backend_(backend),
      grid_(grid),
      v_(vocab / grid.layout().y),
      c_(hidden / grid.layout().x),
      v0_(grid.coords().y * v_),
      z_(grid.layout().z),
      wte_(wte),
      head_(head),
      gathered_(gathered),
      staging_(staging),
      overlap_(overlap),
      chunks_(chunks) {
  if (z_ > 1 && (!gathered || staging == nullptr))
    throw BackendError("Embeddings: G_z > 1 needs gathered and staging buffers");
  if (z_ == 1) return;
  const int64_t shard = v_ * (c_ / z_);
  gather_ = ZGather(grid.axis(CommAxis::z), wte.weight, gather_staging(), shard);
  if (!tied()) head_gather_ = ZGather(grid.axis(CommAxis::z), head.weight, gather_staging(), shard);
}

ConstActPtr Embeddings::head_full() const {
  if (z_ > 1) return gathered_;
  return tied() ? wte_.weight : head_.weight;
}

void Embeddings::prefetch_weight() {
  if (z_ > 1) gather_.prefetch();
}

void Embeddings::gather_weight() {
  if (z_ == 1) return;
  gather_.complete();
  unstage();
}

void Embeddings::prefetch_head() {
  if (z_ > 1 && !tied()) head_gather_.prefetch();
}

void Embeddings::gather_head() {
  if (z_ == 1 || tied()) return;
  head_gather_.complete();
  unstage();
}

// The all-gather lands z-major, [G_z][v][c/G_z]; block z is columns [z·c/G_z, (z+1)·c/G_z).
void Embeddings::unstage() {
  const int64_t cz = c_ / z_;
  const ActPtr staged = gather_staging();
  for (int64_t z = 0; z < z_; ++z) backend_.copy_2d(gathered_ + z * cz, c_, staged + z * v_ * cz, cz, v_, cz);
}

void Embeddings::embed(const int32_t* tokens, ActPtr out, int64_t m) {
  backend_.embedding_forward(out, tokens, wte_full(), m, c_, v0_, v_);
  grid_.axis(CommAxis::y).all_reduce(out.raw(), static_cast<size_t>(m * c_), out.type());
}

// In training.tp_chunks row chunks where the logits are summed over x, as ShardedLinear::forward.
void Embeddings::logits(ConstActPtr x, ActPtr logits, int64_t m) {
  Communicator& x_group = grid_.axis(CommAxis::x);
  ChunkedSum sum(x_group, x_group.size() > 1 ? chunks_ : 1, m, overlap_);
  sum.compute_and_add(logits, v_, false, [&](int64_t first) {
    backend_.gemm(Transpose::no, Transpose::yes, sum.rows, v_, c_, 1.0f, x + first * c_, c_, head_full(), c_, 0.0f,
                  logits + first * v_, v_);
  });
  sum.finish();
}

// dX first (in row chunks where it is summed over y), then the head's dW beside dX's
// all-reduce (OAR), as ShardedLinear's backward.
void Embeddings::logits_backward(ConstActPtr dlogits, ConstActPtr x_head, ActPtr dx, int64_t m, GradScatter& scatter) {
  Communicator& y_group = grid_.axis(CommAxis::y);
  ChunkedSum sum(y_group, y_group.size() > 1 ? chunks_ : 1, m, overlap_);
  sum.compute_and_add(dx, c_, true, [&](int64_t first) {
    backend_.gemm(Transpose::no, Transpose::no, sum.rows, c_, v_, 1.0f, dlogits + first * v_, v_, head_full(), c_, 0.0f,
                  dx + first * c_, c_);
  });
  // [v, c]: into the gradient (G_z = 1), else into staging, free until the next forward's gather.
  float* grad = tied() ? wte_.grad : head_.grad;
  if (z_ == 1)
    backend_.gemm(Transpose::yes, Transpose::no, v_, c_, m, 1.0f, dlogits, v_, x_head, c_, 1.0f, grad, c_);
  else
    backend_.gemm(Transpose::yes, Transpose::no, v_, c_, m, 1.0f, dlogits, v_, x_head, c_, 0.0f, staging_, c_);
  sum.finish();
  if (z_ > 1 && !tied()) scatter_staged(head_.grad, scatter);
}

void Embeddings::weight_backward(ConstActPtr d_embedded, const int32_t* tokens, int64_t m, GradScatter& scatter) {
  if (z_ == 1) {
    backend_.embedding_backward(wte_.grad, d_embedded, tokens, m, c_, v0_, v_);
    return;
  }
  // Tied, staging holds the head's dW, which the embedding's rows join.
  if (!tied()) backend_.memset_zero(staging_, static_cast<size_t>(v_ * c_) * sizeof(float));
  backend_.embedding_backward(staging_, d_embedded, tokens, m, c_, v0_, v_);
  scatter_staged(wte_.grad, scatter);
}

// The reduce-scatter wants z-major blocks: [G_z][v][c/G_z], block z = columns of z.
void Embeddings::scatter_staged(float* grad, GradScatter& scatter) {
  float* dw = scatter.block(v_ * c_);
  const int64_t cz = c_ / z_;
  for (int64_t z = 0; z < z_; ++z) backend_.copy_2d(dw + z * v_ * cz, cz, staging_ + z * cz, c_, v_, cz);
  scatter.add_to(grad, dw, v_ * cz);
}

}  // namespace axonn
