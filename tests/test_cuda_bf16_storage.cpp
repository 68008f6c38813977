// The CUDA ops on bfloat16 activations (mixed precision's storage, act_storage.cuh) against
// the same ops on float32 activations, on one GPU (label gpu; emulated.* in CI). Inputs are
// bf16 values, so both runs read the same numbers; a bf16 run differs from the float32 run
// only by rounding what it stores. So:
// - an op that computes each output from its inputs alone (GELU, bias) stores exactly the
//   float32 run's result rounded to bf16: bitwise;
// - an op that also stores an intermediate it reads again (the residual sum LayerNorm
//   normalizes) is within a few bf16 roundings: normalized error (max|bf16 − f32| over
//   max(1, max|f32|)) at most 4·2^-8;
// - float32 outputs beside bf16 inputs (statistics, parameter gradients) are within 1e-5
//   where the ops read the same stored values;
// - a GEMM on bf16 operands (bf16 tensor cores) against exact float32 on the same values:
//   a bf16 result within one rounding, a float32 one (dW) within 1e-5 (the two kernels
//   accumulate in different orders on a GPU).
// Output buffers start as NaN, so an element an op forgets to write fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend_errors.hpp"
#include "comm/bfloat16.hpp"
#include "cuda_skip.hpp"
#include "normalized_error.hpp"
#include "random_floats.hpp"
#include "trainer/backend.hpp"
#include "trainer/cuda/cuda_backend.hpp"

namespace axonn {
namespace {

using Floats = std::vector<float>;
using test::expect_backend_error;
using test::normalized_error;
using test::random_floats;

constexpr double kOneRounding = 1.0 / 256;  // bf16 keeps 8 significant bits
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr ElementType kStorage[] = {ElementType::float32, ElementType::bfloat16};

Floats rounded_to_bf16(Floats v) {
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

// Activations of one storage type on the GPU, written from and read back as floats.
class ActBuffer {
 public:
  ActBuffer(Backend& backend, ElementType type, const Floats& values)
      : backend_(&backend), type_(type), bytes_(backend, values.size() * element_size(type)) {
    if (type == ElementType::float32) {
      backend.copy_to_device(bytes_.data(), values.data(), bytes_.bytes());
      return;
    }
    std::vector<uint16_t> bits(values.size());
    std::transform(values.begin(), values.end(), bits.begin(), float_to_bf16);
    backend.copy_to_device(bytes_.data(), bits.data(), bytes_.bytes());
  }
  ActBuffer(Backend& backend, ElementType type, int64_t n)  // n NaNs
      : ActBuffer(backend, type, Floats(static_cast<size_t>(n), kNaN)) {}

  ActPtr ptr() { return ActPtr(bytes_.data(), type_); }
  Floats download() const {
    const size_t n = bytes_.size() / element_size(type_);
    Floats out(n);
    if (type_ == ElementType::float32) {
      backend_->copy_to_host(out.data(), bytes_.data(), bytes_.bytes());
      return out;
    }
    std::vector<uint16_t> bits(n);
    backend_->copy_to_host(bits.data(), bytes_.data(), bytes_.bytes());
    std::transform(bits.begin(), bits.end(), out.begin(), bf16_to_float);
    return out;
  }

 private:
  Backend* backend_;
  ElementType type_;
  DeviceBuffer<std::byte> bytes_;
};

class CudaBf16Storage : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_CUDA_DEVICES(1);
    gpu_ = make_cuda_backend(CudaBackendOptions{0, GemmMath::fp32});
  }

  // Random bf16 values in [lo, hi).
  Floats inputs(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    return rounded_to_bf16(random_floats(rng_, n, lo, hi));
  }
  ActBuffer act(ElementType type, const Floats& values) { return ActBuffer(*gpu_, type, values); }
  ActBuffer poisoned(ElementType type, int64_t n) { return ActBuffer(*gpu_, type, n); }

  // The bf16 run stored exactly the float32 run's values rounded to bf16.
  static void expect_rounded_equal(const Floats& bf16, const Floats& f32, const std::string& what) {
    const Floats want = rounded_to_bf16(f32);
    ASSERT_EQ(bf16.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i)
      if (bf16[i] != want[i]) {
        ADD_FAILURE() << what << ": element " << i << " is " << bf16[i] << " in bf16, float32 gives " << f32[i]
                      << " (rounded " << want[i] << ")";
        return;
      }
  }
  static void expect_close(const Floats& got, const Floats& ref, double tol, const std::string& what) {
    EXPECT_LE(normalized_error(got, ref), tol) << what << ": normalized error of bf16 storage against float32";
  }

  std::mt19937 rng_{20261123};
  std::unique_ptr<Backend> gpu_;
};

TEST_F(CudaBf16Storage, GeluForwardAndBackwardStoreTheFloat32ResultRounded) {
  const int64_t n = 1000;
  const Floats x = inputs(n, -4.0f, 4.0f), dout = inputs(n);
  Floats out[2], dx[2];
  for (int s = 0; s < 2; ++s) {
    ActBuffer xb = act(kStorage[s], x), db = act(kStorage[s], dout), ob = poisoned(kStorage[s], n),
              gb = poisoned(kStorage[s], n);
    gpu_->gelu_forward(ob.ptr(), xb.ptr(), n);
    gpu_->gelu_backward(gb.ptr(), xb.ptr(), db.ptr(), n);
    out[s] = ob.download();
    dx[s] = gb.download();
  }
  expect_rounded_equal(out[1], out[0], "gelu_forward");
  expect_rounded_equal(dx[1], dx[0], "gelu_backward");
}

TEST_F(CudaBf16Storage, BiasOnAColumnBlockAndItsGradientFromBf16Rows) {
  const int64_t m = 300, n = 40, ld = 3 * n;  // a column block of a packed buffer, over one chunk of rows
  const Floats out0 = inputs(m * ld), dout = inputs(m * ld), bias = random_floats(rng_, n);
  Floats out[2], dbias[2];
  for (int s = 0; s < 2; ++s) {
    ActBuffer ob = act(kStorage[s], out0), db = act(kStorage[s], dout);
    DeviceBuffer<float> bias_d(*gpu_, bias), dbias_d(*gpu_, Floats(n, 0.5f));
    gpu_->bias_forward(ob.ptr() + n, bias_d.data(), m, n, ld);
    gpu_->bias_backward(dbias_d.data(), db.ptr() + n, m, n, ld);
    out[s] = ob.download();
    dbias[s] = dbias_d.download();
  }
  expect_rounded_equal(out[1], out[0], "bias_forward");
  EXPECT_EQ(dbias[1], dbias[0]) << "bias_backward: the same bf16 values summed in the same order";
}

// LayerNorm reads bf16 rows and computes in float32: from the same stored rows, the
// statistics and float32 gradients are the float32 run's bits, and every stored row is the
// float32 run's row rounded. Only the residual sum is rounded before LayerNorm reads it (it
// is stored), so what follows it is close, not equal.
TEST_F(CudaBf16Storage, LayerNormOfWholeRowsForwardAndBackward) {
  const int64_t m = 37, C = 96;
  const Floats x = inputs(m * C, -2.0f, 2.0f), a = inputs(m * C), dout = inputs(m * C), dx0 = inputs(m * C),
               gamma = random_floats(rng_, C, 0.5f, 1.5f), beta = random_floats(rng_, C);
  struct Run {
    Floats out, mean, rstd, res_x, res_out, res_mean, dx, dgamma, dbeta, partials;
  } run[2];
  for (int s = 0; s < 2; ++s) {
    const ElementType type = kStorage[s];
    ActBuffer xb = act(type, x), ab = act(type, a), db = act(type, dout), dxb = act(type, dx0),
              out = poisoned(type, m * C), res_x = poisoned(type, m * C), res_out = poisoned(type, m * C);
    DeviceBuffer<float> g(*gpu_, gamma), bt(*gpu_, beta), mean(*gpu_, Floats(m, kNaN)), rstd(*gpu_, Floats(m, kNaN)),
        res_mean(*gpu_, Floats(m, kNaN)), res_rstd(*gpu_, Floats(m, kNaN)), dgamma(*gpu_, Floats(C, 0.25f)),
        dbeta(*gpu_, Floats(C, -0.25f)), partials(*gpu_, Floats(2 * m, kNaN));
    gpu_->layernorm_rows(out.ptr(), mean.data(), rstd.data(), xb.ptr(), g.data(), bt.data(), m, C, 1e-5f);
    gpu_->residual_layernorm_rows(res_x.ptr(), res_out.ptr(), res_mean.data(), res_rstd.data(), xb.ptr(), ab.ptr(),
                                  g.data(), bt.data(), m, C, 1e-5f);
    gpu_->layernorm_rows_backward(dxb.ptr(), dgamma.data(), dbeta.data(), partials.data(), db.ptr(), xb.ptr(),
                                  mean.data(), rstd.data(), g.data(), m, C);
    run[s] = {out.download(),      mean.download(), rstd.download(),   res_x.download(), res_out.download(),
              res_mean.download(), dxb.download(),  dgamma.download(), dbeta.download(), partials.download()};
  }
  expect_rounded_equal(run[1].out, run[0].out, "layernorm_rows out");
  EXPECT_EQ(run[1].mean, run[0].mean) << "layernorm_rows mean";
  EXPECT_EQ(run[1].rstd, run[0].rstd) << "layernorm_rows rstd";
  expect_rounded_equal(run[1].res_x, run[0].res_x, "residual_layernorm_rows x = a + b");
  expect_close(run[1].res_out, run[0].res_out, 4 * kOneRounding, "residual_layernorm_rows out");
  expect_close(run[1].res_mean, run[0].res_mean, kOneRounding, "residual_layernorm_rows mean");
  expect_rounded_equal(run[1].dx, run[0].dx, "layernorm_rows_backward dx (accumulated)");
  EXPECT_EQ(run[1].dgamma, run[0].dgamma) << "layernorm_rows_backward dgamma";
  EXPECT_EQ(run[1].dbeta, run[0].dbeta) << "layernorm_rows_backward dbeta";
  EXPECT_EQ(run[1].partials, run[0].partials) << "layernorm_rows_backward partials";
}

// The stages of a LayerNorm whose rows are split over ranks: this rank's c of C columns.
TEST_F(CudaBf16Storage, LayerNormStagesOnALocalShard) {
  const int64_t m = 21, c = 40, C = 120;
  const Floats x = inputs(m * c, -2.0f, 2.0f), a = inputs(m * c), dout = inputs(m * c), dx0 = inputs(m * c),
               gamma = random_floats(rng_, c, 0.5f, 1.5f), beta = random_floats(rng_, c),
               sums = random_floats(rng_, m, -3.0f, 3.0f), squares = random_floats(rng_, m, 10.0f, 20.0f);
  struct Run {
    Floats row_sums, res_x, res_sums, mean, squares, out, rstd, partials, dx, dgamma, dbeta;
  } run[2];
  for (int s = 0; s < 2; ++s) {
    const ElementType type = kStorage[s];
    ActBuffer xb = act(type, x), ab = act(type, a), db = act(type, dout), dxb = act(type, dx0),
              res_x = poisoned(type, m * c), out = poisoned(type, m * c);
    DeviceBuffer<float> g(*gpu_, gamma), bt(*gpu_, beta), row_sums(*gpu_, Floats(m, kNaN)),
        res_sums(*gpu_, Floats(m, kNaN)), given_sums(*gpu_, sums), mean(*gpu_, Floats(m, kNaN)),
        sq(*gpu_, Floats(m, kNaN)), given_sq(*gpu_, squares), rstd(*gpu_, Floats(m, kNaN)),
        partials(*gpu_, Floats(2 * m, kNaN)), dgamma(*gpu_, Floats(c, 0.0f)), dbeta(*gpu_, Floats(c, 0.0f));
    gpu_->layernorm_row_sums(row_sums.data(), xb.ptr(), m, c);
    gpu_->layernorm_residual_row_sums(res_x.ptr(), res_sums.data(), xb.ptr(), ab.ptr(), m, c);
    // The sums describe the row as stored (rounded), the row the next stages read.
    DeviceBuffer<float> stored_sums(*gpu_, Floats(m, kNaN));
    gpu_->layernorm_row_sums(stored_sums.data(), res_x.ptr(), m, c);
    EXPECT_EQ(res_sums.download(), stored_sums.download()) << element_type_name(type);
    gpu_->layernorm_centered_squares(mean.data(), sq.data(), given_sums.data(), xb.ptr(), m, c, C);
    gpu_->layernorm_normalize(out.ptr(), rstd.data(), xb.ptr(), mean.data(), given_sq.data(), g.data(), bt.data(), m, c,
                              C, 1e-5f);
    gpu_->layernorm_backward_partials(partials.data(), db.ptr(), xb.ptr(), mean.data(), rstd.data(), g.data(), m, c);
    gpu_->layernorm_backward_finish(dxb.ptr(), dgamma.data(), dbeta.data(), partials.data(), db.ptr(), xb.ptr(),
                                    mean.data(), rstd.data(), g.data(), m, c, C);
    run[s] = {row_sums.download(), res_x.download(),  res_sums.download(), mean.download(),
              sq.download(),       out.download(),    rstd.download(),     partials.download(),
              dxb.download(),      dgamma.download(), dbeta.download()};
  }
  EXPECT_EQ(run[1].row_sums, run[0].row_sums) << "layernorm_row_sums";
  expect_rounded_equal(run[1].res_x, run[0].res_x, "layernorm_residual_row_sums x = a + b");
  expect_close(run[1].res_sums, run[0].res_sums, 4 * kOneRounding, "layernorm_residual_row_sums sums");
  EXPECT_EQ(run[1].mean, run[0].mean) << "layernorm_centered_squares mean";
  EXPECT_EQ(run[1].squares, run[0].squares) << "layernorm_centered_squares squares";
  expect_rounded_equal(run[1].out, run[0].out, "layernorm_normalize out");
  EXPECT_EQ(run[1].rstd, run[0].rstd) << "layernorm_normalize rstd";
  EXPECT_EQ(run[1].partials, run[0].partials) << "layernorm_backward_partials";
  expect_rounded_equal(run[1].dx, run[0].dx, "layernorm_backward_finish dx (accumulated)");
  EXPECT_EQ(run[1].dgamma, run[0].dgamma) << "layernorm_backward_finish dgamma";
  EXPECT_EQ(run[1].dbeta, run[0].dbeta) << "layernorm_backward_finish dbeta";
}

TEST_F(CudaBf16Storage, EmbeddingAndPositionRowsAndTheirGradients) {
  const int64_t B = 3, T = 8, c = 24, m = B * T, v_local = 10, v0 = 5;
  std::vector<int32_t> tokens(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i)
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % 20);  // some out of range
  const Floats table = inputs(v_local * c), wpe = random_floats(rng_, T * c), dout = inputs(m * c);
  Floats out[2], dtable[2], dwpe[2];
  for (int s = 0; s < 2; ++s) {
    // The table is the GEMMs' copy of wte, in the activations' type.
    ActBuffer ob = poisoned(kStorage[s], m * c), db = act(kStorage[s], dout), tab = act(kStorage[s], table);
    DeviceBuffer<int32_t> tok(*gpu_, tokens);
    DeviceBuffer<float> pos(*gpu_, wpe), dtab(*gpu_, Floats(v_local * c, 0.5f)), dpos(*gpu_, Floats(T * c, 0.5f));
    gpu_->embedding_forward(ob.ptr(), tok.data(), tab.ptr(), m, c, v0, v_local);
    gpu_->position_forward(ob.ptr(), pos.data(), B, T, c);
    gpu_->embedding_backward(dtab.data(), db.ptr(), tok.data(), m, c, v0, v_local);
    gpu_->position_backward(dpos.data(), db.ptr(), B, T, c);
    out[s] = ob.download();
    dtable[s] = dtab.download();
    dwpe[s] = dpos.download();
  }
  // The table rows are bf16 values: bf16 rounds their sum with the position once.
  expect_rounded_equal(out[1], out[0], "embedding_forward + position_forward");
  EXPECT_EQ(dtable[1], dtable[0]) << "embedding_backward: the same bf16 rows added in token order";
  EXPECT_EQ(dwpe[1], dwpe[0]) << "position_backward";
}

TEST_F(CudaBf16Storage, CrossEntropyStagesAndWholeRows) {
  const int64_t m = 6, V = 300;
  const Floats logits = inputs(m * V, -4.0f, 4.0f);
  std::vector<int32_t> targets(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 53) % V);
  const float scale = 1.0f / static_cast<float>(m);
  Floats staged_loss[2], staged_d[2], rows_loss[2], rows_d[2];
  for (int s = 0; s < 2; ++s) {
    ActBuffer staged = act(kStorage[s], logits), rows = act(kStorage[s], logits);
    DeviceBuffer<int32_t> tg(*gpu_, targets);
    DeviceBuffer<float> row_max(*gpu_, Floats(m, kNaN)), max(*gpu_, Floats(m, kNaN)),
        partials(*gpu_, Floats(2 * m, kNaN)), loss(*gpu_, Floats(m, kNaN)), loss2(*gpu_, Floats(m, kNaN));
    gpu_->cross_entropy_row_max(row_max.data(), staged.ptr(), m, V);
    gpu_->cross_entropy_partials(partials.data(), max.data(), staged.ptr(), row_max.data(), 1, staged.ptr(), tg.data(),
                                 m, V, 0);
    gpu_->cross_entropy_loss(loss.data(), partials.data(), max.data(), m);
    gpu_->cross_entropy_backward(staged.ptr(), staged.ptr(), partials.data(), tg.data(), m, V, 0, scale);
    gpu_->cross_entropy_rows(loss2.data(), rows.ptr(), tg.data(), m, V, scale, max.data(), partials.data());
    staged_loss[s] = loss.download();
    staged_d[s] = staged.download();
    rows_loss[s] = loss2.download();
    rows_d[s] = rows.download();
  }
  // The losses come from the same logits in float32; the staged gradient divides the
  // rounded exps, so it is within two roundings of the float32 one.
  EXPECT_EQ(staged_loss[1], staged_loss[0]) << "cross_entropy stages: loss";
  EXPECT_EQ(rows_loss[1], rows_loss[0]) << "cross_entropy_rows: loss";
  expect_close(staged_d[1], staged_d[0], 2 * kOneRounding * scale, "cross_entropy stages: dlogits");
  expect_rounded_equal(rows_d[1], rows_d[0], "cross_entropy_rows: dlogits");
}

// The GEMMs on bf16 operands (cuBLASLt's bf16 tensor cores, float32 accumulation) against
// the same GEMMs on float32 buffers holding the same values at exact float32 math: a bf16
// result is the float32 product rounded once (up to the accumulation order, which differs
// between the two kernels on a GPU), a float32 result (dW) equal up to that order.
TEST_F(CudaBf16Storage, GemmOnBf16OperandsRoundsTheFloat32ProductOnce) {
  const int64_t m = 37, n = 24, k = 51;
  for (Transpose ta : {Transpose::no, Transpose::yes})
    for (Transpose tb : {Transpose::no, Transpose::yes}) {
      const int64_t lda = (ta == Transpose::no ? k : m) + 3, ldb = (tb == Transpose::no ? n : k) + 5, ldc = n + 2;
      const Floats a = inputs((ta == Transpose::no ? m : k) * lda), b = inputs((tb == Transpose::no ? k : n) * ldb),
                   c0 = inputs(m * ldc);
      const std::string what =
          std::string("gemm ta=") + (ta == Transpose::yes ? "T" : "N") + " tb=" + (tb == Transpose::yes ? "T" : "N");
      Floats out[2], out_f32c[2];
      for (int s = 0; s < 2; ++s) {
        ActBuffer ab = act(kStorage[s], a), bb = act(kStorage[s], b), cb = act(kStorage[s], c0);
        DeviceBuffer<float> cf(*gpu_, Floats(m * ldc, kNaN));
        gpu_->gemm(ta, tb, m, n, k, 0.75f, ab.ptr(), lda, bb.ptr(), ldb, 0.5f, cb.ptr(), ldc);  // C read and written
        gpu_->gemm(ta, tb, m, n, k, 1.0f, ab.ptr(), lda, bb.ptr(), ldb, 0.0f, cf.data(), ldc);  // float32 C
        out[s] = cb.download();
        out_f32c[s] = cf.download();
      }
      expect_close(out[1], out[0], kOneRounding, what + ", bf16 C");
      expect_close(out_f32c[1], out_f32c[0], 1e-5, what + ", float32 C");
    }
}

TEST_F(CudaBf16Storage, FusedLinearLayersOnBf16Activations) {
  const int64_t m = 40, n = 48, k = 32;
  const Floats x = inputs(m * k, -2.0f, 2.0f), w = inputs(k * n), dy = inputs(m * n), bias = random_floats(rng_, n + 1);
  struct Run {
    Floats y, y_unaligned, pre, out, dpre, dw, dbias;
  } run[2];
  for (int s = 0; s < 2; ++s) {
    ActBuffer xb = act(kStorage[s], x), wb = act(kStorage[s], w), db = act(kStorage[s], dy);
    ActBuffer y = poisoned(kStorage[s], m * n), y2 = poisoned(kStorage[s], m * n), pre = poisoned(kStorage[s], m * n),
              out = poisoned(kStorage[s], m * n), dpre = poisoned(kStorage[s], m * k);
    DeviceBuffer<float> bias_d(*gpu_, bias), dw(*gpu_, Floats(k * n, kNaN)), dbias(*gpu_, Floats(n, 0.25f));
    gpu_->linear_forward(y.ptr(), xb.ptr(), wb.ptr(), bias_d.data(), m, n, k);
    // A bias not 16-byte aligned cannot be fused: the GEMM, then bias_forward.
    gpu_->linear_forward(y2.ptr(), xb.ptr(), wb.ptr(), bias_d.data() + 1, m, n, k);
    gpu_->linear_gelu_forward(pre.ptr(), out.ptr(), xb.ptr(), wb.ptr(), bias_d.data(), m, n, k);
    // dpre (m, k) = dY (m, n)·W^T ⊙ gelu'(pre), with pre (m, k): the x buffer stands in for it.
    gpu_->linear_input_grad_gelu(dpre.ptr(), db.ptr(), wb.ptr(), xb.ptr(), m, n, k);
    gpu_->linear_weight_grad(dw.data(), 0.0f, dbias.data(), xb.ptr(), db.ptr(), m, n, k);
    run[s] = {y.download(),    y2.download(), pre.download(),  out.download(),
              dpre.download(), dw.download(), dbias.download()};
  }
  // Fused or not, each stored output is within two roundings (the unfused bias and GELU
  // read a rounded GEMM result); the float32 gradients are the same sums.
  expect_close(run[1].y, run[0].y, 2 * kOneRounding, "linear_forward");
  expect_close(run[1].y_unaligned, run[0].y_unaligned, 2 * kOneRounding, "linear_forward, unaligned bias");
  expect_close(run[1].pre, run[0].pre, 2 * kOneRounding, "linear_gelu_forward pre");
  expect_close(run[1].out, run[0].out, 2 * kOneRounding, "linear_gelu_forward out");
  expect_close(run[1].dpre, run[0].dpre, 2 * kOneRounding, "linear_input_grad_gelu");
  expect_close(run[1].dw, run[0].dw, 1e-5, "linear_weight_grad dW");
  expect_close(run[1].dbias, run[0].dbias, 1e-5, "linear_weight_grad dbias");
}

TEST_F(CudaBf16Storage, GemmWithAnEmptyProductScalesABf16Result) {
  const int64_t m = 5, n = 7, ldc = 9;
  const Floats c0 = inputs(m * ldc);
  ActBuffer a = act(ElementType::bfloat16, inputs(m)), b = act(ElementType::bfloat16, inputs(n)),
            c = act(ElementType::bfloat16, c0);
  gpu_->gemm(Transpose::no, Transpose::no, m, n, 0, 1.0f, a.ptr(), 1, b.ptr(), n, 0.5f, c.ptr(), ldc);
  Floats want = c0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) want[i * ldc + j] *= 0.5f;  // halving a bf16 value is exact
  EXPECT_EQ(c.download(), want);
}

TEST_F(CudaBf16Storage, GemmOperandsOfTwoTypesAreRejectedNamingBoth) {
  ActBuffer a = act(ElementType::bfloat16, inputs(16)), b = act(ElementType::float32, inputs(16)),
            c = poisoned(ElementType::bfloat16, 16);
  expect_backend_error(
      [&] { gpu_->gemm(Transpose::no, Transpose::no, 4, 4, 4, 1.0f, a.ptr(), 4, b.ptr(), 4, 0.0f, c.ptr(), 4); },
      "gemm: A is bfloat16 and B float32");
  expect_backend_error(
      [&] { gpu_->gemm(Transpose::no, Transpose::no, 4, 4, 4, 1.0f, b.ptr(), 4, b.ptr(), 4, 0.0f, c.ptr(), 4); },
      "gemm: float32 operands with a bfloat16 result");
}

// Attention on both kernel sets (exact float32, and bf16 tensor cores under GemmMath::bf16):
// the forward stores the float32-storage run's output rounded, with the same lse; the
// backward reads a rounded out (for D = rowsum(dout ⊙ out)) and stores rounded gradients.
// The tensor-core kernels read bf16 q, k, v, dout in place when d is their padded head size
// (d = 32) and pack them first otherwise (d = 24); float32 storage is always packed, so
// equal outputs say both ways read the same rows. Multi-head attention in GPT-2's layout
// [q | k | v] (kv = h = 2), and multi-query (kv = 1) in the grouped layout [q0 q1 | k | v].
TEST_F(CudaBf16Storage, AttentionOnBothKernelSets) {
  for (const int64_t kv : {2, 1})
    for (const int64_t d : {32, 24})
      for (GemmMath math : {GemmMath::fp32, GemmMath::bf16}) {
        const int64_t B = 2, T = 37, h = 2, ld = (h + 2 * kv) * d, m = B * T, g = h / kv;
        const int64_t group_stride = kv == h ? d : (g + 2) * d, k_at = kv == h ? h * d : g * d,
                      v_at = k_at + d * (kv == h ? h : 1);
        const Floats qkv = inputs(m * ld), dout = inputs(m * h * d);
        auto backend = make_cuda_backend(CudaBackendOptions{0, math});
        const std::string what = std::string("attention, ") + gemm_math_name(math) + " math, head size " +
                                 std::to_string(d) + ", kv " + std::to_string(kv);
        Floats out[2], lse[2], grads[2];
        for (int s = 0; s < 2; ++s) {
          ActBuffer in(*backend, kStorage[s], qkv), dout_b(*backend, kStorage[s], dout),
              out_b(*backend, kStorage[s], m * h * d), d_qkv(*backend, kStorage[s], m * ld);
          DeviceBuffer<float> lse_b(*backend, Floats(B * h * T, kNaN));
          const ActPtr q = in.ptr(), k = q + k_at, v = q + v_at, dq = d_qkv.ptr();
          backend->attention_forward(out_b.ptr(), lse_b.data(), q, k, v, ld, B, T, h, kv, d, group_stride);
          backend->attention_backward(dq, dq + k_at, dq + v_at, dout_b.ptr(), out_b.ptr(), lse_b.data(), q, k, v, ld, B,
                                      T, h, kv, d, group_stride);
          out[s] = out_b.download();
          lse[s] = lse_b.download();
          grads[s] = d_qkv.download();
        }
        expect_rounded_equal(out[1], out[0], what + ": out");
        EXPECT_EQ(lse[1], lse[0]) << what << ": lse";
        expect_close(grads[1], grads[0], 4 * kOneRounding, what + ": dq, dk, dv");
      }
}

TEST_F(CudaBf16Storage, Copy2dCopiesBf16RowsAndRejectsTwoTypes) {
  const int64_t rows = 6, cols = 5, ld_src = 9, ld_dst = 7;
  const Floats src = inputs(rows * ld_src);
  ActBuffer from = act(ElementType::bfloat16, src), to = poisoned(ElementType::bfloat16, rows * ld_dst);
  gpu_->copy_2d(to.ptr(), ld_dst, from.ptr(), ld_src, rows, cols);
  const Floats got = to.download();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < ld_dst; ++j) {
      const float want = j < cols ? src[i * ld_src + j] : kNaN;
      if (j < cols)
        EXPECT_EQ(got[i * ld_dst + j], want) << "row " << i << " column " << j;
      else
        EXPECT_TRUE(std::isnan(got[i * ld_dst + j])) << "row " << i << " column " << j << " written past cols";
    }
  ActBuffer f32 = poisoned(ElementType::float32, rows * ld_dst);
  expect_backend_error([&] { gpu_->copy_2d(f32.ptr(), ld_dst, from.ptr(), ld_src, rows, cols); },
                       "copy_2d: copies bytes: dst is float32 and src bfloat16");
}

TEST_F(CudaBf16Storage, MixedActivationTypesInOneOpAreRejectedNamingBoth) {
  ActBuffer f = act(ElementType::float32, inputs(8)), b = poisoned(ElementType::bfloat16, 8);
  expect_backend_error([&] { gpu_->gelu_forward(b.ptr(), f.ptr(), 8); },
                       "gelu_forward: activations of mixed types (bfloat16 and float32)");
}

}  // namespace
}  // namespace axonn
