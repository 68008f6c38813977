// The CUDA backend against the CPU backend (the oracle), op by op (label gpu). Every test
// runs an op on the same random inputs (fixed seed) on both backends and compares the
// results by the normalized error max|cuda − cpu| / max(1, max|cpu|). Output buffers start
// as NaN on both devices, so an element the CUDA op forgets to write fails. Without a CUDA
// device, or in a build without CUDA, every test skips saying why ("no CUDA device: ...").
//
// Bounds:
// - 1e-5 for ops that compute the CPU's formula in float32 with sums in another order
//   (elementwise, LayerNorm, softmax, cross-entropy, AdamW, the fp32 GEMM): their sums have
//   at most a few thousand terms of similar size; an index or formula error shows up as O(1).
// - Tensor-core GEMMs round their inputs: bf16 keeps 8 significant bits, so each product of
//   two rounded inputs is off by up to ~2^-8 relative, tf32 (11 bits) ~2^-11; k such errors
//   of random sign add up to ~sqrt(k) times one. Bounds 2^-8·sqrt(k) and 2^-11·sqrt(k),
//   relative to max(1, max|C|).
// - Bitwise equality where both backends add the same floats in the same order (embedding
//   scatter-add, position sums, bias forward, add, scale, copies, the MoE row gathers).
// - The MoE ops also run on bf16 activations: an output stored in bf16 is within one bf16
//   rounding (2^-8, normalized) of the CPU's float32 result on the same (bf16) inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend_errors.hpp"
#include "comm/bfloat16.hpp"
#include "cuda_skip.hpp"
#include "normalized_error.hpp"
#include "random_floats.hpp"
#include "trainer/backend.hpp"
#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/cuda/cuda_backend.hpp"

namespace axonn {
namespace {

using test::expect_backend_error;
using test::normalized_error;
using test::random_floats;

constexpr double kTol = 1e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using Floats = std::vector<float>;
using Tokens = std::vector<int32_t>;

Tokens random_tokens(std::mt19937& rng, int64_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  Tokens v(static_cast<size_t>(n));
  for (int32_t& t : v) t = dist(rng);
  return v;
}

// The first element whose bits differ, or -1 (NaN equals NaN of the same bits).
int64_t first_bit_difference(const Floats& a, const Floats& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  return -1;
}

// One buffer on each backend holding the same values: [0] on the CPU, [1] on the GPU.
template <typename T>
struct Twin {
  DeviceBuffer<T> side[2];
  T* operator[](int s) { return side[s].data(); }
  const T* operator[](int s) const { return side[s].data(); }
  std::vector<T> cpu() const { return side[0].download(); }
  std::vector<T> gpu() const { return side[1].download(); }
};

struct GemmShape {
  int64_t m, n, k;
};

class CudaBackendOps : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_CUDA_DEVICES(1);
    fp32_ = make_cuda_backend(CudaBackendOptions{0, GemmMath::fp32});
    gpu_ = fp32_.get();
  }

  Backend& backend(int s) { return s == 0 ? *cpu_ : *gpu_; }

  // body(backend, side) on the CPU (side 0), then on the GPU (side 1).
  template <typename F>
  void both(F&& body) {
    body(*cpu_, 0);
    body(*gpu_, 1);
  }

  template <typename T>
  Twin<T> twin(const std::vector<T>& host) {
    return Twin<T>{{DeviceBuffer<T>(*cpu_, host), DeviceBuffer<T>(*gpu_, host)}};
  }
  // n NaNs on each backend, for outputs.
  Twin<float> poisoned(int64_t n) {
    Twin<float> t{
        {DeviceBuffer<float>(*cpu_, static_cast<size_t>(n)), DeviceBuffer<float>(*gpu_, static_cast<size_t>(n))}};
    both([&](Backend& be, int s) { be.fill(t[s], kNaN, n); });
    return t;
  }

  static void expect_close(const Twin<float>& t, double tol, const std::string& what) {
    const double err = normalized_error(t.gpu(), t.cpu());
    EXPECT_LE(err, tol) << what << ": normalized error of CUDA against CPU";
  }
  static void expect_same_bits(const Twin<float>& t, const std::string& what) {
    const Floats cpu = t.cpu(), gpu = t.gpu();
    const int64_t at = first_bit_difference(gpu, cpu);
    EXPECT_EQ(at, -1) << what << ": CUDA " << (at >= 0 ? gpu[static_cast<size_t>(at)] : 0.0f) << " vs CPU "
                      << (at >= 0 ? cpu[static_cast<size_t>(at)] : 0.0f) << " at element " << at;
  }

  // body(math) for each GemmMath, with gpu_ a CUDA backend of that math (fp32_ again after);
  // bf16 a second time with 8 cuBLASLt algorithms timed per new shape, whose timing runs
  // must leave every output (C accumulated with beta 1, aux, the bias gradient) as one call.
  template <typename F>
  void for_each_math(F&& body) {
    for (const auto& [math, candidates] : std::initializer_list<std::pair<GemmMath, int>>{
             {GemmMath::fp32, 1}, {GemmMath::tf32, 1}, {GemmMath::bf16, 1}, {GemmMath::bf16, 8}}) {
      SCOPED_TRACE("gemm_candidates " + std::to_string(candidates));
      CudaBackendOptions options{0, math};
      options.gemm_candidates = candidates;
      auto be = make_cuda_backend(options);
      gpu_ = be.get();
      body(math);
      gpu_ = fp32_.get();
    }
  }
  // A GEMM with an epilogue, tested fused and not: body(math, shape, offset) for each math,
  // shape, and a vector at offset 0 (16-byte aligned, so cuBLASLt may fuse) and 1 (4 bytes
  // past: the backend's own kernels), traced.
  template <typename F>
  void for_each_math_shape_offset(std::initializer_list<GemmShape> shapes, F&& body) {
    for_each_math([&](GemmMath math) {
      for (const GemmShape& sh : shapes)
        for (int64_t offset : {0, 1}) {
          SCOPED_TRACE(std::string(gemm_math_name(math)) + " m=" + std::to_string(sh.m) + " n=" + std::to_string(sh.n) +
                       " k=" + std::to_string(sh.k) + " vector offset=" + std::to_string(offset));
          body(math, sh, offset);
        }
    });
  }

  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
  std::unique_ptr<Backend> fp32_;
  Backend* gpu_ = nullptr;  // the CUDA backend the twins and both() use
  std::mt19937 rng_{20251123};
};

// ---------------------------------------------------------------- memory

TEST_F(CudaBackendOps, BackendIdentifiesItselfAndExposesItsStream) {
  EXPECT_STREQ(gpu_->name(), "cuda");
  EXPECT_FALSE(gpu_->device_is_host());
  EXPECT_NE(cuda_stream_of(*gpu_), nullptr);
  EXPECT_EQ(cuda_stream_of(*cpu_), nullptr);
  EXPECT_EQ(gpu_->alloc(0), nullptr);
  gpu_->free(nullptr);
}

TEST_F(CudaBackendOps, CopiesFillAndStridedBlocksMatchTheCpu) {
  const int64_t n = 1237;
  Twin<float> x = twin(random_floats(rng_, n));
  {
    // The host source may go away as soon as the upload returns.
    auto temporary = std::make_unique<Floats>(random_floats(rng_, n));
    const Floats expected = *temporary;
    DeviceBuffer<float> d(*gpu_, static_cast<size_t>(n));
    d.upload(*temporary);
    temporary.reset();
    EXPECT_EQ(d.download(), expected);
  }
  // A (5, 4) block from rows of 7 into rows of 9, two columns in; the rest of dst stays NaN.
  const int64_t rows = 5, cols = 4, ld_src = 7, ld_dst = 9;
  Twin<float> src = twin(random_floats(rng_, rows * ld_src));
  Twin<float> dst = poisoned(rows * ld_dst);
  both([&](Backend& be, int s) { be.copy_2d(dst[s] + 2, ld_dst, src[s], ld_src, rows, cols); });
  expect_same_bits(dst, "copy_2d");
  const Floats got = dst.gpu();
  EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[ld_dst - 1])) << "copy_2d wrote outside its block";

  Twin<float> y = poisoned(n);
  both([&](Backend& be, int s) { be.copy(y[s], x[s], static_cast<size_t>(n) * sizeof(float)); });
  expect_same_bits(y, "copy");
  // Overlapping ranges, as memmove allows, both directions.
  both([&](Backend& be, int s) { be.copy(y[s] + 10, y[s], 500 * sizeof(float)); });
  both([&](Backend& be, int s) { be.copy(y[s] + 3, y[s] + 200, 700 * sizeof(float)); });
  expect_same_bits(y, "copy of overlapping ranges");
  both([&](Backend& be, int s) { be.memset_zero(y[s] + 3, 100 * sizeof(float)); });
  expect_same_bits(y, "memset_zero");
  both([&](Backend& be, int s) { be.fill(y[s] + 1, -2.5f, n - 2); });
  expect_same_bits(y, "fill");
  gpu_->synchronize();
}

// ---------------------------------------------------------------- GEMM

double gemm_bound(GemmMath math, int64_t k) {
  const double rk = std::sqrt(static_cast<double>(k));
  switch (math) {
    case GemmMath::bf16:
      return std::ldexp(1.0, -8) * rk;
    case GemmMath::tf32:
      return std::ldexp(1.0, -11) * rk;
    case GemmMath::fp32:
      break;
  }
  return kTol;
}

TEST_F(CudaBackendOps, GemmMatchesCpuForEveryTransposeStrideBetaAndMath) {
  struct Shape {
    int64_t m, n, k, pad;
  };
  // Odd sizes (not multiples of 32 or 128), rows padded so that ld > the row length.
  const Shape shapes[] = {{37, 23, 51, 3}, {130, 67, 300, 5}};
  for_each_math([&](GemmMath math) {
    for (const Shape& sh : shapes)
      for (Transpose ta : {Transpose::no, Transpose::yes})
        for (Transpose tb : {Transpose::no, Transpose::yes})
          for (float beta : {0.0f, 1.0f})
            for (int64_t offset : {0, 1}) {  // 1: every matrix only 4-byte aligned
              const int64_t m = sh.m, n = sh.n, k = sh.k;
              SCOPED_TRACE(std::string(gemm_math_name(math)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                           " k=" + std::to_string(k) + " ta=" + (ta == Transpose::yes ? "T" : "N") +
                           " tb=" + (tb == Transpose::yes ? "T" : "N") + " beta=" + std::to_string(beta) +
                           " offset=" + std::to_string(offset));
              const int64_t a_rows = ta == Transpose::no ? m : k, a_cols = ta == Transpose::no ? k : m;
              const int64_t b_rows = tb == Transpose::no ? k : n, b_cols = tb == Transpose::no ? n : k;
              const int64_t lda = a_cols + sh.pad, ldb = b_cols + sh.pad, ldc = n + sh.pad;
              Twin<float> a = twin(random_floats(rng_, offset + a_rows * lda));
              Twin<float> b = twin(random_floats(rng_, offset + b_rows * ldb));
              // C: random where beta = 1 accumulates into it, NaN where beta = 0 must ignore it;
              // a sentinel in the row padding, which must survive.
              Floats c0 = random_floats(rng_, offset + m * ldc);
              for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < ldc; ++j) {
                  float& e = c0[static_cast<size_t>(offset + i * ldc + j)];
                  if (j >= n)
                    e = 12345.0f;
                  else if (beta == 0.0f)
                    e = kNaN;
                }
              Twin<float> c = twin(c0);
              both([&](Backend& bk, int s) {
                bk.gemm(ta, tb, m, n, k, 0.7f, a[s] + offset, lda, b[s] + offset, ldb, beta, c[s] + offset, ldc);
              });
              expect_close(c, gemm_bound(math, k), "gemm");
              const Floats got = c.gpu();
              for (int64_t i = 0; i < m; ++i)
                for (int64_t j = n; j < ldc; ++j)
                  ASSERT_EQ(got[static_cast<size_t>(offset + i * ldc + j)], 12345.0f) << "padding at " << i << "," << j;
            }
  });
}

// bf16 and tf32 really run on the tensor cores for aligned shapes: their results carry the
// input rounding, ~1e-3 and ~1e-4 here, where an exact float32 fallback would stay near 1e-6.
TEST_F(CudaBackendOps, TensorCoreMathRoundsItsInputs) {
  const int64_t m = 256, n = 256, k = 256;
  Twin<float> a = twin(random_floats(rng_, m * k)), b = twin(random_floats(rng_, k * n));
  for (GemmMath math : {GemmMath::fp32, GemmMath::tf32, GemmMath::bf16}) {
    SCOPED_TRACE(gemm_math_name(math));
    auto be = make_cuda_backend(CudaBackendOptions{0, math});
    DeviceBuffer<float> ga(*be, a.gpu()), gb(*be, b.gpu()), gc(*be, static_cast<size_t>(m * n));
    be->gemm(Transpose::no, Transpose::no, m, n, k, 1.0f, ga.data(), k, gb.data(), n, 0.0f, gc.data(), n);
    Twin<float> c = poisoned(m * n);
    cpu_->gemm(Transpose::no, Transpose::no, m, n, k, 1.0f, a[0], k, b[0], n, 0.0f, c[0], n);
    const double err = normalized_error(gc.download(), c.cpu());
    EXPECT_LE(err, gemm_bound(math, k));
    if (math != GemmMath::fp32) {
      EXPECT_GT(err, std::ldexp(1.0, -16)) << "no input rounding: did cuBLASLt fall back to exact float32?";
    }
  }
}

TEST_F(CudaBackendOps, GemmWeightGradientAccumulatesOverCallsAndRepeatsBitwise) {
  // dW (k, n) += X^T·dY over two micro-batches, as a linear layer's backward does.
  const int64_t m = 77, k = 45, n = 61;
  Twin<float> x = twin(random_floats(rng_, m * k)), dy = twin(random_floats(rng_, m * n));
  Twin<float> dw = twin(random_floats(rng_, k * n));
  for (int call = 0; call < 2; ++call)
    both([&](Backend& be, int s) {
      be.gemm(Transpose::yes, Transpose::no, k, n, m, 1.0f, x[s], k, dy[s], n, 1.0f, dw[s], n);
    });
  expect_close(dw, kTol, "gemm beta=1, twice");

  // The same shape again (a cached plan) on fresh outputs gives the same bits.
  Twin<float> y1 = poisoned(m * n), y2 = poisoned(m * n);
  Twin<float> w = twin(random_floats(rng_, k * n));
  for (Twin<float>* y : {&y1, &y2})
    gpu_->gemm(Transpose::no, Transpose::no, m, n, k, 1.0f, x[1], k, w[1], n, 0.0f, (*y)[1], n);
  EXPECT_EQ(first_bit_difference(y1.gpu(), y2.gpu()), -1);
}

TEST_F(CudaBackendOps, GemmWithEmptyInnerDimensionScalesC) {
  Twin<float> c = twin(Floats{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f});
  both([&](Backend& be, int s) {
    be.gemm(Transpose::no, Transpose::no, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c[s], 3);
  });
  EXPECT_EQ(c.gpu(), (Floats{0.5f, 1.0f, 3.0f, 2.0f, 2.5f, 6.0f}));
  both([&](Backend& be, int s) { be.fill(c[s], kNaN, 6); });
  both([&](Backend& be, int s) {
    be.gemm(Transpose::no, Transpose::no, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c[s], 3);
  });
  expect_same_bits(c, "gemm k=0 beta=0");
  EXPECT_EQ(c.gpu()[0], 0.0f);
}

// A linear layer's forward with its bias in the GEMM (cuBLASLt's bias epilogue) where the
// bias is 16-byte aligned, and the GEMM then the bias kernel where it is not (offset 1), for
// each math; the bias is large against the product, so a missing or doubled add shows.
TEST_F(CudaBackendOps, LinearForwardAddsTheBiasFusedOrNot) {
  for_each_math_shape_offset(
      {{37, 24, 51}, {130, 67, 300}, {1, 16, 8}}, [&](GemmMath math, const GemmShape& sh, int64_t offset) {
        Twin<float> x = twin(random_floats(rng_, sh.m * sh.k));
        Twin<float> w = twin(random_floats(rng_, sh.k * sh.n));
        Twin<float> bias = twin(random_floats(rng_, offset + sh.n, 10.0f, 20.0f));
        Twin<float> y = poisoned(sh.m * sh.n);
        both([&](Backend& bk, int s) { bk.linear_forward(y[s], x[s], w[s], bias[s] + offset, sh.m, sh.n, sh.k); });
        expect_close(y, gemm_bound(math, sh.k), "linear_forward");
      });
}

// A linear layer's weight and bias gradients: the bias gradient from the dW GEMM (cuBLASLt's
// BGRADA epilogue, into scratch, then added) where dbias is 16-byte aligned, bias_backward
// otherwise (offset 1), for each math; called twice, so dW (beta 1) and dbias accumulate,
// and once with beta 0 and no bias.
TEST_F(CudaBackendOps, LinearWeightGradAccumulatesTheBiasGradientFusedOrNot) {
  auto check = [&](GemmMath math, const GemmShape& sh, int64_t offset) {
    Twin<float> x = twin(random_floats(rng_, sh.m * sh.k));
    Twin<float> dy = twin(random_floats(rng_, sh.m * sh.n, -1.0f, 3.0f));  // not centred: dbias is large
    Twin<float> dw = twin(random_floats(rng_, sh.k * sh.n));
    Twin<float> dbias = twin(random_floats(rng_, offset + sh.n));
    for (int call = 0; call < 2; ++call)
      both([&](Backend& bk, int s) {
        bk.linear_weight_grad(dw[s], 1.0f, dbias[s] + offset, x[s], dy[s], sh.m, sh.n, sh.k);
      });
    expect_close(dw, 2 * gemm_bound(math, sh.m), "linear_weight_grad dW, twice");
    expect_close(dbias, 2 * gemm_bound(math, sh.m), "linear_weight_grad dbias, twice");
    Twin<float> fresh = poisoned(sh.k * sh.n);
    both([&](Backend& bk, int s) { bk.linear_weight_grad(fresh[s], 0.0f, nullptr, x[s], dy[s], sh.m, sh.n, sh.k); });
    expect_close(fresh, 2 * gemm_bound(math, sh.m), "linear_weight_grad dW, beta 0");
  };
  for_each_math_shape_offset({{37, 24, 51}, {300, 67, 130}, {1, 16, 8}}, check);
}

// The MLP's GELU inside its GEMMs: forward with cuBLASLt's GELU_AUX_BIAS epilogue (n a
// multiple of 8, bias 16-byte aligned), the input gradient with DGELU (k a multiple of 8),
// and the GEMM then the GELU kernels otherwise (n or k = 67, the bias at offset 1), for each
// math. Within fp32's bound only if cuBLASLt's GELU is the tanh form the CPU computes (the
// erf form differs by up to ~5e-4).
TEST_F(CudaBackendOps, LinearWithGeluForwardAndInputGradientFusedOrNot) {
  for_each_math_shape_offset(
      {{37, 24, 51}, {130, 67, 300}, {64, 128, 40}, {45, 16, 67}},
      [&](GemmMath math, const GemmShape& sh, int64_t offset) {
        Twin<float> x = twin(random_floats(rng_, sh.m * sh.k));
        Twin<float> w = twin(random_floats(rng_, sh.k * sh.n));
        Twin<float> bias = twin(random_floats(rng_, offset + sh.n, -2.0f, 2.0f));
        Twin<float> pre = poisoned(sh.m * sh.n), out = poisoned(sh.m * sh.n);
        both([&](Backend& bk, int s) {
          bk.linear_gelu_forward(pre[s], out[s], x[s], w[s], bias[s] + offset, sh.m, sh.n, sh.k);
        });
        expect_close(pre, gemm_bound(math, sh.k), "linear_gelu_forward pre");
        expect_close(out, gemm_bound(math, sh.k), "linear_gelu_forward out (cuBLASLt's GELU, tanh form expected)");

        // The input gradient at pre of a next layer W2 (n, k) that read gelu(pre):
        // dpre (m, n) = dy (m, k)·W2^T ⊙ gelu'(pre), i.e. the op's (n, k) are (sh.k, sh.n).
        Twin<float> dy = twin(random_floats(rng_, sh.m * sh.k));
        Twin<float> w2 = twin(random_floats(rng_, sh.n * sh.k));
        Twin<float> dpre = poisoned(sh.m * sh.n);
        both([&](Backend& bk, int s) { bk.linear_input_grad_gelu(dpre[s], dy[s], w2[s], pre[s], sh.m, sh.k, sh.n); });
        expect_close(dpre, 2 * gemm_bound(math, sh.k), "linear_input_grad_gelu (cuBLASLt's DGELU, tanh form expected)");
      });
}

// ---------------------------------------------------------------- bias, elementwise, reductions

TEST_F(CudaBackendOps, BiasOnAColumnBlockWithRowStrideAndAccumulatingBackward) {
  // Columns [5, 5 + n) of rows of width ld, like k's bias inside a packed qkv; 300 rows span
  // two row chunks of the column sums.
  const int64_t m = 300, n = 45, ld = 3 * n + 2, col = 5;
  Twin<float> out = twin(random_floats(rng_, m * ld)), bias = twin(random_floats(rng_, n));
  both([&](Backend& be, int s) { be.bias_forward(out[s] + col, bias[s], m, n, ld); });
  expect_same_bits(out, "bias_forward");
  Twin<float> dbias = twin(random_floats(rng_, n));
  for (int call = 0; call < 2; ++call)
    both([&](Backend& be, int s) { be.bias_backward(dbias[s], out[s] + col, m, n, ld); });
  expect_close(dbias, kTol, "bias_backward, twice");
}

TEST_F(CudaBackendOps, ElementwiseOps) {
  const int64_t n = 100003;
  Twin<float> a = twin(random_floats(rng_, n)), b = twin(random_floats(rng_, n)), out = poisoned(n);
  both([&](Backend& be, int s) { be.add(out[s], a[s], b[s], n); });
  expect_same_bits(out, "add");
  both([&](Backend& be, int s) { be.add(a[s], a[s], b[s], n); });  // in place, the residual stream's use
  expect_same_bits(a, "add in place");
  both([&](Backend& be, int s) { be.scale(b[s], -0.375f, n); });
  expect_same_bits(b, "scale");
  both([&](Backend& be, int s) { be.axpy(a[s], 0.25f, b[s], n); });
  expect_close(a, kTol, "axpy");
}

TEST_F(CudaBackendOps, SumAndSumOfSquaresAccumulateAndRepeatBitwise) {
  for (int64_t n : {int64_t{1}, int64_t{4097}, int64_t{1000003}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    Twin<float> x = twin(random_floats(rng_, n, -2.0f, 3.0f));
    Twin<float> acc = twin(Floats{1.5f}), acc_sq = twin(Floats{0.25f});
    for (int call = 0; call < 2; ++call)
      both([&](Backend& be, int s) {
        be.sum(acc[s], x[s], n);
        be.sum_squares(acc_sq[s], x[s], n);
      });
    expect_close(acc, kTol, "sum, twice");
    expect_close(acc_sq, kTol, "sum_squares, twice");
    Twin<float> again = twin(Floats{1.5f});
    for (int call = 0; call < 2; ++call) gpu_->sum(again[1], x[1], n);
    EXPECT_EQ(first_bit_difference(again.gpu(), acc.gpu()), -1) << "sum is not the same bits run to run";
  }
}

// ---------------------------------------------------------------- LayerNorm

// The forward and backward stages on (m, c) rows of full width C, with the aliasing the
// trainer uses (mean over sums, rstd over squares), the accumulating backward called twice.
TEST_F(CudaBackendOps, LayerNormStagesOneRankAndALocalShard) {
  struct Case {
    int64_t m, c, C;
  };
  // c = C: one rank; c < C: this rank's columns of a split row (the stages see only c).
  for (const Case& cs : {Case{301, 1000, 1000}, Case{301, 48, 96}, Case{7, 100, 100}}) {
    const int64_t m = cs.m, c = cs.c, C = cs.C;
    SCOPED_TRACE("m=" + std::to_string(m) + " c=" + std::to_string(c) + " C=" + std::to_string(C));
    Twin<float> x = twin(random_floats(rng_, m * c, -2.0f, 3.0f));
    Twin<float> gamma = twin(random_floats(rng_, c, 0.5f, 1.5f)), beta = twin(random_floats(rng_, c));
    Twin<float> stats = poisoned(m), squares = poisoned(m), out = poisoned(m * c);
    const float eps = 1e-5f;
    both([&](Backend& be, int s) {
      be.layernorm_row_sums(stats[s], x[s], m, c);
      be.layernorm_centered_squares(stats[s], squares[s], stats[s], x[s], m, c, C);
      be.layernorm_normalize(out[s], squares[s], x[s], stats[s], squares[s], gamma[s], beta[s], m, c, C, eps);
    });
    expect_close(stats, kTol, "mean");
    expect_close(squares, kTol, "rstd");
    expect_close(out, kTol, "layernorm out");

    // The residual add fused into the first stage, the sum written over one input.
    Twin<float> branch = twin(random_floats(rng_, m * c, -1.0f, 1.0f)), row_sums = poisoned(m);
    both([&](Backend& be, int s) { be.layernorm_residual_row_sums(branch[s], row_sums[s], branch[s], x[s], m, c); });
    expect_close(branch, kTol, "residual sum");
    expect_close(row_sums, kTol, "residual row sums");

    // Backward from the CPU's mean and rstd on both, so each stage is compared on its own.
    const Floats mean = stats.cpu(), rstd = squares.cpu();
    Twin<float> tmean = twin(mean), trstd = twin(rstd);
    Twin<float> dout = twin(random_floats(rng_, m * c)), partials = poisoned(2 * m);
    Twin<float> dx = twin(random_floats(rng_, m * c)), dgamma = twin(random_floats(rng_, c));
    Twin<float> dbeta = twin(random_floats(rng_, c));
    both([&](Backend& be, int s) {
      be.layernorm_backward_partials(partials[s], dout[s], x[s], tmean[s], trstd[s], gamma[s], m, c);
    });
    expect_close(partials, kTol, "backward partials");
    const Twin<float> tpartials = twin(partials.cpu());
    for (int call = 0; call < 2; ++call)
      both([&](Backend& be, int s) {
        be.layernorm_backward_finish(dx[s], dgamma[s], dbeta[s], tpartials[s], dout[s], x[s], tmean[s], trstd[s],
                                     gamma[s], m, c, C);
      });
    expect_close(dx, kTol, "dx, twice");
    expect_close(dgamma, kTol, "dgamma, twice");
    expect_close(dbeta, kTol, "dbeta, twice");
  }
}

// The whole-row LayerNorm ops (one kernel each on the GPU) give the same bits as the stages
// run one after another on the same GPU, and match the CPU; the residual sum is written over
// its first input as the trainer does, and the backward accumulates twice.
TEST_F(CudaBackendOps, WholeRowLayerNormEqualsItsStagesBitwise) {
  constexpr float eps = 1e-5f;
  const std::vector<std::string> names = {"x", "out", "mean", "rstd", "plain out", "dx", "dgamma", "dbeta", "partials"};
  for (const auto& [m, C] : {std::pair<int64_t, int64_t>{301, 1000}, {7, 100}, {64, 33}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " C=" + std::to_string(C));
    const Floats a = random_floats(rng_, m * C, -2.0f, 3.0f), b = random_floats(rng_, m * C);
    const Floats gamma = random_floats(rng_, C, 0.5f, 1.5f), beta = random_floats(rng_, C);
    const Floats dout = random_floats(rng_, m * C), dx0 = random_floats(rng_, m * C);
    const Floats dgamma0 = random_floats(rng_, C), dbeta0 = random_floats(rng_, C);
    // Every output of the sequence, downloaded in `names` order.
    auto run = [&](Backend& be, bool whole) {
      auto nan = [&](int64_t n) {
        DeviceBuffer<float> buf(be, static_cast<size_t>(n));
        be.fill(buf.data(), kNaN, n);
        return buf;
      };
      DeviceBuffer<float> x(be, a), bb(be, b), g(be, gamma), bt(be, beta), dy(be, dout), dx(be, dx0);
      DeviceBuffer<float> dg(be, dgamma0), db(be, dbeta0);
      DeviceBuffer<float> out = nan(m * C), mean = nan(m), rstd = nan(m), plain = nan(m * C), partials = nan(2 * m);
      DeviceBuffer<float> scratch_mean = nan(m), scratch_rstd = nan(m);
      if (whole) {
        be.residual_layernorm_rows(x.data(), out.data(), mean.data(), rstd.data(), x.data(), bb.data(), g.data(),
                                   bt.data(), m, C, eps);
        be.layernorm_rows(plain.data(), scratch_mean.data(), scratch_rstd.data(), x.data(), g.data(), bt.data(), m, C,
                          eps);
      } else {
        be.layernorm_residual_row_sums(x.data(), mean.data(), x.data(), bb.data(), m, C);
        be.layernorm_centered_squares(mean.data(), rstd.data(), mean.data(), x.data(), m, C, C);
        be.layernorm_normalize(out.data(), rstd.data(), x.data(), mean.data(), rstd.data(), g.data(), bt.data(), m, C,
                               C, eps);
        be.layernorm_row_sums(scratch_mean.data(), x.data(), m, C);
        be.layernorm_centered_squares(scratch_mean.data(), scratch_rstd.data(), scratch_mean.data(), x.data(), m, C, C);
        be.layernorm_normalize(plain.data(), scratch_rstd.data(), x.data(), scratch_mean.data(), scratch_rstd.data(),
                               g.data(), bt.data(), m, C, C, eps);
      }
      for (int call = 0; call < 2; ++call) {
        if (whole) {
          be.layernorm_rows_backward(dx.data(), dg.data(), db.data(), partials.data(), dy.data(), x.data(), mean.data(),
                                     rstd.data(), g.data(), m, C);
        } else {
          be.layernorm_backward_partials(partials.data(), dy.data(), x.data(), mean.data(), rstd.data(), g.data(), m,
                                         C);
          be.layernorm_backward_finish(dx.data(), dg.data(), db.data(), partials.data(), dy.data(), x.data(),
                                       mean.data(), rstd.data(), g.data(), m, C, C);
        }
      }
      return std::vector<Floats>{x.download(),  out.download(), mean.download(), rstd.download(),    plain.download(),
                                 dx.download(), dg.download(),  db.download(),   partials.download()};
    };
    const std::vector<Floats> whole = run(*gpu_, true), staged = run(*gpu_, false), cpu = run(*cpu_, true);
    for (size_t i = 0; i < names.size(); ++i) {
      const int64_t at = first_bit_difference(whole[i], staged[i]);
      EXPECT_EQ(at, -1) << names[i] << ": the whole-row op and the stages differ at element " << at;
      EXPECT_LE(normalized_error(whole[i], cpu[i]), kTol) << names[i] << ": normalized error of CUDA against CPU";
    }
  }
}

// ---------------------------------------------------------------- GELU

TEST_F(CudaBackendOps, GeluForwardAndBackwardInPlace) {
  Floats xs;
  for (int i = -600; i <= 600; ++i) xs.push_back(static_cast<float>(i) * 0.01f);  // [-6, 6]
  const auto n = static_cast<int64_t>(xs.size());
  Twin<float> x = twin(xs), y = poisoned(n), dout = twin(random_floats(rng_, n));
  both([&](Backend& be, int s) { be.gelu_forward(y[s], x[s], n); });
  expect_close(y, kTol, "gelu_forward");
  both([&](Backend& be, int s) { be.gelu_backward(dout[s], x[s], dout[s], n); });  // dx over dout
  expect_close(dout, kTol, "gelu_backward in place");
  both([&](Backend& be, int s) { be.gelu_forward(x[s], x[s], n); });  // out over x
  expect_close(x, kTol, "gelu_forward in place");

  // Far tails: finite (σ saturates to 0 or 1), as on the CPU.
  Twin<float> tails = twin(Floats{-100.0f, -40.0f, -12.0f, 12.0f, 40.0f, 100.0f, 0.0f});
  Twin<float> tail_out = poisoned(7), tail_grad = twin(Floats(7, 1.0f));
  both([&](Backend& be, int s) {
    be.gelu_forward(tail_out[s], tails[s], 7);
    be.gelu_backward(tail_grad[s], tails[s], tail_grad[s], 7);
  });
  expect_close(tail_out, kTol, "gelu_forward tails");
  expect_close(tail_grad, kTol, "gelu_backward tails");
}

// ---------------------------------------------------------------- attention

struct AttentionCase {
  int64_t B, T, h, d;
  // q, k, v inside one buffer: multi-head GPT-2's (B, T, 3·h·d) [q | k | v]; grouped-query
  // Megatron-LM's (B, T, kv·(g + 2)·d), per group [g query heads | k | v]. Else three buffers
  // of rows ld = h·d, groups g·d apart: q plain, key/value head j at j·g·d.
  bool packed;
  int64_t kv = 0;   // key/value heads; 0: h (multi-head attention)
  int64_t pad = 0;  // packed grouped-query only: unused columns after each group, NaN in the inputs
};

class CudaAttention : public CudaBackendOps {
 protected:
  void check(const AttentionCase& a, double tol) {
    const int64_t B = a.B, T = a.T, h = a.h, kv = a.kv > 0 ? a.kv : a.h, d = a.d, hd = h * d, g = h / kv;
    SCOPED_TRACE("attention B=" + std::to_string(B) + " T=" + std::to_string(T) + " h=" + std::to_string(h) +
                 " kv=" + std::to_string(kv) + " d=" + std::to_string(d) + (a.packed ? " packed" : " three buffers"));
    const bool gpt2 = a.packed && kv == h;
    const int64_t group_stride = gpt2 ? d : a.packed ? (g + 2) * d + a.pad : g * d;
    const int64_t ld = gpt2 ? 3 * hd : a.packed ? kv * group_stride : hd;
    const int64_t k_at = gpt2 ? hd : a.packed ? g * d : 0, v_at = gpt2 ? 2 * hd : a.packed ? (g + 1) * d : 0;
    // Inputs: one packed buffer, or three; q, k, v point into them.
    // Which columns of a row of buffer i (packed: the one) some head covers; the rest are
    // NaN in the inputs, and the backward must leave them as the poison it found.
    auto covered = [&](size_t i) {
      std::vector<bool> c(static_cast<size_t>(ld), !a.packed && i == 0);  // three buffers: q is dense
      auto mark = [&](int64_t at) { std::fill(c.begin() + at, c.begin() + at + d, true); };
      for (int64_t j = 0; j < kv && (a.packed || i > 0); ++j) {
        if (a.packed) {
          for (int64_t e = 0; e < g; ++e) mark(j * group_stride + e * d);
          mark(k_at + j * group_stride);
          mark(v_at + j * group_stride);
        } else {
          mark(j * group_stride);
        }
      }
      return c;
    };
    std::vector<Twin<float>> in;
    if (a.packed) {
      Floats qkv = random_floats(rng_, B * T * ld, -1.5f, 1.5f);
      const std::vector<bool> c = covered(0);
      for (int64_t e = 0; e < B * T * ld; ++e)
        if (!c[static_cast<size_t>(e % ld)]) qkv[e] = std::numeric_limits<float>::quiet_NaN();
      in.push_back(twin(qkv));
    } else {
      for (int i = 0; i < 3; ++i) in.push_back(twin(random_floats(rng_, B * T * ld, -1.5f, 1.5f)));
    }
    auto q = [&](int s) { return in[0][s]; };
    auto k = [&](int s) { return a.packed ? in[0][s] + k_at : in[1][s]; };
    auto v = [&](int s) { return a.packed ? in[0][s] + v_at : in[2][s]; };
    Twin<float> out = poisoned(B * T * hd), lse = poisoned(B * h * T);
    both([&](Backend& be, int s) {
      be.attention_forward(out[s], lse[s], q(s), k(s), v(s), ld, B, T, h, kv, d, group_stride);
    });
    expect_close(out, tol, "attention out");
    expect_close(lse, tol, "attention lse");

    // Backward from the CPU's out and lse on both, so it is compared on its own. The gradients
    // are views like q, k, v: with packed inputs one packed buffer, all written.
    const Twin<float> cpu_out = twin(out.cpu()), cpu_lse = twin(lse.cpu());
    Twin<float> dout = twin(random_floats(rng_, B * T * hd));
    std::vector<Twin<float>> grads;
    for (int i = 0; i < (a.packed ? 1 : 3); ++i) grads.push_back(poisoned(B * T * ld));
    auto dq = [&](int s) { return grads[0][s]; };
    auto dk = [&](int s) { return a.packed ? grads[0][s] + k_at : grads[1][s]; };
    auto dv = [&](int s) { return a.packed ? grads[0][s] + v_at : grads[2][s]; };
    both([&](Backend& be, int s) {
      be.attention_backward(dq(s), dk(s), dv(s), dout[s], cpu_out[s], cpu_lse[s], q(s), k(s), v(s), ld, B, T, h, kv, d,
                            group_stride);
    });
    // The head columns by normalized error; the others still NaN on both backends.
    for (size_t i = 0; i < grads.size(); ++i) {
      const std::vector<bool> c = covered(i);
      const Floats cpu = grads[i].cpu(), gpu = grads[i].gpu();
      Floats cpu_heads, gpu_heads;
      int64_t touched = 0;
      for (int64_t e = 0; e < B * T * ld; ++e) {
        if (c[static_cast<size_t>(e % ld)]) {
          cpu_heads.push_back(cpu[e]);
          gpu_heads.push_back(gpu[e]);
        } else {
          touched += std::isnan(cpu[e]) && std::isnan(gpu[e]) ? 0 : 1;
        }
      }
      EXPECT_LE(normalized_error(gpu_heads, cpu_heads), tol) << "attention gradient buffer " << i;
      EXPECT_EQ(touched, 0) << "attention gradient buffer " << i << ": columns outside every head written";
    }
  }
};

// Grouped-query attention (kv < h, query head i reading key/value head i/(h/kv)): multi-query
// (kv 1) and groups of 2 and 3, packed in Megatron-LM's grouped layout and in three buffers,
// partial tiles, each column count; and unused columns between the groups (group_stride
// past (g + 2)·d), which neither backend may read or write.
const std::vector<AttentionCase> kGroupedQueryCases = {
    {2, 37, 4, 16, true, 2},    {1, 65, 4, 24, false, 1},   {2, 96, 6, 64, true, 2},
    {1, 130, 4, 40, true, 1},   {1, 70, 3, 96, false, 1},   {1, 257, 2, 128, true, 1},
    {2, 37, 4, 32, true, 2, 8}, {1, 70, 6, 64, true, 3, 5}, {2, 45, 3, 32, true, 3, 16}};

TEST_F(CudaAttention, GroupedQueryAttentionMatchesTheCpu) {
  for (const AttentionCase& a : kGroupedQueryCases) check(a, kTol);
}

// The kernels work on tiles of 32 query rows and 32 keys, d/32 columns per lane (d = 64 has
// its own compiled version); the shapes cover partial tiles, each column count and one token.
TEST_F(CudaAttention, PackedQkvAndThreeBuffersMatchTheCpu) {
  check({2, 37, 3, 16, true}, kTol);    // odd T, ld = 3·h·d; one column per lane, half idle
  check({1, 65, 2, 24, false}, kTol);   // three buffers, d not a power of two
  check({3, 1, 2, 8, true}, kTol);      // one token: its probability is 1
  check({2, 96, 2, 64, true}, kTol);    // d = 64 (GPT-2), T a multiple of the tile
  check({1, 100, 2, 40, false}, kTol);  // two columns per lane, the second partial
  check({1, 70, 1, 96, true}, kTol);    // three columns per lane
  check({1, 33, 2, 128, true}, kTol);   // d = 128, the largest: over 48 KiB of shared memory
  check({1, 300, 1, 8, false}, kTol);   // ten key tiles, the last of 12 keys
}

// With the bf16 GEMM math attention runs on tensor cores (attention_bf16.hpp): q, k, v, dout
// and the probabilities are rounded to bf16, products accumulate in float32. Normalized
// errors measured on these shapes (CPU emulation of the kernels, mma products in float32):
// at most 3.3e-3 for out, 2.2e-3 for lse, 5.8e-3 for the gradients; the bound leaves 5×. The
// cases add a second 128-row block (T = 130, 257) and each padded head size (32, 64, 96, 128).
constexpr double kBf16AttentionTol = 1.0 / 32;

TEST_F(CudaAttention, Bf16BackendRunsAttentionOnTensorCoresWithinBf16Error) {
  auto be = make_cuda_backend(CudaBackendOptions{0, GemmMath::bf16});
  gpu_ = be.get();
  for (const AttentionCase& a : std::vector<AttentionCase>{{2, 37, 3, 16, true},
                                                           {1, 65, 2, 24, false},
                                                           {3, 1, 2, 8, true},
                                                           {2, 96, 2, 64, true},
                                                           {1, 100, 2, 40, false},
                                                           {1, 70, 1, 96, true},
                                                           {1, 33, 2, 128, true},
                                                           {1, 300, 1, 8, false},
                                                           {1, 257, 1, 128, false},
                                                           {1, 130, 1, 72, true}})
    check(a, kBf16AttentionTol);
  gpu_ = fp32_.get();
}

TEST_F(CudaAttention, Bf16GroupedQueryAttentionOnTensorCoresWithinBf16Error) {
  auto be = make_cuda_backend(CudaBackendOptions{0, GemmMath::bf16});
  gpu_ = be.get();
  for (const AttentionCase& a : kGroupedQueryCases) check(a, kBf16AttentionTol);
  gpu_ = fp32_.get();
}

TEST_F(CudaAttention, HeadSizeOver128IsRejectedNamingIt) {
  DeviceBuffer<float> buf(*gpu_, 4 * 160);
  float* p = buf.data();
  expect_backend_error([&] { gpu_->attention_forward(p, p, p, p, p, 160, 1, 1, 1, 1, 160, 160); },
                       "attention_forward: head size d = 160 exceeds 128");
  expect_backend_error([&] { gpu_->attention_backward(p, p, p, p, p, p, p, p, p, 160, 1, 1, 1, 1, 160, 160); },
                       "attention_backward: head size d = 160 exceeds 128");
}

// ---------------------------------------------------------------- embeddings

TEST_F(CudaBackendOps, EmbeddingLookupAndScatterAddEqualTheCpuBitwise) {
  struct Case {
    int64_t m, c, v0, v_local;
    int32_t vocab;
  };
  // This rank holds rows [v0, v0 + v_local) of the vocab: tokens below and above are out of
  // its range. The second case has few rows and many tokens: long runs of one row.
  for (const Case& cs : {Case{1000, 70, 50, 60, 200}, Case{20000, 33, 0, 30, 40}}) {
    SCOPED_TRACE("m=" + std::to_string(cs.m) + " c=" + std::to_string(cs.c) + " v_local=" + std::to_string(cs.v_local));
    const int64_t m = cs.m, c = cs.c, v0 = cs.v0, vl = cs.v_local;
    Twin<int32_t> tokens = twin(random_tokens(rng_, m, cs.vocab));
    Twin<float> table = twin(random_floats(rng_, vl * c)), out = poisoned(m * c);
    both([&](Backend& be, int s) { be.embedding_forward(out[s], tokens[s], table[s], m, c, v0, vl); });
    expect_same_bits(out, "embedding_forward");
    Twin<float> dout = twin(random_floats(rng_, m * c)), dtable = twin(random_floats(rng_, vl * c));
    for (int call = 0; call < 2; ++call)
      both([&](Backend& be, int s) { be.embedding_backward(dtable[s], dout[s], tokens[s], m, c, v0, vl); });
    expect_same_bits(dtable, "embedding_backward, twice");
  }
}

TEST_F(CudaBackendOps, PositionEmbeddingEqualsTheCpuBitwise) {
  const int64_t B = 3, T = 17, c = 45;
  Twin<float> out = twin(random_floats(rng_, B * T * c)), wpe = twin(random_floats(rng_, T * c));
  both([&](Backend& be, int s) { be.position_forward(out[s], wpe[s], B, T, c); });
  expect_same_bits(out, "position_forward");
  Twin<float> dwpe = twin(random_floats(rng_, T * c));
  for (int call = 0; call < 2; ++call)
    both([&](Backend& be, int s) { be.position_backward(dwpe[s], out[s], B, T, c); });
  expect_same_bits(dwpe, "position_backward, twice");
}

// ---------------------------------------------------------------- cross-entropy

TEST_F(CudaBackendOps, CrossEntropyStagesOnOneVocabRankOfThree) {
  // This rank is vocab rank 1 of 3: columns [101, 202) of 303; targets anywhere in the vocab.
  const int64_t m = 37, vl = 101, groups = 3, v0 = vl;
  Floats logits = random_floats(rng_, m * vl, -4.0f, 4.0f);
  for (int64_t j = 0; j < vl; ++j) logits[static_cast<size_t>(3 * vl + j)] += 200.0f;  // exp overflows without the max
  Twin<float> tl = twin(logits);
  Twin<int32_t> targets = twin(random_tokens(rng_, m, static_cast<int32_t>(groups * vl)));

  Twin<float> row_max = poisoned(m);
  both([&](Backend& be, int s) { be.cross_entropy_row_max(row_max[s], tl[s], m, vl); });
  expect_same_bits(row_max, "cross_entropy_row_max");  // a max does not depend on the order

  // The all-gather, by hand: the other ranks' maxima are this one's ± up to 1.
  const Floats mine = row_max.cpu();
  Floats gathered(static_cast<size_t>(groups * m));
  std::uniform_real_distribution<float> shift(-1.0f, 1.0f);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < m; ++i)
      gathered[static_cast<size_t>(g * m + i)] = mine[static_cast<size_t>(i)] + (g == 1 ? 0.0f : shift(rng_));
  Twin<float> tg = twin(gathered);

  Twin<float> partials = poisoned(2 * m), mx = poisoned(m), exps = poisoned(m * vl);
  both([&](Backend& be, int s) {
    be.cross_entropy_partials(partials[s], mx[s], exps[s], tg[s], groups, tl[s], targets[s], m, vl, v0);
  });
  expect_same_bits(mx, "cross_entropy_partials max");
  expect_close(exps, kTol, "cross_entropy_partials exps");
  expect_close(partials, kTol, "cross_entropy_partials partials");

  // exps written over the logits, as the trainer does: the target's logit is read first.
  Twin<float> in_place = twin(logits), partials2 = poisoned(2 * m), mx2 = poisoned(m);
  both([&](Backend& be, int s) {
    be.cross_entropy_partials(partials2[s], mx2[s], in_place[s], tg[s], groups, in_place[s], targets[s], m, vl, v0);
  });
  expect_close(in_place, kTol, "exps over logits");
  expect_close(partials2, kTol, "partials with exps over logits");

  // Loss and backward from the CPU's partials and exps on both.
  const Twin<float> cp = twin(partials.cpu()), ce = twin(exps.cpu()), cm = twin(mx.cpu());
  Twin<float> loss = poisoned(m), dlogits = poisoned(m * vl);
  both([&](Backend& be, int s) {
    be.cross_entropy_loss(loss[s], cp[s], cm[s], m);
    be.cross_entropy_backward(dlogits[s], ce[s], cp[s], targets[s], m, vl, v0, 1.0f / static_cast<float>(m));
  });
  expect_close(loss, kTol, "cross_entropy_loss");
  expect_same_bits(dlogits, "cross_entropy_backward");  // one rounded product, then the target's subtraction
  Twin<float> in_place_d = twin(exps.cpu());
  both([&](Backend& be, int s) {
    be.cross_entropy_backward(in_place_d[s], in_place_d[s], cp[s], targets[s], m, vl, v0, 0.5f);
  });
  expect_same_bits(in_place_d, "cross_entropy_backward over exps");
}

// Whole rows, forward and backward in one op (one kernel on the GPU, a running max and sum):
// loss and dlogits match the CPU's stages, with rows whose max comes late (the running sum
// is rescaled) or that would overflow exp without the max, a vocabulary wider and narrower
// than a block, and the target first or last in its row.
TEST_F(CudaBackendOps, CrossEntropyOfWholeRowsMatchesTheStages) {
  for (const auto& [m, V] : {std::pair<int64_t, int64_t>{37, 1001}, {5, 7}, {3, 50257}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " V=" + std::to_string(V));
    Floats logits = random_floats(rng_, m * V, -4.0f, 4.0f);
    for (int64_t j = 0; j < V; ++j) {
      logits[static_cast<size_t>(j)] = static_cast<float>(j) * 0.01f;  // row 0 rises: the max comes last
      logits[static_cast<size_t>(V + j)] += 200.0f;                    // row 1: exp overflows without the max
    }
    Tokens t = random_tokens(rng_, m, static_cast<int32_t>(V));
    t[0] = 0;
    t[static_cast<size_t>(m - 1)] = static_cast<int32_t>(V - 1);
    Twin<float> tl = twin(logits), loss = poisoned(m), mx = poisoned(m), partials = poisoned(2 * m);
    Twin<int32_t> targets = twin(t);
    const float scale = 1.0f / static_cast<float>(m);
    both([&](Backend& be, int s) {
      be.cross_entropy_rows(loss[s], tl[s], targets[s], m, V, scale, mx[s], partials[s]);
    });
    expect_close(loss, kTol, "cross_entropy_rows loss");
    expect_close(tl, kTol, "cross_entropy_rows dlogits");
  }
}

// ---------------------------------------------------------------- AdamW

TEST_F(CudaBackendOps, AdamWOverThreeStepsWithAndWithoutDecay) {
  const int64_t n = 1007;
  for (bool decay : {true, false}) {
    SCOPED_TRACE(decay ? "decay" : "no decay");
    Twin<float> param = twin(random_floats(rng_, n)), m = twin(Floats(static_cast<size_t>(n), 0.0f));
    Twin<float> v = twin(Floats(static_cast<size_t>(n), 0.0f));
    AdamWStep step;
    step.lr = 1e-3f;
    step.weight_decay = 0.1f;
    step.grad_scale = 0.5f;
    for (int64_t t = 1; t <= 3; ++t) {
      step.t = t;
      Twin<float> grad = twin(random_floats(rng_, n, -3.0f, 3.0f));
      both([&](Backend& be, int s) { be.adamw(param[s], grad[s], m[s], v[s], n, step, decay); });
    }
    expect_close(param, kTol, "param");
    expect_close(m, kTol, "m");
    expect_close(v, kTol, "v");
  }
}

// ---------------------------------------------------------------- mixture of experts

// The MoE ops on both activation types: the inputs are bf16 values, so the CPU (float32) and
// the GPU read the same numbers either way. The router's and the gate gradient's outputs are
// float32 (kTol); an activation output stored in bf16 is the CPU's float32 result rounded
// once: normalized error at most one rounding, 2^-8.
constexpr ElementType kActivationTypes[] = {ElementType::float32, ElementType::bfloat16};
constexpr double kOneBf16Rounding = 1.0 / 256;

Floats rounded_to_bf16(Floats v) {
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

// Activations of `type` on a backend, written from and read back as floats.
class Activations {
 public:
  Activations(Backend& be, ElementType type, const Floats& values)
      : be_(&be), type_(type), bytes_(be, values.size() * element_size(type)) {
    if (type == ElementType::float32) {
      be.copy_to_device(bytes_.data(), values.data(), bytes_.bytes());
      return;
    }
    std::vector<uint16_t> bits(values.size());
    std::transform(values.begin(), values.end(), bits.begin(), float_to_bf16);
    be.copy_to_device(bytes_.data(), bits.data(), bytes_.bytes());
  }
  ActPtr ptr() { return ActPtr(bytes_.data(), type_); }
  Floats values() const {
    const size_t n = bytes_.size() / element_size(type_);
    Floats out(n);
    if (type_ == ElementType::float32) {
      be_->copy_to_host(out.data(), bytes_.data(), bytes_.bytes());
      return out;
    }
    std::vector<uint16_t> bits(n);
    be_->copy_to_host(bits.data(), bytes_.data(), bytes_.bytes());
    std::transform(bits.begin(), bits.end(), out.begin(), bf16_to_float);
    return out;
  }

 private:
  Backend* be_;
  ElementType type_;
  DeviceBuffer<std::byte> bytes_;
};

// Ops compared on both activation types: the same values as float32 on the CPU and as
// `type` on the GPU.
class CudaActivationOps : public CudaBackendOps {
 protected:
  // The same values as activations on the CPU (float32) and the GPU (`type`).
  struct ActTwin {
    Activations side[2];
    ActPtr operator[](int s) { return side[s].ptr(); }
  };
  ActTwin act_twin(ElementType type, const Floats& values) {
    return ActTwin{{Activations(*cpu_, ElementType::float32, values), Activations(*gpu_, type, values)}};
  }
  // The GPU's activation output against the CPU's: bitwise in float32 where `bitwise`, else
  // within kTol; in bf16 within one rounding.
  static void expect_act_close(ActTwin& t, ElementType type, bool bitwise, const std::string& what) {
    const Floats cpu = t.side[0].values(), gpu = t.side[1].values();
    if (type == ElementType::bfloat16) {
      EXPECT_LE(normalized_error(gpu, cpu), kOneBf16Rounding) << what << " in bf16";
    } else if (bitwise) {
      const int64_t at = first_bit_difference(gpu, cpu);
      EXPECT_EQ(at, -1) << what << ": CUDA and CPU differ at element " << at;
    } else {
      EXPECT_LE(normalized_error(gpu, cpu), kTol) << what;
    }
  }
};

class CudaMixtureOfExperts : public CudaActivationOps {};

TEST_F(CudaMixtureOfExperts, RouterLogitsAndBackwardOnBothActivationTypes) {
  const int64_t m = 300, c = 70, E = 8;
  for (ElementType type : kActivationTypes) {
    SCOPED_TRACE(element_type_name(type));
    ActTwin x = act_twin(type, rounded_to_bf16(random_floats(rng_, m * c)));
    Twin<float> w = twin(random_floats(rng_, c * E)), logits = poisoned(m * E);
    both([&](Backend& be, int s) { be.router_logits(logits[s], x[s], w[s], m, c, E); });
    expect_close(logits, kTol, "router_logits");

    Twin<float> dlogits = twin(random_floats(rng_, m * E)), dw = twin(random_floats(rng_, c * E));
    ActTwin dx = act_twin(type, rounded_to_bf16(random_floats(rng_, m * c)));
    both([&](Backend& be, int s) { be.router_backward(dx[s], dw[s], dlogits[s], x[s], w[s], m, c, E); });
    expect_close(dw, kTol, "router_backward dw");
    expect_act_close(dx, type, false, "router_backward dx");
  }
}

TEST_F(CudaMixtureOfExperts, RouterTopKAndItsGradientMatchTheCpu) {
  const int64_t m = 300, E = 8;  // more rows than a block's threads
  Floats logits = random_floats(rng_, m * E, -3.0f, 3.0f);
  std::fill(logits.begin(), logits.begin() + E, 1.0f);  // row 0: all equal, experts 0 then 1
  logits[E + 5] = logits[E + 3] = 4.0f;                 // row 1: two equal largest, 3 then 5
  for (int64_t k : {1, 2}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    Twin<float> tl = twin(logits), probs = poisoned(m * E), gates = poisoned(m * k);
    Twin<int32_t> experts = twin(Tokens(static_cast<size_t>(m * k), -1));
    both([&](Backend& be, int s) { be.router_top_k(probs[s], experts[s], gates[s], tl[s], m, E, k); });
    expect_close(probs, kTol, "router_top_k probs");
    expect_close(gates, kTol, "router_top_k gates");
    const Tokens chosen = experts.gpu();
    EXPECT_EQ(chosen, experts.cpu()) << "router_top_k experts";
    EXPECT_EQ(chosen[0], 0);
    EXPECT_EQ(chosen[static_cast<size_t>(k)], 3);
    if (k == 2) {
      EXPECT_EQ((Tokens{chosen[1], chosen[3]}), (Tokens{1, 5}));
    }

    // probs over the logits on the GPU: its own separate result, bitwise.
    Twin<float> in_place = twin(logits), gates2 = poisoned(m * k);
    Twin<int32_t> experts2 = twin(Tokens(static_cast<size_t>(m * k), -1));
    gpu_->router_top_k(in_place[1], experts2[1], gates2[1], in_place[1], m, E, k);
    EXPECT_EQ(first_bit_difference(in_place.gpu(), probs.gpu()), -1) << "probs written over the logits";
    EXPECT_EQ(experts2.gpu(), chosen);
    EXPECT_EQ(first_bit_difference(gates2.gpu(), gates.gpu()), -1);

    // The gradient from the CPU's probabilities and choices on both.
    const Twin<float> p = twin(probs.cpu()), coef = twin(random_floats(rng_, E));
    const Twin<int32_t> ex = twin(experts.cpu());
    const Twin<float> dgates = twin(random_floats(rng_, m * k));
    for (bool with_coef : {true, false}) {
      Twin<float> dlogits = poisoned(m * E);
      both([&](Backend& be, int s) {
        be.router_logits_grad(dlogits[s], p[s], ex[s], dgates[s], with_coef ? coef[s] : nullptr, m, E, k);
      });
      expect_close(dlogits, kTol, with_coef ? "router_logits_grad with coef" : "router_logits_grad");
    }
  }
}

TEST_F(CudaMixtureOfExperts, DispatchAndCombineOnBothActivationTypes) {
  const int64_t m = 300, k = 2, n = m * k, c = 45;
  // rows: each token twice, then a padded slot (-1) and one past m; slots: a permutation of
  // the permuted rows with every seventh dropped (-1) and one past n.
  Tokens rows(static_cast<size_t>(n)), slots(static_cast<size_t>(m * k));
  for (int64_t j = 0; j < n; ++j) rows[j] = static_cast<int32_t>((j * 7) % m);
  rows[5] = -1;
  rows[9] = static_cast<int32_t>(m);
  for (int64_t p = 0; p < m * k; ++p) slots[p] = p % 7 == 3 ? -1 : static_cast<int32_t>((p * 11) % n);
  slots[8] = static_cast<int32_t>(n);
  Twin<int32_t> trows = twin(rows), tslots = twin(slots);
  Twin<float> scale = twin(random_floats(rng_, n)), gates = twin(random_floats(rng_, m * k));
  for (ElementType type : kActivationTypes) {
    SCOPED_TRACE(element_type_name(type));
    ActTwin x = act_twin(type, rounded_to_bf16(random_floats(rng_, m * c)));
    for (bool scaled : {false, true}) {
      ActTwin out = act_twin(type, Floats(static_cast<size_t>(n * c), kNaN));
      both([&](Backend& be, int s) {
        be.gather_rows(out[s], x[s], trows[s], scaled ? scale[s] : nullptr, n, m, c);
      });
      expect_act_close(out, type, true, scaled ? "gather_rows scaled" : "gather_rows");
    }
    ActTwin in = act_twin(type, rounded_to_bf16(random_floats(rng_, n * c)));
    for (bool gated : {true, false})
      for (int64_t kk : {int64_t{1}, k}) {
        ActTwin out = act_twin(type, rounded_to_bf16(random_floats(rng_, m * c)));
        both([&](Backend& be, int s) {
          be.combine_rows(out[s], in[s], tslots[s], gated ? gates[s] : nullptr, m, kk, n, c);
        });
        expect_act_close(out, type, true,
                         std::string("combine_rows k = ") + std::to_string(kk) + (gated ? " gated" : " ungated"));
      }
    ActTwin dout = act_twin(type, rounded_to_bf16(random_floats(rng_, m * c)));
    Twin<float> dgates = poisoned(m * k);
    both([&](Backend& be, int s) { be.combine_gates_grad(dgates[s], dout[s], in[s], tslots[s], m, k, n, c); });
    expect_close(dgates, kTol, "combine_gates_grad");
  }
}

// ---------------------------------------------------------------- Llama ops

// RMSNorm's stages on a local shard (c < C) and on whole rows (c = C), with the aliasing the
// trainer uses (rstd over squares, the residual sum over its first input), the backward
// accumulating twice; then the whole-row ops, which must equal the stages bitwise on the GPU.
TEST_F(CudaActivationOps, RmsNormStagesAndWholeRowsOnBothActivationTypes) {
  constexpr float eps = 1e-5f;
  struct Case {
    int64_t m, c, C;
  };
  for (ElementType type : kActivationTypes)
    for (const Case& cs : {Case{301, 1000, 1000}, Case{301, 48, 96}, Case{7, 100, 100}}) {
      const int64_t m = cs.m, c = cs.c, C = cs.C;
      SCOPED_TRACE(std::string(element_type_name(type)) + " m=" + std::to_string(m) + " c=" + std::to_string(c) +
                   " C=" + std::to_string(C));
      const Floats a = rounded_to_bf16(random_floats(rng_, m * c, -2.0f, 3.0f));
      const Floats b = rounded_to_bf16(random_floats(rng_, m * c));
      ActTwin x = act_twin(type, a), branch = act_twin(type, b), out = act_twin(type, Floats(m * c, kNaN));
      Twin<float> gamma = twin(random_floats(rng_, c, 0.5f, 1.5f)), squares = poisoned(m), rstd = poisoned(m);
      both([&](Backend& be, int s) {
        be.rmsnorm_row_squares(squares[s], x[s], m, c);
        be.rmsnorm_residual_row_squares(branch[s], rstd[s], branch[s], x[s], m, c);
      });
      expect_close(squares, kTol, "row squares");
      expect_act_close(branch, type, false, "residual sum");
      if (type == ElementType::bfloat16) {
        // The GPU sums the squares of the sum as it stored it, rounded to bf16: the CPU's squares
        // of those values.
        DeviceBuffer<float> stored(*cpu_, branch.side[1].values()), want(*cpu_, static_cast<size_t>(m));
        cpu_->rmsnorm_row_squares(want.data(), stored.data(), m, c);
        EXPECT_LE(normalized_error(rstd.gpu(), want.download()), kTol) << "residual row squares of the stored sum";
      } else {
        expect_close(rstd, kTol, "residual row squares");
      }
      both([&](Backend& be, int s) {
        be.rmsnorm_normalize(out[s], squares[s], x[s], squares[s], gamma[s], m, c, C, eps);
      });
      expect_close(squares, kTol, "rstd");
      expect_act_close(out, type, false, "rmsnorm out");

      // Backward from the CPU's rstd on both, so each stage is compared on its own.
      const Twin<float> trstd = twin(squares.cpu());
      ActTwin dout = act_twin(type, rounded_to_bf16(random_floats(rng_, m * c)));
      ActTwin dx = act_twin(type, rounded_to_bf16(random_floats(rng_, m * c)));
      Twin<float> partials = poisoned(m), dgamma = twin(random_floats(rng_, c));
      both([&](Backend& be, int s) {
        be.rmsnorm_backward_partials(partials[s], dout[s], x[s], trstd[s], gamma[s], m, c);
      });
      expect_close(partials, kTol, "backward partials");
      const Twin<float> tpartials = twin(partials.cpu());
      for (int call = 0; call < 2; ++call)
        both([&](Backend& be, int s) {
          be.rmsnorm_backward_finish(dx[s], dgamma[s], tpartials[s], dout[s], x[s], trstd[s], gamma[s], m, c, C);
        });
      // Two accumulations, each rounded once in bf16.
      if (type == ElementType::bfloat16)
        EXPECT_LE(normalized_error(dx.side[1].values(), dx.side[0].values()), 2 * kOneBf16Rounding) << "dx, twice";
      else
        expect_act_close(dx, type, false, "dx, twice");
      expect_close(dgamma, kTol, "dgamma, twice");
      if (c != C) continue;

      // Whole rows on the GPU: the same bits as the stages there.
      auto run = [&](bool whole) {
        Activations xx(*gpu_, type, a), bb(*gpu_, type, b), o(*gpu_, type, Floats(m * C, kNaN));
        Activations dy(*gpu_, type, dout.side[0].values()), d(*gpu_, type, Floats(m * C, 0.5f));
        DeviceBuffer<float> g(*gpu_, gamma.cpu()), r(*gpu_, static_cast<size_t>(m)), p(*gpu_, static_cast<size_t>(m));
        DeviceBuffer<float> dg(*gpu_, Floats(static_cast<size_t>(C), 0.25f));
        if (whole) {
          gpu_->residual_rmsnorm_rows(xx.ptr(), o.ptr(), r.data(), xx.ptr(), bb.ptr(), g.data(), m, C, eps);
          gpu_->rmsnorm_rows_backward(d.ptr(), dg.data(), p.data(), dy.ptr(), xx.ptr(), r.data(), g.data(), m, C);
        } else {
          gpu_->rmsnorm_residual_row_squares(xx.ptr(), r.data(), xx.ptr(), bb.ptr(), m, C);
          gpu_->rmsnorm_normalize(o.ptr(), r.data(), xx.ptr(), r.data(), g.data(), m, C, C, eps);
          gpu_->rmsnorm_backward_partials(p.data(), dy.ptr(), xx.ptr(), r.data(), g.data(), m, C);
          gpu_->rmsnorm_backward_finish(d.ptr(), dg.data(), p.data(), dy.ptr(), xx.ptr(), r.data(), g.data(), m, C, C);
        }
        Activations plain(*gpu_, type, Floats(m * C, kNaN));
        DeviceBuffer<float> plain_rstd(*gpu_, static_cast<size_t>(m));
        if (whole) {
          gpu_->rmsnorm_rows(plain.ptr(), plain_rstd.data(), xx.ptr(), g.data(), m, C, eps);
        } else {
          gpu_->rmsnorm_row_squares(plain_rstd.data(), xx.ptr(), m, C);
          gpu_->rmsnorm_normalize(plain.ptr(), plain_rstd.data(), xx.ptr(), plain_rstd.data(), g.data(), m, C, C, eps);
        }
        return std::vector<Floats>{xx.values(),   o.values(),   r.download(),   d.values(),
                                   dg.download(), p.download(), plain.values(), plain_rstd.download()};
      };
      const std::vector<Floats> whole = run(true), staged = run(false);
      for (size_t i = 0; i < whole.size(); ++i)
        EXPECT_EQ(first_bit_difference(whole[i], staged[i]), -1)
            << "whole-row output " << i << " differs from the stages";
    }
}

// SwiGLU over gates in [-8, 8] and far tails (σ saturates), on both activation types; the
// backward's dgate_up is a separate buffer (no aliasing allowed).
TEST_F(CudaActivationOps, SwigluForwardAndBackwardOnBothActivationTypes) {
  const int64_t m = 61, f = 45;
  Floats gate_up = random_floats(rng_, 2 * m * f, -8.0f, 8.0f);
  const float tails[] = {-100.0f, -40.0f, -12.0f, 12.0f, 40.0f, 100.0f, 0.0f};
  for (size_t i = 0; i < std::size(tails); ++i) gate_up[i] = tails[i];  // gates of row 0
  gate_up = rounded_to_bf16(gate_up);
  for (ElementType type : kActivationTypes) {
    SCOPED_TRACE(element_type_name(type));
    ActTwin in = act_twin(type, gate_up), dout = act_twin(type, rounded_to_bf16(random_floats(rng_, m * f)));
    ActTwin out = act_twin(type, Floats(m * f, kNaN)), grad = act_twin(type, Floats(2 * m * f, kNaN));
    both([&](Backend& be, int s) {
      be.swiglu_forward(out[s], in[s], m, f);
      be.swiglu_backward(grad[s], in[s], dout[s], m, f);
    });
    expect_act_close(out, type, false, "swiglu_forward");
    expect_act_close(grad, type, false, "swiglu_backward");
  }
}

// RoPE on q and k inside a packed qkv (ld = 3·heads·d), forward then backward, on both
// activation types; the v columns must keep their bits.
TEST_F(CudaActivationOps, RopeOnPackedQkvViewsOnBothActivationTypes) {
  const int64_t B = 2, T = 37, heads = 3, d = 24, hd = heads * d, ld = 3 * hd;
  Floats cs(T * d);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle =
          static_cast<double>(t) * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      cs[(t * d / 2 + i) * 2] = static_cast<float>(std::cos(angle));
      cs[(t * d / 2 + i) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
  Twin<float> table = twin(cs);
  const Floats qkv = rounded_to_bf16(random_floats(rng_, B * T * ld, -2.0f, 2.0f));
  for (ElementType type : kActivationTypes) {
    SCOPED_TRACE(element_type_name(type));
    ActTwin x = act_twin(type, qkv);
    both([&](Backend& be, int s) {
      be.rope_forward(x[s], table[s], B, T, heads, d, ld);       // q
      be.rope_forward(x[s] + hd, table[s], B, T, heads, d, ld);  // k
    });
    expect_act_close(x, type, false, "rope_forward on q and k");
    both([&](Backend& be, int s) { be.rope_backward(x[s] + hd, table[s], B, T, heads, d, ld); });
    expect_act_close(x, type, false, "rope_backward on k");
    const Floats got = x.side[1].values();
    for (int64_t row = 0; row < B * T; ++row)
      for (int64_t j = 2 * hd; j < ld; ++j)
        ASSERT_EQ(std::memcmp(&got[row * ld + j], &qkv[row * ld + j], sizeof(float)), 0)
            << "v column " << j << " of row " << row << " changed";
  }
}

// ---------------------------------------------------------------- errors

TEST_F(CudaBackendOps, BadSizesThrowBackendErrorNamingTheOp) {
  DeviceBuffer<float> buf(*gpu_, 64);
  DeviceBuffer<int32_t> tokens(*gpu_, 8);
  float* p = buf.data();
  Backend& g = *gpu_;
  expect_backend_error([&] { g.gemm(Transpose::no, Transpose::no, -1, 2, 2, 1.0f, p, 2, p, 2, 0.0f, p, 2); },
                       "gemm: m = -1");
  expect_backend_error([&] { g.gemm(Transpose::no, Transpose::no, 2, 4, 3, 1.0f, p, 2, p, 4, 0.0f, p, 4); },
                       "gemm: lda = 2");
  expect_backend_error([&] { g.bias_forward(p, p, 4, 8, 6); }, "bias_forward: n = 8 exceeds row stride ld = 6");
  expect_backend_error([&] { g.copy_2d(p, 2, p, 4, 2, 3); }, "copy_2d: cols = 3 exceeds ld_dst = 2");
  expect_backend_error([&] { g.layernorm_normalize(p, p, p, p, p, p, p, 4, 8, 4, 1e-5f); },
                       "layernorm_normalize: local width c = 8 exceeds full width C = 4");
  expect_backend_error([&] { g.rmsnorm_normalize(p, p, p, p, p, 4, 8, 4, 1e-5f); },
                       "rmsnorm_normalize: local width c = 8 exceeds full width C = 4");
  expect_backend_error([&] { g.rmsnorm_backward_finish(p, p, p, p, p, p, p, -1, 4, 4); },
                       "rmsnorm_backward_finish: m = -1");
  expect_backend_error([&] { g.rmsnorm_row_squares(p, p, 4, -2); }, "rmsnorm_row_squares: c = -2");
  expect_backend_error([&] { g.swiglu_forward(p, p, 4, -1); }, "swiglu_forward: f = -1");
  expect_backend_error([&] { g.swiglu_backward(p, p, p, -3, 4); }, "swiglu_backward: m = -3");
  expect_backend_error([&] { g.rope_forward(p, p, 1, 2, 2, 5, 10); }, "rope_forward: head size d = 5 must be even");
  expect_backend_error([&] { g.rope_backward(p, p, 1, 2, 2, 4, 6); },
                       "rope_backward: heads·d = 8 exceeds row stride ld = 6");
  expect_backend_error([&] { g.attention_forward(p, p, p, p, p, 4, 1, 2, 2, 2, 4, 4); }, "attention_forward: h·d = 8");
  expect_backend_error([&] { g.attention_forward(p, p, p, p, p, 64, 1, 2, 4, 3, 4, 4); },
                       "attention_forward: h = 4 query heads is not a multiple of kv = 3 key/value heads");
  expect_backend_error([&] { g.attention_backward(p, p, p, p, p, p, p, p, p, 64, 1, 2, 2, 0, 4, 4); },
                       "attention_backward: h = 2 query heads is not a multiple of kv = 0 key/value heads");
  expect_backend_error([&] { g.attention_forward(p, p, p, p, p, 64, 1, 2, 4, 2, 4, -1); },
                       "attention_forward: group_stride = -1 must not be negative");
  expect_backend_error([&] { g.attention_forward(p, p, p, p, p, 64, 1, 2, 4, 2, 4, 7); },
                       "attention_forward: group_stride = 7 is smaller than the (h/kv)·d = 8 elements of one group's "
                       "query heads");
  expect_backend_error([&] { g.attention_backward(p, p, p, p, p, p, p, p, p, 24, 1, 2, 4, 2, 4, 20); },
                       "attention_backward: (kv−1)·group_stride + (h/kv)·d = 28 exceeds row stride ld = 24");
  expect_backend_error([&] { g.embedding_backward(p, p, tokens.data(), -1, 4, 0, 4); }, "embedding_backward: m = -1");
  expect_backend_error([&] { g.cross_entropy_row_max(p, p, 4, 0); }, "cross_entropy_row_max: v_local = 0");
  expect_backend_error([&] { g.sum(p, p, -3); }, "sum: n = -3");
  int32_t* i = tokens.data();
  expect_backend_error([&] { g.router_logits(p, p, p, 4, 3, 0); }, "router_logits: E = 0 must be positive");
  expect_backend_error([&] { g.router_backward(p, p, p, p, p, 4, -1, 2); }, "router_backward: c = -1");
  expect_backend_error([&] { g.router_top_k(p, i, p, p, 4, 8, 3); }, "router_top_k: k = 3 must be 1 or 2");
  expect_backend_error([&] { g.router_top_k(p, i, p, p, 4, 1, 2); }, "router_top_k: k = 2 exceeds experts E = 1");
  expect_backend_error([&] { g.router_logits_grad(p, p, i, p, nullptr, -1, 4, 1); }, "router_logits_grad: m = -1");
  expect_backend_error([&] { g.gather_rows(p, p, i, nullptr, -2, 4, 4); }, "gather_rows: n = -2");
  expect_backend_error([&] { g.combine_rows(p, p, i, p, 4, 0, 4, 4); }, "combine_rows: k = 0 must be 1 or 2");
  expect_backend_error([&] { g.combine_gates_grad(p, p, p, i, 4, 1, 4, -3); }, "combine_gates_grad: c = -3");
  AdamWStep s;
  s.t = 0;
  expect_backend_error([&] { g.adamw(p, p, p, p, 4, s, true); }, "adamw: step t = 0");
  expect_backend_error(
      [&] {
        make_cuda_backend(CudaBackendOptions{999, GemmMath::fp32});
      },
      "make_cuda_backend: CUDA device 999 does not exist");
  // Nothing above reached the device in error: the backend still works.
  g.fill(p, 1.0f, 64);
  EXPECT_EQ(buf.download(), Floats(64, 1.0f));
}

}  // namespace
}  // namespace axonn
