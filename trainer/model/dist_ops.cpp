#include "trainer/model/dist_ops.hpp"

namespace axonn {

void cross_entropy_forward_backward(Backend& backend, Communicator& vocab, ActPtr logits, const int32_t* targets,
                                    int64_t m, int64_t v_local, int64_t v0, float scale,
                                    const CrossEntropyBuffers& buf) {
  if (vocab.size() == 1) {
    backend.cross_entropy_rows(buf.loss, logits, targets, m, v_local, scale, buf.max, buf.partials);
    return;
  }
  backend.cross_entropy_row_max(buf.row_max, logits, m, v_local);
  vocab.all_gather(buf.row_max, buf.gathered_max, static_cast<size_t>(m), ElementType::float32);
  backend.cross_entropy_partials(buf.partials, buf.max, logits, buf.gathered_max, vocab.size(), logits, targets, m,
                                 v_local, v0);
  vocab.all_reduce(buf.partials, static_cast<size_t>(2 * m), ElementType::float32);
  backend.cross_entropy_loss(buf.loss, buf.partials, buf.max, m);
  backend.cross_entropy_backward(logits, logits, buf.partials, targets, m, v_local, v0, scale);
}

}  // namespace axonn
