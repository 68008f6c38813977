#include "trainer/cpu/gemm.hpp"

#include <cblas.h>

#include <climits>
#include <string>

#include "trainer/cpu/check.hpp"

namespace axonn::cpu {
namespace {
// OpenBLAS takes int sizes (blasint is 32-bit in Debian's build).
void require_blas_int(const char* name, int64_t v) {
  require_nonnegative("gemm", name, v);
  if (v > INT_MAX) fail("gemm", std::string(name) + " = " + std::to_string(v) + " exceeds the 32-bit BLAS limit");
}

CBLAS_TRANSPOSE blas_trans(Transpose t) { return t == Transpose::yes ? CblasTrans : CblasNoTrans; }

// The sizes and leading dimensions of the whole GEMM, checked once before it runs or is split:
// a part's own checks would accept an lda that fits its rows but not all of C's.
void require_gemm_args(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                       int64_t ldc) {
  require_blas_int("m", m);
  require_blas_int("n", n);
  require_blas_int("k", k);
  op_checks::require_gemm_ld("lda", lda, ta == Transpose::no ? k : m);
  op_checks::require_gemm_ld("ldb", ldb, tb == Transpose::no ? n : k);
  op_checks::require_gemm_ld("ldc", ldc, n);
  require_blas_int("lda", lda);
  require_blas_int("ldb", ldb);
  require_blas_int("ldc", ldc);
}

// One sgemm on the calling thread, its arguments (or the whole GEMM's it is part of) checked.
void checked_sgemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // the product is empty: C = beta·C, and beta = 0 must not read C
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, blas_trans(ta), blas_trans(tb), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

}  // namespace

void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  require_gemm_args(ta, tb, m, n, k, lda, ldb, ldc);
  checked_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(ThreadPool& pool, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  require_gemm_args(ta, tb, m, n, k, lda, ldb, ldc);
  if (pool.size() == 1 || m * n * k <= kMaxSerialGemmVolume) {
    checked_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Rows of C take rows of op(A): A's rows when A is as stored, its columns when transposed;
  // columns of C take columns of op(B) likewise. Parts are whole cache lines of C's columns.
  if (m >= n) {
    parallel_for(pool, m, 0, 1, [&](int64_t begin, int64_t end) {
      const float* a_part = a + (ta == Transpose::no ? begin * lda : begin);
      checked_sgemm(ta, tb, end - begin, n, k, alpha, a_part, lda, b, ldb, beta, c + begin * ldc, ldc);
    });
  } else {
    parallel_for(pool, n, 0, kCacheLineFloats, [&](int64_t begin, int64_t end) {
      const float* b_part = b + (tb == Transpose::no ? begin : begin * ldb);
      checked_sgemm(ta, tb, m, end - begin, k, alpha, a, lda, b_part, ldb, beta, c + begin, ldc);
    });
  }
}

void make_blas_single_threaded() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

}  // namespace axonn::cpu
