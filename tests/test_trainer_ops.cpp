// Every op of the CPU backend against a straightforward reference written here (naive loops
// in double precision), through the Backend interface, so a CUDA backend can run the same
// checks. Output buffers start as NaN, so an element an op forgets to write fails.
//
// Tolerances. float32 has unit roundoff u = 2^-24 ≈ 6e-8. A sum of k terms computed in
// float32 is within k·u·Σ|terms| of the exact value (the classic worst-case bound; random
// data stays near sqrt(k)·u). GEMM is checked against that bound per element; ops built from
// a few such sums (LayerNorm, attention, cross-entropy) are checked by the normalized error
// max|got − ref| / max|ref| <= 1e-5: their sums have at most a few hundred terms (k·u <
// 2e-5 worst case, ~1e-6 typical), while an indexing or formula error shows up as O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend_errors.hpp"
#include "random_floats.hpp"
#include "trainer/backend.hpp"
#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/cpu/gemm.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn {
namespace {

using test::expect_backend_error;
using test::random_floats;

constexpr double kU = 5.9604644775390625e-08;  // 2^-24
constexpr double kNormalizedTol = 1e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using Floats = std::vector<float>;
using Doubles = std::vector<double>;

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = dist(rng);
  return v;
}

// max|got − ref| / max|ref|; +inf if any element is NaN (an element the op did not write).
double normalized_error(const Floats& got, const Doubles& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return scale > 0.0 ? err / scale : err;
}

Doubles to_doubles(const Floats& v) { return Doubles(v.begin(), v.end()); }

class TrainerOps : public ::testing::Test {
 protected:
  // A device buffer holding `host`.
  DeviceBuffer<float> upload(const Floats& host) { return DeviceBuffer<float>(*be_, host); }
  DeviceBuffer<int32_t> upload(const std::vector<int32_t>& host) { return DeviceBuffer<int32_t>(*be_, host); }
  // A device buffer of n NaNs, for outputs.
  DeviceBuffer<float> poisoned(size_t n) {
    DeviceBuffer<float> b(*be_, n);
    be_->fill(b.data(), kNaN, static_cast<int64_t>(n));
    return b;
  }

  std::unique_ptr<Backend> be_ = make_cpu_backend();
  std::mt19937 rng_{20240611};
};

// ---------------------------------------------------------------- GEMM

// op(X)[row, col] of a row-major X with leading dimension ld, as a double: X's own element,
// or its transpose's.
double op_at(const Floats& x, Transpose t, int64_t ld, int64_t row, int64_t col) {
  return static_cast<double>(t == Transpose::no ? x[row * ld + col] : x[col * ld + row]);
}

TEST_F(TrainerOps, GemmAllTransposesWithStridesMatchTripleLoopWithinRoundingBound) {
  const int64_t m = 37, n = 23, k = 51, pad = 3;  // odd sizes; rows padded to test ld
  for (Transpose ta : {Transpose::no, Transpose::yes})
    for (Transpose tb : {Transpose::no, Transpose::yes})
      for (float beta : {0.0f, 1.3f}) {
        SCOPED_TRACE(std::string("ta=") + (ta == Transpose::yes ? "T" : "N") +
                     " tb=" + (tb == Transpose::yes ? "T" : "N") + " beta=" + std::to_string(beta));
        const int64_t a_rows = ta == Transpose::no ? m : k, a_cols = ta == Transpose::no ? k : m;
        const int64_t b_rows = tb == Transpose::no ? k : n, b_cols = tb == Transpose::no ? n : k;
        const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
        const Floats a = random_floats(rng_, static_cast<size_t>(a_rows * lda));
        const Floats b = random_floats(rng_, static_cast<size_t>(b_rows * ldb));
        Floats c0 = random_floats(rng_, static_cast<size_t>(m * ldc));
        // beta = 0 must ignore C: NaN there must not reach the result. The padding holds a
        // sentinel that must survive.
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j)
            if (j >= n)
              c0[i * ldc + j] = 12345.0f;
            else if (beta == 0.0f)
              c0[i * ldc + j] = kNaN;
        auto da = upload(a), db = upload(b), dc = upload(c0);
        const float alpha = 0.7f;
        be_->gemm(ta, tb, m, n, k, alpha, da.data(), lda, db.data(), ldb, beta, dc.data(), ldc);
        const Floats c = dc.download();
        auto A = [&](int64_t i, int64_t p) { return op_at(a, ta, lda, i, p); };
        auto Bm = [&](int64_t p, int64_t j) { return op_at(b, tb, ldb, p, j); };
        int bad = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0.0, mag = 0.0;
            for (int64_t p = 0; p < k; ++p) {
              ref += alpha * A(i, p) * Bm(p, j);
              mag += std::fabs(alpha * A(i, p) * Bm(p, j));
            }
            if (beta != 0.0f) {
              ref += beta * static_cast<double>(c0[i * ldc + j]);
              mag += std::fabs(beta * static_cast<double>(c0[i * ldc + j]));
            }
            const double got = c[i * ldc + j];
            if (!(std::fabs(got - ref) <= 2.0 * static_cast<double>(k + 2) * kU * mag) && ++bad <= 3)
              ADD_FAILURE() << "C[" << i << "," << j << "] = " << got << ", reference " << ref;
          }
          for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], 12345.0f) << "padding overwritten";
        }
      }
}

// The pool splits C's rows (tall C) or columns (wide C) over its threads, each part a whole
// sum over k (no partial sums added afterwards): three threads give what one does to within
// the rounding of one k-long sum, the same bits on every run, padding untouched, for every
// transpose. Not the same bits as one thread: OpenBLAS's kernels round a row differently by
// where it falls in their blocks (the last rows of a part take the remainder kernels).
TEST_F(TrainerOps, GemmSplitOverThreadsIsTheSameSumEveryRun) {
  const int64_t pad = 5;
  const float alpha = 0.7f, beta = 1.3f;
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{203, 67, 97}, {61, 211, 89}})
    for (Transpose ta : {Transpose::no, Transpose::yes})
      for (Transpose tb : {Transpose::no, Transpose::yes}) {
        SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) +
                     " ta=" + (ta == Transpose::yes ? "T" : "N") + " tb=" + (tb == Transpose::yes ? "T" : "N"));
        ASSERT_GT(m * n * k, cpu::kMaxSerialGemmVolume) << "small GEMMs stay on one thread";
        const int64_t lda = (ta == Transpose::no ? k : m) + pad, ldb = (tb == Transpose::no ? n : k) + pad;
        const int64_t ldc = n + pad;
        const Floats a = random_floats(rng_, static_cast<size_t>((ta == Transpose::no ? m : k) * lda));
        const Floats b = random_floats(rng_, static_cast<size_t>((tb == Transpose::no ? k : n) * ldb));
        const Floats c0 = random_floats(rng_, static_cast<size_t>(m * ldc));
        auto run = [&](int threads) {
          auto be = make_cpu_backend(threads);
          DeviceBuffer<float> da(*be, a), db(*be, b), dc(*be, c0);
          be->gemm(ta, tb, m, n, k, alpha, da.data(), lda, db.data(), ldb, beta, dc.data(), ldc);
          return dc.download();
        };
        const Floats one = run(1), three = run(3);
        EXPECT_EQ(three, run(3)) << "three threads, twice";
        int bad = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double mag = std::fabs(beta * static_cast<double>(c0[i * ldc + j]));
            for (int64_t p = 0; p < k; ++p) mag += std::fabs(alpha * op_at(a, ta, lda, i, p) * op_at(b, tb, ldb, p, j));
            const double got = three[i * ldc + j], want = one[i * ldc + j];
            if (!(std::fabs(got - want) <= 2.0 * static_cast<double>(k + 2) * kU * mag) && ++bad <= 3)
              ADD_FAILURE() << "C[" << i << "," << j << "] = " << got << " on three threads, " << want << " on one";
          }
          for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(three[i * ldc + j], c0[i * ldc + j]) << "padding written";
        }
      }
}

// The whole GEMM's leading dimensions are checked before it is split: A transposed (k, m) with
// lda = 150 holds each third of C's 203 rows but not all of them.
TEST_F(TrainerOps, GemmSplitOverThreadsChecksTheWholeLeadingDimensions) {
  auto be = make_cpu_backend(3);
  DeviceBuffer<float> a(*be, 97 * 203), b(*be, 97 * 67), c(*be, 203 * 67);
  expect_backend_error(
      [&] {
        be->gemm(Transpose::yes, Transpose::no, 203, 67, 97, 1.0f, a.data(), 150, b.data(), 67, 0.0f, c.data(), 67);
      },
      "lda = 150 is smaller than the row length 203");
}

TEST_F(TrainerOps, GemmWithEmptyInnerDimensionScalesC) {
  Floats c0 = {1.0f, 2.0f, 3.0f, 4.0f};
  auto dc = upload(c0);
  be_->gemm(Transpose::no, Transpose::no, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, dc.data(), 2);
  EXPECT_EQ(dc.download(), (Floats{0.5f, 1.0f, 1.5f, 2.0f}));
  be_->fill(dc.data(), kNaN, 4);
  be_->gemm(Transpose::no, Transpose::no, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, dc.data(), 2);
  EXPECT_EQ(dc.download(), (Floats{0.0f, 0.0f, 0.0f, 0.0f}));
}

// ---------------------------------------------------------------- bias, elementwise, reductions

TEST_F(TrainerOps, BiasForwardAddsToEveryRowAndBackwardAccumulatesColumnSums) {
  // The bias covers columns [5, 5 + n) of rows of width ld, like k's bias inside a packed qkv;
  // the other columns must stay as they are and must not reach the bias gradient.
  const int64_t m = 29, n = 13, ld = 3 * n, col = 5;
  const Floats out0 = random_floats(rng_, m * ld), bias = random_floats(rng_, n), dbias0 = random_floats(rng_, n);
  auto dout = upload(out0), db = upload(bias);
  be_->bias_forward(dout.data() + col, db.data(), m, n, ld);
  const Floats out = dout.download();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ld; ++j) {
      const bool in_block = j >= col && j < col + n;
      ASSERT_EQ(out[i * ld + j], in_block ? out0[i * ld + j] + bias[j - col] : out0[i * ld + j]) << i << "," << j;
    }

  auto ddb = upload(dbias0);
  be_->bias_backward(ddb.data(), dout.data() + col, m, n, ld);
  const Floats dbias = ddb.download();
  for (int64_t j = 0; j < n; ++j) {
    double ref = dbias0[j], mag = std::fabs(dbias0[j]);
    for (int64_t i = 0; i < m; ++i) {
      ref += out[i * ld + col + j];
      mag += std::fabs(out[i * ld + col + j]);
    }
    EXPECT_NEAR(dbias[j], ref, static_cast<double>(m + 1) * kU * mag) << "column " << j;
  }
}

TEST_F(TrainerOps, Copy2dMovesABlockBetweenRowStrides) {
  // Two column shards (rows, 3) gathered one after the other, placed side by side in (rows, 6).
  const int64_t rows = 4, cols = 3;
  const Floats gathered = random_floats(rng_, 2 * rows * cols);
  auto src = upload(gathered), dst = poisoned(rows * 2 * cols);
  for (int64_t z = 0; z < 2; ++z)
    be_->copy_2d(dst.data() + z * cols, 2 * cols, src.data() + z * rows * cols, cols, rows, cols);
  const Floats out = dst.download();
  for (int64_t z = 0; z < 2; ++z)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        EXPECT_EQ(out[i * 2 * cols + z * cols + j], gathered[z * rows * cols + i * cols + j])
            << z << "," << i << "," << j;
}

TEST_F(TrainerOps, ElementwiseOpsAreOneRoundingEach) {
  const int64_t n = 1001;  // not a multiple of any vector width
  const Floats a = random_floats(rng_, n), b = random_floats(rng_, n);
  auto da = upload(a), db = upload(b), dout = poisoned(n);
  be_->add(dout.data(), da.data(), db.data(), n);
  Floats out = dout.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;

  be_->add(da.data(), da.data(), db.data(), n);  // in place, the residual stream's use
  out = da.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;

  auto ds = upload(a);
  be_->scale(ds.data(), -0.375f, n);
  out = ds.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] * -0.375f) << i;

  auto dy = upload(a), dx = upload(b);
  be_->axpy(dy.data(), 0.25f, dx.data(), n);
  out = dy.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + 0.25f * b[i]) << i;

  be_->fill(dy.data(), 2.5f, n);
  EXPECT_EQ(dy.download(), Floats(n, 2.5f));
  be_->memset_zero(dy.data(), static_cast<size_t>(n) * sizeof(float));
  EXPECT_EQ(dy.download(), Floats(n, 0.0f));
  be_->copy(dy.data(), da.data(), static_cast<size_t>(n) * sizeof(float));
  EXPECT_EQ(dy.download(), da.download());
}

TEST_F(TrainerOps, SumAndSumOfSquaresAccumulateIntoADeviceScalar) {
  const int64_t n = 100003;  // spans many 512-element blocks and a ragged tail
  const Floats x = random_floats(rng_, n, -2.0f, 3.0f);
  double ref = 0.0, ref_sq = 0.0, mag = 0.0;
  for (float v : x) {
    ref += v;
    ref_sq += static_cast<double>(v) * v;
    mag += std::fabs(v);
  }
  auto dx = upload(x), acc = upload(Floats{1.5f}), acc_sq = upload(Floats{0.25f});
  be_->sum(acc.data(), dx.data(), n);
  be_->sum_squares(acc_sq.data(), dx.data(), n);
  // Float lanes over 512-element blocks (64 terms each), blocks joined in double: ~64·u.
  EXPECT_NEAR(acc.download()[0], 1.5 + ref, 64 * kU * mag + 1e-7 * std::fabs(ref));
  EXPECT_NEAR(acc_sq.download()[0], 0.25 + ref_sq, (64 * kU + 1e-7) * ref_sq);
}

// ---------------------------------------------------------------- LayerNorm

struct LayerNormRef {
  Doubles out, mean, rstd, dx, dgamma, dbeta;
};

// Plain LayerNorm over full rows in double; backward through the explicit Jacobian
// d x̂_k / d x_j = rstd·(δ_kj − 1/C − x̂_k·x̂_j/C), so it does not share the op's formula.
LayerNormRef layernorm_reference(const Floats& x, const Floats& gamma, const Floats& beta, const Floats& dout,
                                 const Floats& dx0, const Floats& dgamma0, const Floats& dbeta0, int64_t m, int64_t C,
                                 double eps) {
  LayerNormRef r{Doubles(m * C), Doubles(m), Doubles(m), to_doubles(dx0), to_doubles(dgamma0), to_doubles(dbeta0)};
  for (int64_t i = 0; i < m; ++i) {
    const float* row = &x[i * C];
    double mu = 0.0;
    for (int64_t j = 0; j < C; ++j) mu += row[j];
    mu /= static_cast<double>(C);
    double var = 0.0;
    for (int64_t j = 0; j < C; ++j) var += (row[j] - mu) * (row[j] - mu);
    var /= static_cast<double>(C);
    const double rstd = 1.0 / std::sqrt(var + eps);
    r.mean[i] = mu;
    r.rstd[i] = rstd;
    Doubles xhat(C);
    for (int64_t j = 0; j < C; ++j) {
      xhat[j] = (row[j] - mu) * rstd;
      r.out[i * C + j] = xhat[j] * gamma[j] + beta[j];
      r.dgamma[j] += dout[i * C + j] * xhat[j];
      r.dbeta[j] += dout[i * C + j];
    }
    for (int64_t j = 0; j < C; ++j) {
      double d = 0.0;
      for (int64_t kk = 0; kk < C; ++kk) {
        const double jac =
            rstd * ((kk == j ? 1.0 : 0.0) - 1.0 / static_cast<double>(C) - xhat[kk] * xhat[j] / static_cast<double>(C));
        d += dout[i * C + kk] * gamma[kk] * jac;
      }
      r.dx[i * C + j] += d;
    }
  }
  return r;
}

struct LayerNormResult {
  Floats out, mean, rstd, dx, dgamma, dbeta;
};

// The staged LayerNorm split over G simulated ranks, each holding C/G columns; the
// all-reduces between the stages are done here by hand (sums in rank order).
LayerNormResult layernorm_on_ranks(Backend& be, int64_t G, const Floats& x, const Floats& gamma, const Floats& beta,
                                   const Floats& dout, const Floats& dx0, const Floats& dgamma0, const Floats& dbeta0,
                                   int64_t m, int64_t C, float eps) {
  const int64_t c = C / G;
  auto slice_cols = [&](const Floats& full, int64_t r) {
    Floats s(m * c);
    for (int64_t i = 0; i < m; ++i)
      std::copy(full.begin() + i * C + r * c, full.begin() + i * C + (r + 1) * c, s.begin() + i * c);
    return s;
  };
  auto slice = [&](const Floats& v, int64_t r) { return Floats(v.begin() + r * c, v.begin() + (r + 1) * c); };
  auto all_reduce = [&](std::vector<DeviceBuffer<float>>& bufs) {
    Floats total = bufs[0].download();
    for (int64_t r = 1; r < G; ++r) {
      const Floats part = bufs[r].download();
      for (size_t i = 0; i < total.size(); ++i) total[i] += part[i];
    }
    for (auto& b : bufs) b.upload(total);
  };
  auto nan_buffer = [&](size_t n) {
    DeviceBuffer<float> b(be, n);
    be.fill(b.data(), kNaN, static_cast<int64_t>(n));
    return b;
  };
  std::vector<DeviceBuffer<float>> xs, gs, bs, outs, sums, squares, dys, dxs, dgs, dbs, partials;
  for (int64_t r = 0; r < G; ++r) {
    xs.emplace_back(be, slice_cols(x, r));
    gs.emplace_back(be, slice(gamma, r));
    bs.emplace_back(be, slice(beta, r));
    outs.push_back(nan_buffer(m * c));
    sums.push_back(nan_buffer(m));
    squares.push_back(nan_buffer(m));
    dys.emplace_back(be, slice_cols(dout, r));
    dxs.emplace_back(be, slice_cols(dx0, r));
    dgs.emplace_back(be, slice(dgamma0, r));
    dbs.emplace_back(be, slice(dbeta0, r));
    partials.push_back(nan_buffer(2 * m));
  }
  for (int64_t r = 0; r < G; ++r) be.layernorm_row_sums(sums[r].data(), xs[r].data(), m, c);
  all_reduce(sums);
  // sums becomes the mean in place, squares becomes rstd in place: the aliasing the
  // interface allows and the trainer uses.
  for (int64_t r = 0; r < G; ++r)
    be.layernorm_centered_squares(sums[r].data(), squares[r].data(), sums[r].data(), xs[r].data(), m, c, C);
  all_reduce(squares);
  for (int64_t r = 0; r < G; ++r)
    be.layernorm_normalize(outs[r].data(), squares[r].data(), xs[r].data(), sums[r].data(), squares[r].data(),
                           gs[r].data(), bs[r].data(), m, c, C, eps);
  for (int64_t r = 0; r < G; ++r)
    be.layernorm_backward_partials(partials[r].data(), dys[r].data(), xs[r].data(), sums[r].data(), squares[r].data(),
                                   gs[r].data(), m, c);
  all_reduce(partials);
  for (int64_t r = 0; r < G; ++r)
    be.layernorm_backward_finish(dxs[r].data(), dgs[r].data(), dbs[r].data(), partials[r].data(), dys[r].data(),
                                 xs[r].data(), sums[r].data(), squares[r].data(), gs[r].data(), m, c, C);

  LayerNormResult res{Floats(m * C), sums[0].download(), squares[0].download(), Floats(m * C), {}, {}};
  for (int64_t r = 0; r < G; ++r) {
    EXPECT_EQ(sums[r].download(), res.mean) << "every rank must hold the same mean";
    EXPECT_EQ(squares[r].download(), res.rstd) << "every rank must hold the same rstd";
    const Floats o = outs[r].download(), d = dxs[r].download(), dg = dgs[r].download(), db = dbs[r].download();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < c; ++j) {
        res.out[i * C + r * c + j] = o[i * c + j];
        res.dx[i * C + r * c + j] = d[i * c + j];
      }
    res.dgamma.insert(res.dgamma.end(), dg.begin(), dg.end());
    res.dbeta.insert(res.dbeta.end(), db.begin(), db.end());
  }
  return res;
}

class TrainerLayerNorm : public TrainerOps {
 protected:
  void SetUp() override {
    x = random_floats(rng_, m * C, -2.0f, 3.0f);
    for (int64_t i = 0; i < m; ++i) x[i * C] += 40.0f;  // a large mean: the two-pass variance must not cancel
    gamma = random_floats(rng_, C, 0.5f, 1.5f);
    beta = random_floats(rng_, C);
    dout = random_floats(rng_, m * C);
    dx0 = random_floats(rng_, m * C);  // dx accumulates onto the residual gradient
    dgamma0 = random_floats(rng_, C);
    dbeta0 = random_floats(rng_, C);
  }
  const int64_t m = 19, C = 48;
  const float eps = 1e-5f;
  Floats x, gamma, beta, dout, dx0, dgamma0, dbeta0;
};

TEST_F(TrainerLayerNorm, OneRankStagesEqualPlainLayerNorm) {
  const LayerNormRef ref = layernorm_reference(x, gamma, beta, dout, dx0, dgamma0, dbeta0, m, C, eps);
  const LayerNormResult got = layernorm_on_ranks(*be_, 1, x, gamma, beta, dout, dx0, dgamma0, dbeta0, m, C, eps);
  EXPECT_LE(normalized_error(got.out, ref.out), kNormalizedTol);
  EXPECT_LE(normalized_error(got.mean, ref.mean), kNormalizedTol);
  EXPECT_LE(normalized_error(got.rstd, ref.rstd), kNormalizedTol);
  EXPECT_LE(normalized_error(got.dx, ref.dx), kNormalizedTol);
  EXPECT_LE(normalized_error(got.dgamma, ref.dgamma), kNormalizedTol);
  EXPECT_LE(normalized_error(got.dbeta, ref.dbeta), kNormalizedTol);
}

TEST_F(TrainerLayerNorm, SplitOverTwoAndFourRanksEqualsOneRank) {
  const LayerNormResult one = layernorm_on_ranks(*be_, 1, x, gamma, beta, dout, dx0, dgamma0, dbeta0, m, C, eps);
  for (int64_t G : {2, 4}) {
    SCOPED_TRACE("G_x = " + std::to_string(G));
    const LayerNormResult split = layernorm_on_ranks(*be_, G, x, gamma, beta, dout, dx0, dgamma0, dbeta0, m, C, eps);
    // Only the order of the row sums differs: a few roundings of C-term sums.
    EXPECT_LE(normalized_error(split.out, to_doubles(one.out)), kNormalizedTol);
    EXPECT_LE(normalized_error(split.mean, to_doubles(one.mean)), kNormalizedTol);
    EXPECT_LE(normalized_error(split.rstd, to_doubles(one.rstd)), kNormalizedTol);
    EXPECT_LE(normalized_error(split.dx, to_doubles(one.dx)), kNormalizedTol);
    EXPECT_LE(normalized_error(split.dgamma, to_doubles(one.dgamma)), kNormalizedTol);
    EXPECT_LE(normalized_error(split.dbeta, to_doubles(one.dbeta)), kNormalizedTol);
  }
}

// The residual add fused into the first stage: the same bits as add() then row sums, with x
// a separate buffer or aliasing either input (the trainer writes the sum over the branch).
TEST_F(TrainerOps, ResidualRowSumsEqualAddThenRowSumsBitwise) {
  const int64_t m = 37, c = 203;
  const Floats a = random_floats(rng_, m * c, -2.0f, 3.0f), b = random_floats(rng_, m * c, -1.0f, 1.0f);
  auto sa = upload(a), sb = upload(b);
  DeviceBuffer<float> want_x = poisoned(m * c), want_sums = poisoned(m);
  be_->add(want_x.data(), sa.data(), sb.data(), m * c);
  be_->layernorm_row_sums(want_sums.data(), want_x.data(), m, c);

  for (int alias = 0; alias < 3; ++alias) {  // x separate, x over a, x over b
    SCOPED_TRACE("alias " + std::to_string(alias));
    auto ta = upload(a), tb = upload(b);
    DeviceBuffer<float> separate = poisoned(m * c), sums = poisoned(m);
    float* x = alias == 0 ? separate.data() : alias == 1 ? ta.data() : tb.data();
    be_->layernorm_residual_row_sums(x, sums.data(), ta.data(), tb.data(), m, c);
    const Floats got_x = (alias == 0 ? separate : alias == 1 ? ta : tb).download();
    EXPECT_EQ(got_x, want_x.download());
    EXPECT_EQ(sums.download(), want_sums.download());
  }
}

// ---------------------------------------------------------------- RMSNorm

struct RmsNormRef {
  Doubles out, rstd, dx, dgamma;
};

// Plain RMSNorm over full rows in double; backward through the explicit Jacobian
// d x̂_k / d x_j = rstd·(δ_kj − x̂_k·x̂_j/C), so it does not share the op's formula.
RmsNormRef rmsnorm_reference(const Floats& x, const Floats& gamma, const Floats& dout, const Floats& dx0,
                             const Floats& dgamma0, int64_t m, int64_t C, double eps) {
  RmsNormRef r{Doubles(m * C), Doubles(m), to_doubles(dx0), to_doubles(dgamma0)};
  for (int64_t i = 0; i < m; ++i) {
    const float* row = &x[i * C];
    double ms = 0.0;
    for (int64_t j = 0; j < C; ++j) ms += static_cast<double>(row[j]) * row[j];
    const double rstd = 1.0 / std::sqrt(ms / static_cast<double>(C) + eps);
    r.rstd[i] = rstd;
    Doubles xhat(C);
    for (int64_t j = 0; j < C; ++j) {
      xhat[j] = row[j] * rstd;
      r.out[i * C + j] = xhat[j] * gamma[j];
      r.dgamma[j] += dout[i * C + j] * xhat[j];
    }
    for (int64_t j = 0; j < C; ++j) {
      double d = 0.0;
      for (int64_t kk = 0; kk < C; ++kk) {
        const double jac = rstd * ((kk == j ? 1.0 : 0.0) - xhat[kk] * xhat[j] / static_cast<double>(C));
        d += dout[i * C + kk] * gamma[kk] * jac;
      }
      r.dx[i * C + j] += d;
    }
  }
  return r;
}

struct RmsNormResult {
  Floats out, rstd, dx, dgamma;
};

// The staged RMSNorm split over G simulated ranks, each holding C/G columns; the all-reduces
// between the stages are done here by hand (sums in rank order). rstd is written over
// squares, the aliasing the interface allows.
RmsNormResult rmsnorm_on_ranks(Backend& be, int64_t G, const Floats& x, const Floats& gamma, const Floats& dout,
                               const Floats& dx0, const Floats& dgamma0, int64_t m, int64_t C, float eps) {
  const int64_t c = C / G;
  auto slice_cols = [&](const Floats& full, int64_t r) {
    Floats s(m * c);
    for (int64_t i = 0; i < m; ++i)
      std::copy(full.begin() + i * C + r * c, full.begin() + i * C + (r + 1) * c, s.begin() + i * c);
    return s;
  };
  auto slice = [&](const Floats& v, int64_t r) { return Floats(v.begin() + r * c, v.begin() + (r + 1) * c); };
  auto all_reduce = [&](std::vector<DeviceBuffer<float>>& bufs) {
    Floats total = bufs[0].download();
    for (int64_t r = 1; r < G; ++r) {
      const Floats part = bufs[r].download();
      for (size_t i = 0; i < total.size(); ++i) total[i] += part[i];
    }
    for (auto& b : bufs) b.upload(total);
  };
  auto nan_buffer = [&](size_t n) {
    DeviceBuffer<float> b(be, n);
    be.fill(b.data(), kNaN, static_cast<int64_t>(n));
    return b;
  };
  std::vector<DeviceBuffer<float>> xs, gs, outs, squares, dys, dxs, dgs, partials;
  for (int64_t r = 0; r < G; ++r) {
    xs.emplace_back(be, slice_cols(x, r));
    gs.emplace_back(be, slice(gamma, r));
    outs.push_back(nan_buffer(m * c));
    squares.push_back(nan_buffer(m));
    dys.emplace_back(be, slice_cols(dout, r));
    dxs.emplace_back(be, slice_cols(dx0, r));
    dgs.emplace_back(be, slice(dgamma0, r));
    partials.push_back(nan_buffer(m));
  }
  for (int64_t r = 0; r < G; ++r) be.rmsnorm_row_squares(squares[r].data(), xs[r].data(), m, c);
  all_reduce(squares);
  for (int64_t r = 0; r < G; ++r)
    be.rmsnorm_normalize(outs[r].data(), squares[r].data(), xs[r].data(), squares[r].data(), gs[r].data(), m, c, C,
                         eps);
  for (int64_t r = 0; r < G; ++r)
    be.rmsnorm_backward_partials(partials[r].data(), dys[r].data(), xs[r].data(), squares[r].data(), gs[r].data(), m,
                                 c);
  all_reduce(partials);
  for (int64_t r = 0; r < G; ++r)
    be.rmsnorm_backward_finish(dxs[r].data(), dgs[r].data(), partials[r].data(), dys[r].data(), xs[r].data(),
                               squares[r].data(), gs[r].data(), m, c, C);

  RmsNormResult res{Floats(m * C), squares[0].download(), Floats(m * C), {}};
  for (int64_t r = 0; r < G; ++r) {
    EXPECT_EQ(squares[r].download(), res.rstd) << "every rank must hold the same rstd";
    const Floats o = outs[r].download(), d = dxs[r].download(), dg = dgs[r].download();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < c; ++j) {
        res.out[i * C + r * c + j] = o[i * c + j];
        res.dx[i * C + r * c + j] = d[i * c + j];
      }
    res.dgamma.insert(res.dgamma.end(), dg.begin(), dg.end());
  }
  return res;
}

class TrainerRmsNorm : public TrainerOps {
 protected:
  void SetUp() override {
    x = random_floats(rng_, m * C, -2.0f, 3.0f);
    gamma = random_floats(rng_, C, 0.5f, 1.5f);
    dout = random_floats(rng_, m * C);
    dx0 = random_floats(rng_, m * C);  // dx accumulates onto the residual gradient
    dgamma0 = random_floats(rng_, C);
  }
  const int64_t m = 19, C = 48;
  const float eps = 1e-5f;
  Floats x, gamma, dout, dx0, dgamma0;
};

TEST_F(TrainerRmsNorm, OneRankStagesEqualPlainRmsNorm) {
  const RmsNormRef ref = rmsnorm_reference(x, gamma, dout, dx0, dgamma0, m, C, eps);
  const RmsNormResult got = rmsnorm_on_ranks(*be_, 1, x, gamma, dout, dx0, dgamma0, m, C, eps);
  EXPECT_LE(normalized_error(got.out, ref.out), kNormalizedTol);
  EXPECT_LE(normalized_error(got.rstd, ref.rstd), kNormalizedTol);
  EXPECT_LE(normalized_error(got.dx, ref.dx), kNormalizedTol);
  EXPECT_LE(normalized_error(got.dgamma, ref.dgamma), kNormalizedTol);
}

TEST_F(TrainerRmsNorm, SplitOverTwoAndFourRanksEqualsOneRank) {
  const RmsNormResult one = rmsnorm_on_ranks(*be_, 1, x, gamma, dout, dx0, dgamma0, m, C, eps);
  for (int64_t G : {2, 4}) {
    SCOPED_TRACE("G_x = " + std::to_string(G));
    const RmsNormResult split = rmsnorm_on_ranks(*be_, G, x, gamma, dout, dx0, dgamma0, m, C, eps);
    // Only the order of the row sums differs: a few roundings of C-term sums.
    EXPECT_LE(normalized_error(split.out, to_doubles(one.out)), kNormalizedTol);
    EXPECT_LE(normalized_error(split.rstd, to_doubles(one.rstd)), kNormalizedTol);
    EXPECT_LE(normalized_error(split.dx, to_doubles(one.dx)), kNormalizedTol);
    EXPECT_LE(normalized_error(split.dgamma, to_doubles(one.dgamma)), kNormalizedTol);
  }
}

// The residual add fused into the first stage: the same bits as add() then row squares, with
// x a separate buffer or aliasing either input.
TEST_F(TrainerOps, RmsNormResidualRowSquaresEqualAddThenRowSquaresBitwise) {
  const int64_t m = 37, c = 203;
  const Floats a = random_floats(rng_, m * c, -2.0f, 3.0f), b = random_floats(rng_, m * c, -1.0f, 1.0f);
  auto sa = upload(a), sb = upload(b);
  DeviceBuffer<float> want_x = poisoned(m * c), want_squares = poisoned(m);
  be_->add(want_x.data(), sa.data(), sb.data(), m * c);
  be_->rmsnorm_row_squares(want_squares.data(), want_x.data(), m, c);

  for (int alias = 0; alias < 3; ++alias) {  // x separate, x over a, x over b
    SCOPED_TRACE("alias " + std::to_string(alias));
    auto ta = upload(a), tb = upload(b);
    DeviceBuffer<float> separate = poisoned(m * c), squares = poisoned(m);
    float* x = alias == 0 ? separate.data() : alias == 1 ? ta.data() : tb.data();
    be_->rmsnorm_residual_row_squares(x, squares.data(), ta.data(), tb.data(), m, c);
    const Floats got_x = (alias == 0 ? separate : alias == 1 ? ta : tb).download();
    EXPECT_EQ(got_x, want_x.download());
    EXPECT_EQ(squares.download(), want_squares.download());
  }
}

// The whole-row ops are their stages in order: the same bits, including the residual sum
// written over its first input and the backward's partials scratch.
TEST_F(TrainerOps, WholeRowRmsNormEqualsItsStagesBitwise) {
  const int64_t m = 23, C = 70;
  const float eps = 1e-6f;
  const Floats a = random_floats(rng_, m * C, -2.0f, 3.0f), b = random_floats(rng_, m * C);
  const Floats gamma = random_floats(rng_, C, 0.5f, 1.5f), dout = random_floats(rng_, m * C);
  const Floats dx0 = random_floats(rng_, m * C), dgamma0 = random_floats(rng_, C);
  auto run = [&](bool whole) {
    auto x = upload(a), bb = upload(b), g = upload(gamma), dy = upload(dout), dx = upload(dx0), dg = upload(dgamma0);
    auto out = poisoned(m * C), rstd = poisoned(m), plain = poisoned(m * C), plain_rstd = poisoned(m),
         partials = poisoned(m);
    if (whole) {
      be_->residual_rmsnorm_rows(x.data(), out.data(), rstd.data(), x.data(), bb.data(), g.data(), m, C, eps);
      be_->rmsnorm_rows(plain.data(), plain_rstd.data(), x.data(), g.data(), m, C, eps);
      be_->rmsnorm_rows_backward(dx.data(), dg.data(), partials.data(), dy.data(), x.data(), rstd.data(), g.data(), m,
                                 C);
    } else {
      be_->rmsnorm_residual_row_squares(x.data(), rstd.data(), x.data(), bb.data(), m, C);
      be_->rmsnorm_normalize(out.data(), rstd.data(), x.data(), rstd.data(), g.data(), m, C, C, eps);
      be_->rmsnorm_row_squares(plain_rstd.data(), x.data(), m, C);
      be_->rmsnorm_normalize(plain.data(), plain_rstd.data(), x.data(), plain_rstd.data(), g.data(), m, C, C, eps);
      be_->rmsnorm_backward_partials(partials.data(), dy.data(), x.data(), rstd.data(), g.data(), m, C);
      be_->rmsnorm_backward_finish(dx.data(), dg.data(), partials.data(), dy.data(), x.data(), rstd.data(), g.data(), m,
                                   C, C);
    }
    return std::vector<Floats>{x.download(),          out.download(), rstd.download(), plain.download(),
                               plain_rstd.download(), dx.download(),  dg.download(),   partials.download()};
  };
  const std::vector<Floats> whole = run(true), staged = run(false);
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(whole[i], staged[i]) << "output " << i;
  EXPECT_TRUE(std::none_of(whole[1].begin(), whole[1].end(), [](float f) { return std::isnan(f); }));
}

// ---------------------------------------------------------------- GELU

TEST_F(TrainerOps, GeluForwardAndBackwardMatchTheTanhFormula) {
  Floats x;
  for (int i = -800; i <= 800; ++i) x.push_back(static_cast<float>(i) * 0.01f);  // [-8, 8]
  for (float v : {-40.0f, -12.0f, 12.0f, 40.0f, 0.0f, 1e-20f, -1e-20f}) x.push_back(v);
  const auto n = static_cast<int64_t>(x.size());
  const Floats dout = random_floats(rng_, x.size());
  auto dx = upload(x), dy = upload(dout), dout_buf = poisoned(x.size()), dgrad = poisoned(x.size());
  be_->gelu_forward(dout_buf.data(), dx.data(), n);
  be_->gelu_backward(dgrad.data(), dx.data(), dy.data(), n);
  const Floats y = dout_buf.download(), g = dgrad.download();
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double u = k * (v + 0.044715 * v * v * v);
    const double th = std::tanh(u);
    const double ref = 0.5 * v * (1.0 + th);
    const double du = k * (1.0 + 3.0 * 0.044715 * v * v);
    const double dref = dout[i] * (0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * du);
    // exp's argument 2u carries a rounding error of ~|2u|·u, so the relative tolerance grows
    // with |u|; the backward's two terms can cancel, so it is relative to their magnitudes.
    // The reference itself loses 1 + tanh(u) to cancellation for u << 0 (double epsilon
    // 1.1e-16 absolute), hence the absolute term.
    const double rel = 1e-6 * (1.0 + 2.0 * std::fabs(u));
    const double dmag = std::fabs(dout[i]) * (0.5 * (1.0 + th) + std::fabs(0.5 * v * (1.0 - th * th) * du));
    EXPECT_NEAR(y[i], ref, rel * std::fabs(ref) + 1e-15 * std::fabs(v)) << "gelu(" << v << ")";
    EXPECT_NEAR(g[i], dref, rel * dmag + 1e-15 * std::fabs(dout[i]) * (1.0 + std::fabs(v * du)))
        << "gelu'(" << v << ")";
  }
}

// ---------------------------------------------------------------- SwiGLU

TEST_F(TrainerOps, SwigluForwardAndBackwardMatchTheSiluFormula) {
  // Rows of [gate | up]: gates over [-8, 8] and far tails, where σ saturates to 0 or 1.
  const int64_t f = 37;
  Floats gates;
  for (int i = -400; i <= 400; ++i) gates.push_back(static_cast<float>(i) * 0.02f);
  for (float v : {-90.0f, -40.0f, -12.0f, 12.0f, 40.0f, 90.0f, 0.0f, 1e-20f}) gates.push_back(v);
  while (gates.size() % f != 0) gates.push_back(0.5f);
  const int64_t m = static_cast<int64_t>(gates.size()) / f;
  const Floats ups = random_floats(rng_, m * f, -2.0f, 2.0f), dout = random_floats(rng_, m * f);
  Floats gate_up(2 * m * f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < f; ++j) {
      gate_up[i * 2 * f + j] = gates[i * f + j];
      gate_up[i * 2 * f + f + j] = ups[i * f + j];
    }
  auto in = upload(gate_up), dy = upload(dout), out = poisoned(m * f), dgate_up = poisoned(2 * m * f);
  be_->swiglu_forward(out.data(), in.data(), m, f);
  be_->swiglu_backward(dgate_up.data(), in.data(), dy.data(), m, f);
  const Floats y = out.download(), g = dgate_up.download();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < f; ++j) {
      const double x = gates[i * f + j], u = ups[i * f + j], dd = dout[i * f + j];
      const double s = 1.0 / (1.0 + std::exp(-x)), silu = x * s;
      const double dsilu = s * (1.0 + x * (1.0 - s));
      // exp's argument carries no rounding here (−g is exact), so a few float roundings:
      // relative 1e-6, plus an absolute floor for the saturated tails.
      EXPECT_NEAR(y[i * f + j], silu * u, 1e-6 * std::fabs(silu * u) + 1e-30) << "silu(" << x << ")·" << u;
      EXPECT_NEAR(g[i * 2 * f + j], dd * u * dsilu,
                  1e-6 * std::fabs(dd * u) * (s + std::fabs(x * s * (1.0 - s))) + 1e-30)
          << "dgate at g = " << x;
      EXPECT_NEAR(g[i * 2 * f + f + j], dd * silu, 1e-6 * std::fabs(dd * silu) + 1e-30) << "dup at g = " << x;
    }
}

// ---------------------------------------------------------------- RoPE

// The cos/sin table of the tests: angle t·base^(−2i/d) in double, rounded to float (the same
// rule as trainer/model/rope_table.hpp, written out here so the kernels are tested alone).
Floats rope_test_table(int64_t T, int64_t d, double base) {
  Floats cs(T * d);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle =
          static_cast<double>(t) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      cs[(t * d / 2 + i) * 2] = static_cast<float>(std::cos(angle));
      cs[(t * d / 2 + i) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
  return cs;
}

// Rotation of every pair in double, by +θ (sign 1) or −θ (sign −1), on a (B, T, heads, d)
// view at column col of rows ld apart.
Doubles rope_reference(const Floats& buf, const Floats& cs, int64_t B, int64_t T, int64_t heads, int64_t d, int64_t ld,
                       int64_t col, double sign) {
  Doubles r = to_doubles(buf);
  for (int64_t row = 0; row < B * T; ++row)
    for (int64_t hh = 0; hh < heads; ++hh)
      for (int64_t i = 0; i < d / 2; ++i) {
        const int64_t t = row % T, at = row * ld + col + hh * d + 2 * i;
        const double c = cs[(t * d / 2 + i) * 2], s = sign * cs[(t * d / 2 + i) * 2 + 1];
        const double x0 = buf[at], x1 = buf[at + 1];
        r[at] = x0 * c - x1 * s;
        r[at + 1] = x0 * s + x1 * c;
      }
  return r;
}

// q and k inside a packed qkv buffer (ld = 3·heads·d): each rotated in place, against the
// double reference; every column outside the rotated view keeps its bits.
TEST_F(TrainerOps, RopeOnViewsInsidePackedQkvMatchesReferenceAndLeavesOtherColumns) {
  const int64_t B = 2, T = 19, heads = 3, d = 10, hd = heads * d, ld = 3 * hd;
  const Floats cs = rope_test_table(T, d, 10000.0);
  auto table = upload(cs);
  const Floats qkv = random_floats(rng_, B * T * ld, -2.0f, 2.0f);
  for (int64_t col : {int64_t{0}, hd}) {  // q, then k
    for (double sign : {1.0, -1.0}) {
      SCOPED_TRACE("column " + std::to_string(col) + (sign > 0 ? " forward" : " backward"));
      auto buf = upload(qkv);
      if (sign > 0)
        be_->rope_forward(buf.data() + col, table.data(), B, T, heads, d, ld);
      else
        be_->rope_backward(buf.data() + col, table.data(), B, T, heads, d, ld);
      const Floats got = buf.download();
      const Doubles ref = rope_reference(qkv, cs, B, T, heads, d, ld, col, sign);
      EXPECT_LE(normalized_error(got, ref), kNormalizedTol);
      for (int64_t row = 0; row < B * T; ++row)
        for (int64_t j = 0; j < ld; ++j) {
          if (j >= col && j < col + hd) continue;
          ASSERT_EQ(std::memcmp(&got[row * ld + j], &qkv[row * ld + j], sizeof(float)), 0)
              << "column " << j << " of row " << row << " outside the view changed";
        }
    }
  }
}

// The backward is the forward's transpose: <R x, g> = <x, R^T g> in double, and backward after
// forward gives x back to rounding (a rotation is orthogonal).
TEST_F(TrainerOps, RopeBackwardIsTheTransposeOfTheForward) {
  const int64_t B = 3, T = 40, heads = 2, d = 16, ld = heads * d;
  auto table = upload(rope_test_table(T, d, 500000.0));
  const Floats x = random_floats(rng_, B * T * ld), g = random_floats(rng_, B * T * ld);
  auto rx = upload(x), rtg = upload(g);
  be_->rope_forward(rx.data(), table.data(), B, T, heads, d, ld);
  be_->rope_backward(rtg.data(), table.data(), B, T, heads, d, ld);
  const Floats Rx = rx.download(), Rtg = rtg.download();
  double lhs = 0.0, rhs = 0.0, scale = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    lhs += static_cast<double>(Rx[i]) * g[i];
    rhs += static_cast<double>(x[i]) * Rtg[i];
    scale += std::fabs(static_cast<double>(x[i]) * g[i]);
  }
  EXPECT_NEAR(lhs, rhs, 1e-6 * scale);
  be_->rope_backward(rx.data(), table.data(), B, T, heads, d, ld);
  EXPECT_LE(normalized_error(rx.download(), to_doubles(x)), kNormalizedTol);
}

// ---------------------------------------------------------------- attention

// Where q, k, v lie in one packed (B, T, ld) buffer, as offsets within a row: GPT-2's
// [q (h·d) | k (h·d) | v (h·d)] for multi-head attention (group_stride d), Megatron-LM's
// per key/value group [its g query heads | k | v] then `pad` unused columns for
// grouped-query attention (group_stride (g + 2)·d + pad).
struct QkvLayout {
  int64_t h, kv, d, g, group_stride, ld, k, v;  // k, v: where key/value head 0 starts
  int64_t q_at(int64_t i) const { return i / g * group_stride + i % g * d; }
  int64_t k_at(int64_t j) const { return k + j * group_stride; }
  int64_t v_at(int64_t j) const { return v + j * group_stride; }
};

QkvLayout gpt2_layout(int64_t h, int64_t d) { return {h, h, d, 1, d, 3 * h * d, h * d, 2 * h * d}; }

QkvLayout grouped_layout(int64_t h, int64_t kv, int64_t d, int64_t pad = 0) {
  const int64_t g = h / kv, group_stride = (g + 2) * d + pad;
  return {h, kv, d, g, group_stride, kv * group_stride, g * d, (g + 1) * d};
}

// Heads at the row offsets `at(0) .. at(heads − 1)` of every row of a (rows, ld) buffer, as
// (rows, heads·d).
template <typename At>
Floats gather_heads(const Floats& buf, int64_t ld, int64_t heads, int64_t d, At at) {
  const auto rows = static_cast<int64_t>(buf.size()) / ld;
  Floats out;
  out.reserve(static_cast<size_t>(rows * heads * d));
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t j = 0; j < heads; ++j)
      for (int64_t e = 0; e < d; ++e) out.push_back(buf[row * ld + at(j) + e]);
  return out;
}
Floats q_heads(const Floats& buf, const QkvLayout& L) {
  return gather_heads(buf, L.ld, L.h, L.d, [&](int64_t i) { return L.q_at(i); });
}
Floats k_heads(const Floats& buf, const QkvLayout& L) {
  return gather_heads(buf, L.ld, L.kv, L.d, [&](int64_t j) { return L.k_at(j); });
}
Floats v_heads(const Floats& buf, const QkvLayout& L) {
  return gather_heads(buf, L.ld, L.kv, L.d, [&](int64_t j) { return L.v_at(j); });
}

// Which columns of a row some head of q, k or v covers.
std::vector<bool> head_columns(const QkvLayout& L) {
  std::vector<bool> covered(static_cast<size_t>(L.ld), false);
  auto mark = [&](int64_t at) { std::fill(covered.begin() + at, covered.begin() + at + L.d, true); };
  for (int64_t i = 0; i < L.h; ++i) mark(L.q_at(i));
  for (int64_t j = 0; j < L.kv; ++j) {
    mark(L.k_at(j));
    mark(L.v_at(j));
  }
  return covered;
}

struct AttentionRef {
  Doubles out, lse, dq, dk, dv;  // lse (B, h, T); dq as (B, T, h·d); dk, dv as (B, T, kv·d)
};

// Naive causal attention in double, straight from the definition, and its chain rule; query
// head hh reads key/value head hh/g, g = h/kv, the heads found by the offset rule of
// Backend::attention_forward (groups group_stride apart), and dk, dv add up over the query
// heads that read them.
AttentionRef attention_reference(const float* q, const float* k, const float* v, int64_t ld, const Floats& dout,
                                 int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) {
  const int64_t hd = h * d, kvd = kv * d, group = h / kv;
  AttentionRef r{Doubles(B * T * hd), Doubles(B * h * T), Doubles(B * T * hd, 0.0), Doubles(B * T * kvd, 0.0),
                 Doubles(B * T * kvd, 0.0)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto Q = [&](int64_t b, int64_t t, int64_t hh, int64_t e) {
    return static_cast<double>(q[(b * T + t) * ld + hh / group * group_stride + hh % group * d + e]);
  };
  auto K = [&](int64_t b, int64_t t, int64_t hh, int64_t e) {
    return static_cast<double>(k[(b * T + t) * ld + hh / group * group_stride + e]);
  };
  auto V = [&](int64_t b, int64_t t, int64_t hh, int64_t e) {
    return static_cast<double>(v[(b * T + t) * ld + hh / group * group_stride + e]);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t t = 0; t < T; ++t) {
        Doubles p(t + 1);  // row t of the probabilities
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double s = 0.0;
          for (int64_t e = 0; e < d; ++e) s += Q(b, t, hh, e) * K(b, j, hh, e);
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double z = 0.0;
        for (int64_t j = 0; j <= t; ++j) z += (p[j] = std::exp(p[j] - mx));
        for (int64_t j = 0; j <= t; ++j) p[j] /= z;
        r.lse[(b * h + hh) * T + t] = mx + std::log(z);
        const int64_t o = (b * T + t) * hd + hh * d;
        for (int64_t e = 0; e < d; ++e) {
          double acc = 0.0;
          for (int64_t j = 0; j <= t; ++j) acc += p[j] * V(b, j, hh, e);
          r.out[o + e] = acc;
        }
        // backward of row t
        Doubles dp(t + 1);
        double dot = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t e = 0; e < d; ++e) dp[j] += dout[o + e] * V(b, j, hh, e);
          dot += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const double ds = p[j] * (dp[j] - dot);
          const int64_t kj = (b * T + j) * kvd + hh / group * d;
          for (int64_t e = 0; e < d; ++e) {
            r.dv[kj + e] += p[j] * dout[o + e];
            r.dq[o + e] += ds * K(b, j, hh, e) * scale;
            r.dk[kj + e] += ds * Q(b, t, hh, e) * scale;
          }
        }
      }
  return r;
}

// Columns [col, col + width) of every row of a (rows, ld) buffer.
Floats columns(const Floats& buf, int64_t ld, int64_t col, int64_t width) {
  const auto rows = static_cast<int64_t>(buf.size()) / ld;
  Floats out(rows * width);
  for (int64_t i = 0; i < rows; ++i)
    std::copy(buf.begin() + i * ld + col, buf.begin() + i * ld + col + width, out.begin() + i * width);
  return out;
}

// Forward and backward of one shape against the reference, q, k, v packed in one buffer laid
// out as L says. The columns outside every head (L's padding) are NaN in the input, which the
// forward must not read, and in the gradient buffer, where the backward must leave them
// bitwise; every head column of the gradients is written.
void expect_attention_matches_reference(Backend& be, std::mt19937& rng, int64_t B, int64_t T, const QkvLayout& L) {
  const int64_t h = L.h, kv = L.kv, d = L.d, ld = L.ld, hd = h * d;
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " h=" + std::to_string(h) +
               " kv=" + std::to_string(kv) + " d=" + std::to_string(d) +
               " group_stride=" + std::to_string(L.group_stride) + " ld=" + std::to_string(ld));
  const std::vector<bool> covered = head_columns(L);
  Floats qkv = random_floats(rng, B * T * ld, -1.5f, 1.5f);
  for (int64_t i = 0; i < B * T * ld; ++i)
    if (!covered[static_cast<size_t>(i % ld)]) qkv[i] = kNaN;
  const Floats dout = random_floats(rng, B * T * hd);
  DeviceBuffer<float> dqkv_in(be, qkv), ddout(be, dout);
  DeviceBuffer<float> out(be, B * T * hd), lse(be, B * h * T), dqkv(be, B * T * ld);
  for (auto* buf : {&out, &lse, &dqkv}) be.fill(buf->data(), kNaN, static_cast<int64_t>(buf->size()));
  const float* base = dqkv_in.data();
  float* grad = dqkv.data();
  be.attention_forward(out.data(), lse.data(), base, base + L.k, base + L.v, ld, B, T, h, kv, d, L.group_stride);
  be.attention_backward(grad, grad + L.k, grad + L.v, ddout.data(), out.data(), lse.data(), base, base + L.k,
                        base + L.v, ld, B, T, h, kv, d, L.group_stride);
  const AttentionRef ref =
      attention_reference(qkv.data(), qkv.data() + L.k, qkv.data() + L.v, ld, dout, B, T, h, kv, d, L.group_stride);
  EXPECT_LE(normalized_error(out.download(), ref.out), kNormalizedTol);
  EXPECT_LE(normalized_error(lse.download(), ref.lse), kNormalizedTol);
  const Floats g = dqkv.download();
  EXPECT_LE(normalized_error(q_heads(g, L), ref.dq), kNormalizedTol);
  EXPECT_LE(normalized_error(k_heads(g, L), ref.dk), kNormalizedTol);
  EXPECT_LE(normalized_error(v_heads(g, L), ref.dv), kNormalizedTol);
  int64_t unwritten = 0, touched = 0;
  for (int64_t i = 0; i < B * T * ld; ++i) {
    if (covered[static_cast<size_t>(i % ld)])
      unwritten += std::isnan(g[i]) ? 1 : 0;
    else
      touched += std::memcmp(&g[i], &kNaN, sizeof(float)) != 0 ? 1 : 0;
  }
  EXPECT_EQ(unwritten, 0) << "gradient elements of a head left NaN";
  EXPECT_EQ(touched, 0) << "gradient elements outside every head written";
}

// The CPU kernel runs query rows in blocks of 64 and keys in tiles of 256, rescaling the
// running output when a later tile raises a row's maximum.
TEST_F(TrainerOps, AttentionOnPackedQkvMatchesNaiveReference) {
  expect_attention_matches_reference(*be_, rng_, 2, 70, gpt2_layout(3, 8));    // two row blocks (64 and 6 rows)
  expect_attention_matches_reference(*be_, rng_, 3, 1, gpt2_layout(2, 8));     // one token: its probability is 1
  expect_attention_matches_reference(*be_, rng_, 1, 257, gpt2_layout(2, 8));   // a second key tile of one key
  expect_attention_matches_reference(*be_, rng_, 1, 600, gpt2_layout(1, 4));   // three key tiles, the last partial
  expect_attention_matches_reference(*be_, rng_, 2, 130, gpt2_layout(2, 24));  // d not a power of two
}

// Grouped-query attention in Megatron-LM's layout, per token and group [g query heads | k | v]:
// h = 4 query heads on kv = 2 and kv = 1 (multi-query) key/value heads, and 6 on 3; dk and dv
// sum over each group's query heads. The layout is dense: the gradients fill the buffer.
TEST_F(TrainerOps, GroupedQueryAttentionMatchesNaiveReference) {
  expect_attention_matches_reference(*be_, rng_, 2, 70, grouped_layout(4, 2, 8));
  expect_attention_matches_reference(*be_, rng_, 1, 300, grouped_layout(4, 1, 8));  // two key tiles
  expect_attention_matches_reference(*be_, rng_, 2, 33, grouped_layout(6, 3, 12));
}

// group_stride past (g + 2)·d: unused columns between the groups, which neither pass reads
// and the backward leaves bitwise as they were. Multi-head attention interleaved per head
// [q | k | v] (g = 1, group_stride 3·d) is the same layout with one query head per group.
TEST_F(TrainerOps, AttentionWithPaddingBetweenGroupsLeavesThePaddingUntouched) {
  expect_attention_matches_reference(*be_, rng_, 2, 70, grouped_layout(4, 2, 8, 5));
  expect_attention_matches_reference(*be_, rng_, 1, 90, grouped_layout(6, 3, 12, 12));
  expect_attention_matches_reference(*be_, rng_, 2, 40, grouped_layout(3, 3, 8));
  expect_attention_matches_reference(*be_, rng_, 2, 40, grouped_layout(3, 3, 8, 3));
}

// A query head attends its group's key/value head exactly as multi-head attention attends a
// copy of it: with k and v replicated per query head (kv = h, GPT-2's layout) the forward and
// dq are the same bits, and each replicated head's dk, dv add up to the group's.
TEST_F(TrainerOps, GroupedQueryAttentionEqualsMultiHeadOnReplicatedKeysAndValues) {
  const int64_t B = 2, T = 150, h = 4, kv = 2, d = 8, group = h / kv, hd = h * d, kvd = kv * d;
  const QkvLayout G = grouped_layout(h, kv, d), M = gpt2_layout(h, d);
  const Floats qkv = random_floats(rng_, B * T * G.ld, -1.5f, 1.5f), dout = random_floats(rng_, B * T * hd);
  Floats replicated(B * T * M.ld);  // [q | k of head hh/group for every hh | v likewise]
  for (int64_t row = 0; row < B * T; ++row)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t e = 0; e < d; ++e) {
        const float* src = &qkv[row * G.ld];
        float* dst = &replicated[row * M.ld];
        dst[M.q_at(hh) + e] = src[G.q_at(hh) + e];
        dst[M.k_at(hh) + e] = src[G.k_at(hh / group) + e];
        dst[M.v_at(hh) + e] = src[G.v_at(hh / group) + e];
      }
  auto g_in = upload(qkv), m_in = upload(replicated), dy = upload(dout);
  auto g_out = poisoned(B * T * hd), g_lse = poisoned(B * h * T), g_grad = poisoned(B * T * G.ld);
  auto m_out = poisoned(B * T * hd), m_lse = poisoned(B * h * T), m_grad = poisoned(B * T * M.ld);
  const float *g = g_in.data(), *m = m_in.data();
  float *gd = g_grad.data(), *md = m_grad.data();
  be_->attention_forward(g_out.data(), g_lse.data(), g, g + G.k, g + G.v, G.ld, B, T, h, kv, d, G.group_stride);
  be_->attention_forward(m_out.data(), m_lse.data(), m, m + M.k, m + M.v, M.ld, B, T, h, h, d, M.group_stride);
  be_->attention_backward(gd, gd + G.k, gd + G.v, dy.data(), g_out.data(), g_lse.data(), g, g + G.k, g + G.v, G.ld, B,
                          T, h, kv, d, G.group_stride);
  be_->attention_backward(md, md + M.k, md + M.v, dy.data(), m_out.data(), m_lse.data(), m, m + M.k, m + M.v, M.ld, B,
                          T, h, h, d, M.group_stride);
  EXPECT_EQ(g_out.download(), m_out.download());
  EXPECT_EQ(g_lse.download(), m_lse.download());
  const Floats gg = g_grad.download(), mg = m_grad.download();
  EXPECT_EQ(q_heads(gg, G), q_heads(mg, M)) << "dq";
  // The group's sum of the replicated heads' gradients, in double.
  Doubles dk(B * T * kvd, 0.0), dv(B * T * kvd, 0.0);
  for (int64_t row = 0; row < B * T; ++row)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t e = 0; e < d; ++e) {
        dk[row * kvd + hh / group * d + e] += mg[row * M.ld + M.k_at(hh) + e];
        dv[row * kvd + hh / group * d + e] += mg[row * M.ld + M.v_at(hh) + e];
      }
  EXPECT_LE(normalized_error(k_heads(gg, G), dk), kNormalizedTol);
  EXPECT_LE(normalized_error(v_heads(gg, G), dv), kNormalizedTol);
}

TEST_F(TrainerOps, AttentionOnThreeBuffersEqualsPackedBitwise) {
  const int64_t B = 2, T = 300, h = 2, d = 16, hd = h * d, ld = 3 * hd;  // five row blocks, two key tiles
  const Floats qkv = random_floats(rng_, B * T * ld);
  const Floats dout = random_floats(rng_, B * T * hd);
  auto dp = upload(qkv), ddout = upload(dout);
  auto q = upload(columns(qkv, ld, 0, hd)), k = upload(columns(qkv, ld, hd, hd)),
       v = upload(columns(qkv, ld, 2 * hd, hd));
  auto out_p = poisoned(B * T * hd), lse_p = poisoned(B * h * T), dqkv = poisoned(B * T * ld);
  auto out_s = poisoned(B * T * hd), lse_s = poisoned(B * h * T);
  auto dq = poisoned(B * T * hd), dk = poisoned(B * T * hd), dv = poisoned(B * T * hd);
  be_->attention_forward(out_p.data(), lse_p.data(), dp.data(), dp.data() + hd, dp.data() + 2 * hd, ld, B, T, h, h, d,
                         d);
  be_->attention_forward(out_s.data(), lse_s.data(), q.data(), k.data(), v.data(), hd, B, T, h, h, d, d);
  be_->attention_backward(dqkv.data(), dqkv.data() + hd, dqkv.data() + 2 * hd, ddout.data(), out_p.data(), lse_p.data(),
                          dp.data(), dp.data() + hd, dp.data() + 2 * hd, ld, B, T, h, h, d, d);
  be_->attention_backward(dq.data(), dk.data(), dv.data(), ddout.data(), out_s.data(), lse_s.data(), q.data(), k.data(),
                          v.data(), hd, B, T, h, h, d, d);
  // The same products on the same numbers: only the strides differ. (Bitwise equality is
  // expected of one BLAS; a CUDA backend may compare by normalized error instead.)
  const Floats out = out_s.download();
  EXPECT_EQ(out_p.download(), out);
  EXPECT_EQ(lse_p.download(), lse_s.download());
  const Floats g = dqkv.download();
  EXPECT_EQ(columns(g, ld, 0, hd), dq.download());
  EXPECT_EQ(columns(g, ld, hd, hd), dk.download());
  EXPECT_EQ(columns(g, ld, 2 * hd, hd), dv.download());
  EXPECT_TRUE(std::none_of(out.begin(), out.end(), [](float f) { return std::isnan(f); }));
}

// Each (sequence, head) pair runs on one thread and adds its tiles in a fixed order: the
// thread count changes no bit of out, lse or the gradients.
TEST_F(TrainerOps, AttentionIsBitwiseTheSameOnOneOrThreeThreads) {
  const int64_t B = 2, T = 300, h = 3, d = 8, hd = h * d, ld = 3 * hd;
  const Floats qkv = random_floats(rng_, B * T * ld, -1.5f, 1.5f);
  const Floats dout = random_floats(rng_, B * T * hd);
  auto run = [&](int threads) {
    auto be = make_cpu_backend(threads);
    EXPECT_EQ(dynamic_cast<CpuBackend&>(*be).threads(), threads);
    DeviceBuffer<float> in(*be, qkv), ddout(*be, dout), out(*be, B * T * hd), lse(*be, B * h * T),
        dqkv(*be, B * T * ld);
    const float* base = in.data();
    be->attention_forward(out.data(), lse.data(), base, base + hd, base + 2 * hd, ld, B, T, h, h, d, d);
    be->attention_backward(dqkv.data(), dqkv.data() + hd, dqkv.data() + 2 * hd, ddout.data(), out.data(), lse.data(),
                           base, base + hd, base + 2 * hd, ld, B, T, h, h, d, d);
    return std::vector<Floats>{out.download(), lse.download(), dqkv.download()};
  };
  const std::vector<Floats> one = run(1), three = run(3);
  EXPECT_EQ(one[0], three[0]) << "out";
  EXPECT_EQ(one[1], three[1]) << "lse";
  EXPECT_EQ(one[2], three[2]) << "dq, dk, dv";
}

TEST_F(TrainerOps, AttentionIsCausalAFutureTokenLeavesEarlierOutputsBitwiseUnchanged) {
  // T = 300: the changed token is in the second key tile, beside earlier rows of its row block.
  const int64_t B = 2, T = 300, h = 2, d = 8, hd = h * d, ld = 3 * hd, changed = 271;
  Floats qkv = random_floats(rng_, B * T * ld);
  auto run = [&](const Floats& input) {
    auto in = upload(input);
    auto out = poisoned(B * T * hd), lse = poisoned(B * h * T);
    be_->attention_forward(out.data(), lse.data(), in.data(), in.data() + hd, in.data() + 2 * hd, ld, B, T, h, h, d, d);
    return std::make_pair(out.download(), lse.download());
  };
  const auto before = run(qkv);
  for (int64_t b = 0; b < B; ++b)  // new q, k, v for token `changed` of every sequence
    for (int64_t j = 0; j < ld; ++j) qkv[(b * T + changed) * ld + j] += 0.5f;
  const auto after = run(qkv);
  for (int64_t b = 0; b < B; ++b) {
    const size_t first = static_cast<size_t>(b * T * hd), cut = first + static_cast<size_t>(changed * hd);
    EXPECT_EQ(std::memcmp(before.first.data() + first, after.first.data() + first, (cut - first) * sizeof(float)), 0)
        << "an output before token " << changed << " changed";
    EXPECT_NE(std::memcmp(before.first.data() + cut, after.first.data() + cut, static_cast<size_t>(hd) * sizeof(float)),
              0)
        << "the changed token's own output did not change: the test would not notice anything";
    for (int64_t hh = 0; hh < h; ++hh) {
      const size_t row0 = static_cast<size_t>((b * h + hh) * T);
      EXPECT_EQ(std::memcmp(before.second.data() + row0, after.second.data() + row0,
                            static_cast<size_t>(changed) * sizeof(float)),
                0)
          << "the log-sum-exp of an earlier query changed";
    }
  }
}

// ---------------------------------------------------------------- embeddings

TEST_F(TrainerOps, EmbeddingLookupAndScatterAddSplitOverVocabRanks) {
  const int64_t V = 11, c = 6, m = 23;
  const Floats table = random_floats(rng_, V * c), dout = random_floats(rng_, m * c),
               dtable0 = random_floats(rng_, V * c);
  std::vector<int32_t> tokens = random_tokens(rng_, m, static_cast<int32_t>(V));
  tokens[0] = tokens[5] = tokens[9] = 3;  // a row hit three times adds three gradients
  auto dtok = upload(tokens);
  // Reference: plain lookup; scatter-add in token order.
  Doubles ref(m * c);
  Doubles dref = to_doubles(dtable0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c; ++j) {
      ref[i * c + j] = table[tokens[i] * c + j];
      dref[tokens[i] * c + j] += dout[i * c + j];
    }
  auto ddout = upload(dout);
  for (const std::vector<int64_t>& split :
       {std::vector<int64_t>{11}, std::vector<int64_t>{6, 5}, std::vector<int64_t>{4, 4, 3}}) {
    SCOPED_TRACE("vocab split of " + std::to_string(split.size()) + " ranks");
    Floats summed(m * c, 0.0f), dtable;
    int64_t v0 = 0;
    for (int64_t v_local : split) {
      auto shard = upload(Floats(table.begin() + v0 * c, table.begin() + (v0 + v_local) * c));
      auto dshard = upload(Floats(dtable0.begin() + v0 * c, dtable0.begin() + (v0 + v_local) * c));
      auto out = poisoned(m * c);
      be_->embedding_forward(out.data(), dtok.data(), shard.data(), m, c, v0, v_local);
      be_->embedding_backward(dshard.data(), ddout.data(), dtok.data(), m, c, v0, v_local);
      const Floats o = out.download();
      for (size_t i = 0; i < o.size(); ++i) summed[i] += o[i];  // the caller's all-reduce
      const Floats ds = dshard.download();
      dtable.insert(dtable.end(), ds.begin(), ds.end());
      v0 += v_local;
    }
    EXPECT_EQ(summed, Floats(ref.begin(), ref.end())) << "one rank holds each row, the others add zeros";
    ASSERT_EQ(dtable.size(), dref.size());
    for (size_t i = 0; i < dref.size(); ++i) EXPECT_NEAR(dtable[i], dref[i], 4 * kU * (std::fabs(dref[i]) + 3.0)) << i;
  }
}

TEST_F(TrainerOps, PositionEmbeddingAddsPerPositionAndSumsGradientOverBatch) {
  const int64_t B = 3, T = 7, c = 5;
  const Floats x0 = random_floats(rng_, B * T * c), wpe = random_floats(rng_, T * c),
               dwpe0 = random_floats(rng_, T * c);
  auto dx = upload(x0), dw = upload(wpe), ddw = upload(dwpe0);
  be_->position_forward(dx.data(), dw.data(), B, T, c);
  be_->position_backward(ddw.data(), dx.data(), B, T, c);
  const Floats x = dx.download(), dwpe = ddw.download();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T * c; ++i) ASSERT_EQ(x[b * T * c + i], x0[b * T * c + i] + wpe[i]);
  for (int64_t i = 0; i < T * c; ++i) {
    double ref = dwpe0[i], mag = std::fabs(dwpe0[i]);
    for (int64_t b = 0; b < B; ++b) {
      ref += x[b * T * c + i];
      mag += std::fabs(x[b * T * c + i]);
    }
    EXPECT_NEAR(dwpe[i], ref, static_cast<double>(B + 1) * kU * mag) << i;
  }
}

// ---------------------------------------------------------------- cross-entropy

struct CrossEntropyResult {
  Floats loss, dlogits;
};

// The staged cross-entropy over G simulated vocab ranks of V/G columns each; the all-gather
// of the row maxima and the all-reduce of the partials are done here by hand.
CrossEntropyResult cross_entropy_on_ranks(Backend& be, int64_t G, const Floats& logits,
                                          const std::vector<int32_t>& targets, int64_t m, int64_t V, float scale) {
  const int64_t vl = V / G;
  DeviceBuffer<int32_t> dt(be, targets);
  auto nan_buffer = [&](size_t n) {
    DeviceBuffer<float> b(be, n);
    be.fill(b.data(), kNaN, static_cast<int64_t>(n));
    return b;
  };
  std::vector<DeviceBuffer<float>> ls, maxes, gathered, partials, maxs, losses;
  for (int64_t r = 0; r < G; ++r) {
    Floats shard(m * vl);
    for (int64_t i = 0; i < m; ++i)
      std::copy(logits.begin() + i * V + r * vl, logits.begin() + i * V + (r + 1) * vl, shard.begin() + i * vl);
    ls.emplace_back(be, shard);
    maxes.push_back(nan_buffer(m));
    gathered.push_back(nan_buffer(G * m));
    partials.push_back(nan_buffer(2 * m));
    maxs.push_back(nan_buffer(m));
    losses.push_back(nan_buffer(m));
  }
  for (int64_t r = 0; r < G; ++r) be.cross_entropy_row_max(maxes[r].data(), ls[r].data(), m, vl);
  Floats all;  // all-gather: rank r's block at r·m
  for (int64_t r = 0; r < G; ++r) {
    const Floats part = maxes[r].download();
    all.insert(all.end(), part.begin(), part.end());
  }
  for (auto& g : gathered) g.upload(all);
  // exps written over the logits in place, as the trainer does.
  for (int64_t r = 0; r < G; ++r)
    be.cross_entropy_partials(partials[r].data(), maxs[r].data(), ls[r].data(), gathered[r].data(), G, ls[r].data(),
                              dt.data(), m, vl, r * vl);
  Floats total = partials[0].download();
  for (int64_t r = 1; r < G; ++r) {
    const Floats part = partials[r].download();
    for (size_t i = 0; i < total.size(); ++i) total[i] += part[i];
  }
  for (auto& p : partials) p.upload(total);
  for (int64_t r = 0; r < G; ++r) {
    be.cross_entropy_loss(losses[r].data(), partials[r].data(), maxs[r].data(), m);
    be.cross_entropy_backward(ls[r].data(), ls[r].data(), partials[r].data(), dt.data(), m, vl, r * vl, scale);
  }
  CrossEntropyResult res{losses[0].download(), Floats(m * V)};
  for (int64_t r = 0; r < G; ++r) {
    EXPECT_EQ(losses[r].download(), res.loss) << "every vocab rank must compute the same loss";
    const Floats d = ls[r].download();
    for (int64_t i = 0; i < m; ++i)
      std::copy(d.begin() + i * vl, d.begin() + (i + 1) * vl, res.dlogits.begin() + i * V + r * vl);
  }
  return res;
}

class TrainerCrossEntropy : public TrainerOps {
 protected:
  void SetUp() override {
    logits = random_floats(rng_, m * V, -4.0f, 4.0f);
    for (int64_t j = 0; j < V; ++j) logits[3 * V + j] += 200.0f;  // exp would overflow without the max
    logits[5 * V + 33] = 30.0f;                                   // a row with one dominant logit
    targets = random_tokens(rng_, m, static_cast<int32_t>(V));
    targets[5] = 33;
  }
  const int64_t m = 13, V = 40;
  const float scale = 1.0f / 13.0f;
  Floats logits;
  std::vector<int32_t> targets;
};

TEST_F(TrainerCrossEntropy, OneRankEqualsPlainSoftmaxCrossEntropy) {
  const CrossEntropyResult got = cross_entropy_on_ranks(*be_, 1, logits, targets, m, V, scale);
  Doubles loss(m), dlogits(m * V);
  for (int64_t i = 0; i < m; ++i) {
    const float* row = &logits[i * V];
    double z = 0.0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(static_cast<double>(row[j]) - 200.0);  // shifted: no overflow
    const double log_z = std::log(z) + 200.0;
    loss[i] = log_z - row[targets[i]];
    for (int64_t j = 0; j < V; ++j)
      dlogits[i * V + j] = (std::exp(row[j] - log_z) - (j == targets[i] ? 1.0 : 0.0)) * scale;
  }
  // Per row: log-sum-exp of logits up to ~200 in magnitude, absolute error ~u·max.
  for (int64_t i = 0; i < m; ++i)
    EXPECT_NEAR(got.loss[i], loss[i], 1e-5 * (1.0 + std::fabs(loss[i])) + 4 * kU * 200.0) << "row " << i;
  EXPECT_LE(normalized_error(got.dlogits, dlogits), kNormalizedTol);
}

TEST_F(TrainerCrossEntropy, SplitOverTwoAndFourVocabRanksEqualsOneRank) {
  const CrossEntropyResult one = cross_entropy_on_ranks(*be_, 1, logits, targets, m, V, scale);
  for (int64_t G : {2, 4}) {
    SCOPED_TRACE("G_y = " + std::to_string(G));
    const CrossEntropyResult split = cross_entropy_on_ranks(*be_, G, logits, targets, m, V, scale);
    for (int64_t i = 0; i < m; ++i)
      EXPECT_NEAR(split.loss[i], one.loss[i], 1e-5 * (1.0 + std::fabs(one.loss[i]))) << "row " << i;
    EXPECT_LE(normalized_error(split.dlogits, to_doubles(one.dlogits)), kNormalizedTol);
  }
}

TEST_F(TrainerCrossEntropy, ExpsInPlaceOverLogitsEqualSeparateBuffers) {
  auto in_place = upload(logits), separate_in = upload(logits), exps = poisoned(m * V);
  auto dt = upload(targets);
  auto mx = poisoned(m), p1 = poisoned(2 * m), p2 = poisoned(2 * m), m1 = poisoned(m), m2 = poisoned(m);
  be_->cross_entropy_row_max(mx.data(), separate_in.data(), m, V);
  be_->cross_entropy_partials(p1.data(), m1.data(), in_place.data(), mx.data(), 1, in_place.data(), dt.data(), m, V, 0);
  be_->cross_entropy_partials(p2.data(), m2.data(), exps.data(), mx.data(), 1, separate_in.data(), dt.data(), m, V, 0);
  EXPECT_EQ(in_place.download(), exps.download());
  EXPECT_EQ(p1.download(), p2.download());
  EXPECT_EQ(separate_in.download(), logits) << "logits must be untouched when exps is another buffer";
}

// ---------------------------------------------------------------- AdamW

TEST_F(TrainerOps, AdamWMatchesTheReferenceFormulaOverThreeSteps) {
  const int64_t n = 257;
  for (bool decay : {true, false}) {
    SCOPED_TRACE(decay ? "with weight decay" : "without weight decay");
    Floats p0 = random_floats(rng_, n, -2.0f, 2.0f);
    auto param = upload(p0), m = upload(Floats(n, 0.0f)), v = upload(Floats(n, 0.0f));
    Doubles rp = to_doubles(p0), rm(n, 0.0), rv(n, 0.0), m_mag(n, 0.0);  // m_mag: Σ|terms| of m
    const float lrs[3] = {1e-3f, 2e-3f, 5e-4f};                          // the caller's schedule
    for (int64_t t = 1; t <= 3; ++t) {
      const Floats grad = random_floats(rng_, n, -3.0f, 3.0f);
      auto g = upload(grad);
      AdamWStep s;
      s.lr = lrs[t - 1];
      s.beta1 = 0.9f;
      s.beta2 = 0.95f;
      s.eps = 1e-8f;
      s.weight_decay = 0.1f;
      s.t = t;
      s.grad_scale = 0.5f;
      be_->adamw(param.data(), g.data(), m.data(), v.data(), n, s, decay);
      // The reference formula in double, on the float hyperparameters as given (0.9f is not 0.9).
      const double b1 = s.beta1, b2 = s.beta2, lr = s.lr, eps = s.eps, wd = decay ? s.weight_decay : 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const double gi = static_cast<double>(grad[i]) * static_cast<double>(s.grad_scale);
        rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
        rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
        m_mag[i] = b1 * m_mag[i] + (1.0 - b1) * std::fabs(gi);
        const double mhat = rm[i] / (1.0 - std::pow(b1, static_cast<double>(t)));
        const double vhat = rv[i] / (1.0 - std::pow(b2, static_cast<double>(t)));
        rp[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * rp[i]);
      }
    }
    const Floats gp = param.download(), gm = m.download(), gv = v.download();
    for (int64_t i = 0; i < n; ++i) {
      // The update is ~lr per step, computed to ~1e-6 relative; the parameter itself rounds
      // to half an ulp per step.
      EXPECT_NEAR(gp[i], rp[i], 3 * kU * std::fabs(rp[i]) + 1e-8) << "param " << i;
      // m's terms have both signs and may cancel: bounded by its terms' magnitude. v's don't.
      EXPECT_NEAR(gm[i], rm[i], 8 * kU * m_mag[i]) << "m " << i;
      EXPECT_NEAR(gv[i], rv[i], 8 * kU * rv[i]) << "v " << i;
    }
    // The first step moves every parameter by about lr (|m̂/sqrt(v̂)| = 1): the update happened.
    EXPECT_GT(std::fabs(gp[0] - p0[0]), 1e-4f);
  }
}

// ---------------------------------------------------------------- mixture of experts

using Ints = std::vector<int32_t>;

// Row-wise softmax of logits (m, E) in double.
Doubles softmax_rows(const Floats& logits, int64_t m, int64_t E) {
  Doubles p(static_cast<size_t>(m * E));
  for (int64_t i = 0; i < m; ++i) {
    double mx = -std::numeric_limits<double>::infinity(), total = 0.0;
    for (int64_t j = 0; j < E; ++j) mx = std::max(mx, static_cast<double>(logits[i * E + j]));
    for (int64_t j = 0; j < E; ++j) total += p[i * E + j] = std::exp(logits[i * E + j] - mx);
    for (int64_t j = 0; j < E; ++j) p[i * E + j] /= total;
  }
  return p;
}

TEST_F(TrainerOps, RouterLogitsAndBackwardMatchTripleLoopWithinRoundingBound) {
  const int64_t m = 13, c = 37, E = 5;
  const Floats x = random_floats(rng_, m * c), w = random_floats(rng_, c * E), dl = random_floats(rng_, m * E);
  const Floats dx0 = random_floats(rng_, m * c), dw0 = random_floats(rng_, c * E);
  auto dx_in = upload(x), dw_in = upload(w), dlogits = upload(dl), logits = poisoned(m * E);
  be_->router_logits(logits.data(), dx_in.data(), dw_in.data(), m, c, E);
  auto dx = upload(dx0), dw = upload(dw0);
  be_->router_backward(dx.data(), dw.data(), dlogits.data(), dx_in.data(), dw_in.data(), m, c, E);
  const Floats got = logits.download(), gdx = dx.download(), gdw = dw.download();
  // Each output is a sum of (terms + the accumulated value): within 2·(terms + 2)·u·Σ|terms|.
  auto expect_sum = [&](float value, double ref, double mag, int64_t terms, const std::string& what) {
    EXPECT_NEAR(value, ref, 2.0 * static_cast<double>(terms + 2) * kU * mag) << what;
  };
  for (int64_t t = 0; t < m; ++t)
    for (int64_t e = 0; e < E; ++e) {
      double ref = 0.0, mag = 0.0;
      for (int64_t j = 0; j < c; ++j) {
        ref += static_cast<double>(x[t * c + j]) * w[j * E + e];
        mag += std::fabs(static_cast<double>(x[t * c + j]) * w[j * E + e]);
      }
      expect_sum(got[t * E + e], ref, mag, c, "logits[" + std::to_string(t) + "," + std::to_string(e) + "]");
    }
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < c; ++j) {
      double ref = dx0[t * c + j], mag = std::fabs(ref);
      for (int64_t e = 0; e < E; ++e) {
        ref += static_cast<double>(dl[t * E + e]) * w[j * E + e];
        mag += std::fabs(static_cast<double>(dl[t * E + e]) * w[j * E + e]);
      }
      expect_sum(gdx[t * c + j], ref, mag, E, "dx[" + std::to_string(t) + "," + std::to_string(j) + "]");
    }
  for (int64_t j = 0; j < c; ++j)
    for (int64_t e = 0; e < E; ++e) {
      double ref = dw0[j * E + e], mag = std::fabs(ref);
      for (int64_t t = 0; t < m; ++t) {
        ref += static_cast<double>(x[t * c + j]) * dl[t * E + e];
        mag += std::fabs(static_cast<double>(x[t * c + j]) * dl[t * E + e]);
      }
      expect_sum(gdw[j * E + e], ref, mag, m, "dw[" + std::to_string(j) + "," + std::to_string(e) + "]");
    }
}

TEST_F(TrainerOps, RouterTopKPicksTheLargestProbabilitiesTiesToTheLowerIndex) {
  const int64_t m = 19, E = 7;
  Floats logits = random_floats(rng_, m * E, -3.0f, 3.0f);
  std::fill(logits.begin(), logits.begin() + E, 0.5f);  // row 0: all equal, experts 0 then 1
  logits[1 * E + 2] = logits[1 * E + 4] = 5.0f;         // row 1: two equal largest, 2 then 4
  logits[2 * E + 6] = 6.0f;                             // row 2: the largest last,
  logits[2 * E + 1] = logits[2 * E + 3] = 4.0f;         //        then the lower of two equal
  const Doubles p = softmax_rows(logits, m, E);
  for (int64_t k : {1, 2}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    auto dl = upload(logits), probs = poisoned(m * E), gates = poisoned(m * k);
    auto experts = upload(Ints(static_cast<size_t>(m * k), -7));
    be_->router_top_k(probs.data(), experts.data(), gates.data(), dl.data(), m, E, k);
    const Floats gp = probs.download(), gg = gates.download();
    const Ints ge = experts.download();
    EXPECT_LE(normalized_error(gp, p), kNormalizedTol) << "probs";
    for (int64_t i = 0; i < m; ++i) {
      // Reference top-k: stable order by probability, largest first.
      Ints order(static_cast<size_t>(E));
      for (int64_t j = 0; j < E; ++j) order[j] = static_cast<int32_t>(j);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[i * E + a] > p[i * E + b]; });
      double sum = 0.0;
      for (int64_t s = 0; s < k; ++s) sum += p[i * E + order[s]];
      for (int64_t s = 0; s < k; ++s) {
        ASSERT_EQ(ge[i * k + s], order[s]) << "row " << i << " slot " << s;
        const double gate = k == 1 ? p[i * E + order[s]] : p[i * E + order[s]] / sum;
        EXPECT_NEAR(gg[i * k + s], gate, 1e-6) << "row " << i << " slot " << s;
      }
    }
    EXPECT_EQ((Ints{ge[0], ge[static_cast<size_t>(k) - 1]}), (Ints{0, k == 1 ? 0 : 1})) << "all equal";
    EXPECT_EQ(ge[static_cast<size_t>(k)], 2) << "the lower of the two largest first";
    if (k == 2) {
      EXPECT_EQ(ge[3], 4);
      EXPECT_EQ((Ints{ge[4], ge[5]}), (Ints{6, 1}));
      EXPECT_EQ(gg[0], 0.5f) << "equal probabilities split the gate evenly";
    }

    // probs written over the logits: the same bits as separate buffers.
    auto in_place = upload(logits), gates2 = poisoned(m * k);
    auto experts2 = upload(Ints(static_cast<size_t>(m * k), -7));
    be_->router_top_k(in_place.data(), experts2.data(), gates2.data(), in_place.data(), m, E, k);
    EXPECT_EQ(in_place.download(), gp);
    EXPECT_EQ(experts2.download(), ge);
    EXPECT_EQ(gates2.download(), gg);
  }
}

TEST_F(TrainerOps, RouterLogitsGradTakesGatesAndCoefBackThroughTheSoftmax) {
  const int64_t m = 11, E = 6;
  const Floats logits = random_floats(rng_, m * E, -2.0f, 2.0f), coef = random_floats(rng_, E);
  for (int64_t k : {1, 2})
    for (bool with_coef : {true, false}) {
      SCOPED_TRACE("k = " + std::to_string(k) + (with_coef ? " with coef" : " without coef"));
      auto dl = upload(logits), probs = poisoned(m * E), gates = poisoned(m * k), dcoef = upload(coef);
      auto experts = upload(Ints(static_cast<size_t>(m * k), 0));
      be_->router_top_k(probs.data(), experts.data(), gates.data(), dl.data(), m, E, k);
      const Floats p = probs.download();
      const Ints ex = experts.download();
      const Floats dg = random_floats(rng_, m * k);
      auto ddg = upload(dg), dlogits = poisoned(m * E);
      be_->router_logits_grad(dlogits.data(), probs.data(), experts.data(), ddg.data(),
                              with_coef ? dcoef.data() : nullptr, m, E, k);
      Doubles ref(static_cast<size_t>(m * E));
      for (int64_t i = 0; i < m; ++i) {
        Doubles dp(static_cast<size_t>(E), 0.0);
        for (int64_t j = 0; j < E; ++j) dp[j] = with_coef ? coef[j] : 0.0;
        const int32_t e0 = ex[i * k];
        if (k == 1) {
          dp[e0] += dg[i];
        } else {
          const int32_t e1 = ex[i * k + 1];
          const double p0 = p[i * E + e0], p1 = p[i * E + e1], sum = p0 + p1;
          // g0 = p0/sum, g1 = p1/sum
          dp[e0] += dg[i * k] * p1 / (sum * sum) - dg[i * k + 1] * p1 / (sum * sum);
          dp[e1] += dg[i * k + 1] * p0 / (sum * sum) - dg[i * k] * p0 / (sum * sum);
        }
        double dot = 0.0;
        for (int64_t j = 0; j < E; ++j) dot += p[i * E + j] * dp[j];
        for (int64_t j = 0; j < E; ++j) ref[i * E + j] = p[i * E + j] * (dp[j] - dot);
      }
      EXPECT_LE(normalized_error(dlogits.download(), ref), kNormalizedTol);
    }
}

TEST_F(TrainerOps, GatherRowsCopiesOrScalesRowsAndZerosOutOfRangeIndices) {
  const int64_t m = 6, n = 9, c = 11;
  const Floats in = random_floats(rng_, m * c), scale = random_floats(rng_, n);
  const Ints rows = {3, 0, 5, 3, -1, 1, 6, 2, 4};  // a repeat, a padded slot (-1) and one past m
  auto din = upload(in), dscale = upload(scale);
  auto drows = upload(rows);
  for (bool scaled : {false, true}) {
    SCOPED_TRACE(scaled ? "scaled" : "plain");
    auto out = poisoned(n * c);
    be_->gather_rows(out.data(), din.data(), drows.data(), scaled ? dscale.data() : nullptr, n, m, c);
    const Floats got = out.download();
    for (int64_t j = 0; j < n; ++j)
      for (int64_t col = 0; col < c; ++col) {
        const bool valid = rows[j] >= 0 && rows[j] < m;
        const float v = valid ? in[rows[j] * c + col] : 0.0f;
        ASSERT_EQ(got[j * c + col], scaled ? v * scale[j] : v) << j << "," << col;
      }
  }
}

TEST_F(TrainerOps, CombineRowsAddsGatedExpertRowsAndSkipsDroppedSlots) {
  const int64_t m = 7, k = 2, n = 9, c = 13;
  const Floats in = random_floats(rng_, n * c), out0 = random_floats(rng_, m * c), gates = random_floats(rng_, m * k);
  // Token 2 has one dropped slot, token 4 both; token 6's second slot is past n (dropped too).
  const Ints slots = {0, 5, 1, 2, 3, -1, 4, 8, -1, -1, 6, 7, 5, 9};
  auto din = upload(in), dgates = upload(gates);
  auto dslots = upload(slots);
  for (bool gated : {true, false}) {
    SCOPED_TRACE(gated ? "gated" : "ungated (dispatch's backward)");
    auto out = upload(out0);
    be_->combine_rows(out.data(), din.data(), dslots.data(), gated ? dgates.data() : nullptr, m, k, n, c);
    const Floats got = out.download();
    for (int64_t t = 0; t < m; ++t)
      for (int64_t col = 0; col < c; ++col) {
        double ref = out0[t * c + col], mag = std::fabs(ref);
        for (int64_t s = 0; s < k; ++s) {
          const int32_t slot = slots[t * k + s];
          if (slot < 0 || slot >= n) continue;
          const double term = (gated ? static_cast<double>(gates[t * k + s]) : 1.0) * in[slot * c + col];
          ref += term;
          mag += std::fabs(term);
        }
        EXPECT_NEAR(got[t * c + col], ref, 2.0 * (k + 1) * kU * mag) << t << "," << col;
      }
    const Floats untouched(out0.begin() + 4 * c, out0.begin() + 5 * c);
    EXPECT_EQ(Floats(got.begin() + 4 * c, got.begin() + 5 * c), untouched) << "a token with no slots is left as is";
  }
  // k = 1: one slot per token.
  auto out = upload(out0);
  const Ints one = {2, -1, 0, 8, 1, 3, 4};
  auto done = upload(one);
  be_->combine_rows(out.data(), din.data(), done.data(), dgates.data(), m, 1, n, c);
  const Floats got = out.download();
  for (int64_t t = 0; t < m; ++t)
    for (int64_t col = 0; col < c; ++col)
      ASSERT_EQ(got[t * c + col], one[t] < 0 ? out0[t * c + col] : out0[t * c + col] + gates[t] * in[one[t] * c + col]);
}

TEST_F(TrainerOps, CombineGatesGradIsTheDotOfDoutWithEachExpertRow) {
  const int64_t m = 5, k = 2, n = 6, c = 300;  // c spans several vector lanes and a tail
  const Floats dout = random_floats(rng_, m * c), in = random_floats(rng_, n * c);
  const Ints slots = {1, 4, -1, 0, 5, 5, 2, -1, 3, 1};
  auto ddout = upload(dout), din = upload(in), dg = poisoned(m * k);
  auto dslots = upload(slots);
  be_->combine_gates_grad(dg.data(), ddout.data(), din.data(), dslots.data(), m, k, n, c);
  const Floats got = dg.download();
  for (int64_t p = 0; p < m * k; ++p) {
    const int32_t slot = slots[p];
    if (slot < 0) {
      EXPECT_EQ(got[p], 0.0f) << "a dropped slot has no gate gradient";
      continue;
    }
    double ref = 0.0, mag = 0.0;
    for (int64_t col = 0; col < c; ++col) {
      const double term = static_cast<double>(dout[(p / k) * c + col]) * in[slot * c + col];
      ref += term;
      mag += std::fabs(term);
    }
    EXPECT_NEAR(got[p], ref, static_cast<double>(c) * kU * mag) << "pair " << p;
  }
}

// ---------------------------------------------------------------- exp and argument errors

TEST(TrainerVecMath, ExpWithinTwoUlpOfDoubleExpOverTheFloatRange) {
  double worst = 0.0;
  for (float x = -87.0f; x < 88.7f; x += 0.00731f) {
    const double ref = std::exp(static_cast<double>(x));
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(ref)) - 23);
    worst = std::max(worst, std::fabs(static_cast<double>(cpu::exp_approx(x)) - ref) / ulp);
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(cpu::exp_approx(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp_approx(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::exp_approx(-200.0f), 0.0f);
  EXPECT_EQ(cpu::exp_approx(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(cpu::exp_approx(kNaN)));
}

TEST_F(TrainerOps, BadSizesThrowBackendErrorNamingTheOp) {
  auto buf = poisoned(64);
  float* p = buf.data();
  expect_backend_error([&] { be_->gemm(Transpose::no, Transpose::no, -1, 2, 2, 1.0f, p, 2, p, 2, 0.0f, p, 2); },
                       "gemm: m = -1");
  expect_backend_error([&] { be_->gemm(Transpose::no, Transpose::no, 2, 4, 3, 1.0f, p, 2, p, 4, 0.0f, p, 4); },
                       "lda = 2");
  expect_backend_error([&] { be_->layernorm_normalize(p, p, p, p, p, p, p, 4, 8, 4, 1e-5f); },
                       "local width c = 8 exceeds full width C = 4");
  expect_backend_error([&] { be_->rmsnorm_normalize(p, p, p, p, p, 4, 8, 4, 1e-5f); },
                       "rmsnorm_normalize: local width c = 8 exceeds full width C = 4");
  expect_backend_error([&] { be_->rmsnorm_backward_finish(p, p, p, p, p, p, p, -1, 4, 4); },
                       "rmsnorm_backward_finish: m = -1");
  expect_backend_error([&] { be_->rmsnorm_row_squares(p, p, 4, -2); }, "rmsnorm_row_squares: c = -2");
  expect_backend_error([&] { be_->swiglu_forward(p, p, 4, -1); }, "swiglu_forward: f = -1");
  expect_backend_error([&] { be_->swiglu_backward(p, p, p, -3, 4); }, "swiglu_backward: m = -3");
  expect_backend_error([&] { be_->rope_forward(p, p, 1, 2, 2, 5, 10); }, "rope_forward: head size d = 5 must be even");
  expect_backend_error([&] { be_->rope_backward(p, p, 1, 2, 2, 4, 6); },
                       "rope_backward: heads·d = 8 exceeds row stride ld = 6");
  expect_backend_error([&] { be_->attention_forward(p, p, p, p, p, 4, 1, 2, 2, 2, 4, 4); }, "attention_forward");
  expect_backend_error([&] { be_->attention_forward(p, p, p, p, p, 64, 1, 2, 4, 3, 4, 4); },
                       "attention_forward: h = 4 query heads is not a multiple of kv = 3 key/value heads");
  expect_backend_error([&] { be_->attention_backward(p, p, p, p, p, p, p, p, p, 64, 1, 2, 2, 0, 4, 4); },
                       "attention_backward: h = 2 query heads is not a multiple of kv = 0 key/value heads");
  expect_backend_error([&] { be_->attention_forward(p, p, p, p, p, 64, 1, 2, 4, 2, 4, -1); },
                       "attention_forward: group_stride = -1 must not be negative");
  expect_backend_error([&] { be_->attention_forward(p, p, p, p, p, 64, 1, 2, 4, 2, 4, 7); },
                       "attention_forward: group_stride = 7 is smaller than the (h/kv)·d = 8 elements of one group's "
                       "query heads");
  expect_backend_error([&] { be_->attention_backward(p, p, p, p, p, p, p, p, p, 24, 1, 2, 4, 2, 4, 20); },
                       "attention_backward: (kv−1)·group_stride + (h/kv)·d = 28 exceeds row stride ld = 24");
  expect_backend_error([&] { be_->cross_entropy_row_max(p, p, 4, 0); }, "v_local = 0");
  DeviceBuffer<int32_t> ints(*be_, 8);
  int32_t* i = ints.data();
  expect_backend_error([&] { be_->router_logits(p, p, p, 4, 3, 0); }, "router_logits: E = 0 must be positive");
  expect_backend_error([&] { be_->router_backward(p, p, p, p, p, 4, -1, 2); }, "router_backward: c = -1");
  expect_backend_error([&] { be_->router_top_k(p, i, p, p, 4, 8, 3); }, "router_top_k: k = 3 must be 1 or 2");
  expect_backend_error([&] { be_->router_top_k(p, i, p, p, 4, 1, 2); }, "router_top_k: k = 2 exceeds experts E = 1");
  expect_backend_error([&] { be_->router_logits_grad(p, p, i, p, nullptr, -1, 4, 1); }, "router_logits_grad: m = -1");
  expect_backend_error([&] { be_->gather_rows(p, p, i, nullptr, -2, 4, 4); }, "gather_rows: n = -2");
  expect_backend_error([&] { be_->combine_rows(p, p, i, p, 4, 0, 4, 4); }, "combine_rows: k = 0 must be 1 or 2");
  expect_backend_error([&] { be_->combine_gates_grad(p, p, p, i, 4, 1, 4, -3); }, "combine_gates_grad: c = -3");
  AdamWStep s;
  s.t = 0;
  expect_backend_error([&] { be_->adamw(p, p, p, p, 4, s, true); }, "step t = 0");
  expect_backend_error(
      [&] {
        DeviceBuffer<float> b(*be_, 3);
        b.upload(Floats(4));
      },
      "4 elements into a buffer of 3");
}

}  // namespace
}  // namespace axonn
