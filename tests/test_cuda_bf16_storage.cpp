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
//   where the ops read the same stored values.
// Output buffers start as NaN, so an element an op forgets to write fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/bfloat16.hpp"
#include "cuda_skip.hpp"
#include "random_floats.hpp"
#include "trainer/backend.hpp"
#include "trainer/cuda/cuda_backend.hpp"

namespace axonn {
namespace {

using Floats = std::vector<float>;
using test::random_floats;

constexpr double kOneRounding = 1.0 / 256;  // bf16 keeps 8 significant bits
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr ElementType kStorage[] = {ElementType::float32, ElementType::bfloat16};

Floats rounded_to_bf16(Floats v) {
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

// max|got − ref| / max(1, max|ref|); +inf where got is not finite and ref is, or sizes differ.
double normalized_error(const Floats& got, const Floats& ref) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double err = 0.0, scale = 1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - ref[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
  }
  return err / scale;
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

TEST_F(CudaBf16Storage, MixedActivationTypesInOneOpAreRejectedNamingBoth) {
  ActBuffer f = act(ElementType::float32, inputs(8)), b = poisoned(ElementType::bfloat16, 8);
  try {
    gpu_->gelu_forward(b.ptr(), f.ptr(), 8);
    FAIL() << "gelu_forward took float32 input and bf16 output";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("gelu_forward: activations of mixed types (bfloat16 and float32)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace axonn
