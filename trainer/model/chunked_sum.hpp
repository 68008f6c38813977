#pragma once
// The all-reduce of a [m, width] buffer over one tensor-parallel group in `chunks` equal row
// chunks (training.tp_chunks), each chunk added as soon as its rows are computed: started when
// the caller computes something beside it next (training.overlap_comm), else run where it is
// added. finish() waits for every started chunk. One chunk started beside the dW GEMM is
// AxoNN's OAR; docs/parallel-plan.md, "Chunks", says where chunks keep the bits.
#include <cstdint>
#include <string>

#include "comm/communicator.hpp"
#include "trainer/activation_ptr.hpp"
#include "trainer/backend_error.hpp"

namespace axonn {

class ChunkedSum {
 public:
  // chunks divides m (else BackendError: the layout model rejects such a count first).
  ChunkedSum(Communicator& group, int64_t count, int64_t m, bool overlap)
      : chunks(count), rows(count > 0 ? m / count : 0), group_(group), overlap_(overlap && group.size() > 1) {
    if (count < 1 || m % count != 0)
      throw BackendError("ChunkedSum: " + std::to_string(m) + " rows do not split into training.tp_chunks = " +
                         std::to_string(count) + " equal chunks");
  }
  ChunkedSum(const ChunkedSum&) = delete;
  ChunkedSum& operator=(const ChunkedSum&) = delete;

  const int64_t chunks;
  const int64_t rows;  // per chunk

  // Sums the `rows` rows of `width` elements at `first_row` over the group: started when
  // `beside` (the caller's next work does not read them), else now.
  void add(ActPtr first_row, int64_t width, bool beside) {
    const auto count = static_cast<size_t>(rows * width);
    if (overlap_ && beside) {
      last_started_ = group_.start_all_reduce(first_row.raw(), count, first_row.type());
      started_ = true;
    } else {
      group_.all_reduce(first_row.raw(), count, first_row.type());
    }
  }
  // Each chunk in turn: gemm(first_row) computes rows [first_row, first_row + rows) of `out`
  // ([m, width]), then add() sums them, beside the next chunk's GEMM; the last chunk's beside
  // what the caller computes next when `last_beside`, else at once.
  template <typename Gemm>
  void compute_and_add(ActPtr out, int64_t width, bool last_beside, Gemm gemm) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t first_row = c * rows;
      gemm(first_row);
      add(out + first_row * width, width, c + 1 < chunks || last_beside);
    }
  }
  // Waits for the started chunks (finishing the last finishes every one before it).
  void finish() {
    if (started_) group_.finish(last_started_);
    started_ = false;
  }

 private:
  Communicator& group_;
  bool overlap_;
  bool started_ = false;
  Communicator::Ticket last_started_ = 0;
};

}  // namespace axonn
