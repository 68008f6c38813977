#pragma once
// GEMM on the CPU: OpenBLAS cblas_sgemm, row-major (see Backend::gemm for the contract), split
// over the backend's own threads with OpenBLAS single-threaded.
//
// Why not OpenBLAS's threads: after a GEMM they poll for work for about 2^28 cycles (a tenth of
// a second) before they sleep, so the non-GEMM ops that follow (LayerNorm, GELU, attention) find
// the cores taken and their pool threads wait for a time slice. Measured on 2 cores, one rank of
// 4 layers at hidden 128: LayerNorm 5.5 ms instead of 0.9 ms per micro-batch, attention 9-14 ms
// instead of 7. One set of threads for everything removes the contest.
#include <cstdint>

#include "trainer/backend.hpp"
#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// C (m, n) = alpha·op(A)·op(B) + beta·C with op(A) (m, k), op(B) (k, n); beta = 0 ignores C.
// On the calling thread.
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same, C's rows (or its columns, when it has more columns than rows) split over the
// pool's threads, each part one single-threaded sgemm over the whole k: every element of C is
// one k-long sum, as on one thread, but not always the same bits: OpenBLAS's kernels round a
// row or column by where it falls in their blocks (the last of a part take the remainder
// kernels; AVX-512 builds switch to small-matrix kernels below a size), so a thread count
// gives the same bits on every run and another count may differ in the last place. GEMMs of
// at most kMaxSerialGemmVolume multiply-adds (m·n·k) stay on the caller, as OpenBLAS's own
// driver keeps them on one thread.
constexpr int64_t kMaxSerialGemmVolume = 4 * 65536;
void gemm(ThreadPool& pool, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Makes OpenBLAS run every sgemm on the thread that calls it, for the life of the process (its
// thread count is process-wide): the CPU backend splits GEMMs over its own pool instead.
void make_blas_single_threaded();

}  // namespace axonn::cpu
