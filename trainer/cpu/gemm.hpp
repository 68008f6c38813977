#pragma once
// GEMM on the CPU: OpenBLAS cblas_sgemm, row-major (see Backend::gemm for the contract).
#include <cstdint>

#include "trainer/backend.hpp"

namespace axonn::cpu {

// C (m, n) = alpha·op(A)·op(B) + beta·C with op(A) (m, k), op(B) (k, n); beta = 0 ignores C.
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// While alive, OpenBLAS runs every sgemm on the thread that calls it (its thread count, a
// process-wide setting, is 1), so that several of our threads can each run small GEMMs at
// once: OpenBLAS splits one small GEMM over its threads for little gain, and its threaded
// driver serializes concurrent callers. The destructor restores the previous count.
class SerialBlasScope {
 public:
  SerialBlasScope();
  ~SerialBlasScope();
  SerialBlasScope(const SerialBlasScope&) = delete;
  SerialBlasScope& operator=(const SerialBlasScope&) = delete;

 private:
  int saved_;
};

}  // namespace axonn::cpu
