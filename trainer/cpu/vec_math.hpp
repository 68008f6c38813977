#pragma once
// Scalar math written so that GCC vectorizes the loops calling it (no library calls, no
// branches, only selects): exp by Cody–Waite range reduction and a Taylor polynomial, and
// sums/maxima over fixed lanes. No -ffast-math anywhere: every result is reproducible bit
// for bit, on every run and thread count.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace axonn::cpu {

// 2^k for k in [-126, 127], built from the exponent bits.
inline float exp2_int(int32_t k) { return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23); }

// e^x within a few ulp of std::exp: x = n·ln2 + r with |r| <= ln2/2, e^r by its Taylor series
// to r^7 (truncation < 5e-9 relative), times 2^n. Returns 0 below -87.3 (where e^x is
// subnormal) and +inf above 88.7; NaN stays NaN.
inline float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;       // 16 significant bits: n·kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;  // ln 2 − kLn2Hi
  constexpr float kRound = 12582912.0f;              // 1.5·2^23: adding it rounds to an integer
  constexpr float kLow = -87.3f;
  constexpr float kHigh = 88.7f;
  const float xc = std::min(std::max(x, kLow), kHigh);
  const float nf = (xc * kLog2e + kRound) - kRound;  // round(x·log2 e), in [-126, 128]
  const float r = (xc - nf * kLn2Hi) - nf * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n in two factors so that n = 128 (x near 88.7) still has a finite result.
  const int32_t n = static_cast<int32_t>(nf);
  const int32_t half = n / 2;
  const float y = p * exp2_int(half) * exp2_int(n - half);
  const float below = x < kLow ? 0.0f : y;
  return x > kHigh ? std::numeric_limits<float>::infinity() : below;
}

// 1 / (1 + e^-x), written so that it is 0 (not NaN) for very negative x and 1 for large x.
inline float sigmoid_approx(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

constexpr int64_t kLanes = 8;       // float lanes of the sums: two SSE registers
constexpr int64_t kSumBlock = 512;  // elements per float partial sum before it joins a double

// Σ x[start, end) of one block (end − start <= kSumBlock): 8 float lanes, the tail, then the
// lanes in order.
inline float block_sum(const float* x, int64_t start, int64_t end) {
  float lane[kLanes] = {};
  int64_t j = start;
  for (; j + kLanes <= end; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += x[j + l];
  float block = 0.0f;
  for (; j < end; ++j) block += x[j];
  for (int64_t l = 0; l < kLanes; ++l) block += lane[l];
  return block;
}

// Σ x[j]² over one block, in the same order as block_sum.
inline float block_sum_squares(const float* x, int64_t start, int64_t end) {
  float lane[kLanes] = {};
  int64_t j = start;
  for (; j + kLanes <= end; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += x[j + l] * x[j + l];
  float block = 0.0f;
  for (; j < end; ++j) block += x[j] * x[j];
  for (int64_t l = 0; l < kLanes; ++l) block += lane[l];
  return block;
}

// Σ x[0, n) in a fixed order: blocks of kSumBlock elements (block_sum), each added into a
// double in block order. Vectorizable and accurate to ~1e-7 relative for any n.
inline double sum_floats(const float* x, int64_t n) {
  double total = 0.0;
  for (int64_t start = 0; start < n; start += kSumBlock)
    total += static_cast<double>(block_sum(x, start, std::min(start + kSumBlock, n)));
  return total;
}

// Σ x[j]² over [0, n), in the same order as sum_floats.
inline double sum_squares_floats(const float* x, int64_t n) {
  double total = 0.0;
  for (int64_t start = 0; start < n; start += kSumBlock)
    total += static_cast<double>(block_sum_squares(x, start, std::min(start + kSumBlock, n)));
  return total;
}

// Σ a[j]·b[j] over [0, n), in the same order as sum_floats.
inline double dot_floats(const float* a, const float* b, int64_t n) {
  double total = 0.0;
  for (int64_t start = 0; start < n; start += kSumBlock) {
    const int64_t end = std::min(start + kSumBlock, n);
    float lane[kLanes] = {};
    int64_t j = start;
    for (; j + kLanes <= end; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) lane[l] += a[j + l] * b[j + l];
    float block = 0.0f;
    for (; j < end; ++j) block += a[j] * b[j];
    for (int64_t l = 0; l < kLanes; ++l) block += lane[l];
    total += static_cast<double>(block);
  }
  return total;
}

// max x[0, n) for n >= 1; -inf for n = 0. A max does not depend on the order.
inline float max_floats(const float* x, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float lane[kLanes] = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  float best = kNegInf;
  for (; j < n; ++j) best = x[j] > best ? x[j] : best;
  for (int64_t l = 0; l < kLanes; ++l) best = lane[l] > best ? lane[l] : best;
  return best;
}

}  // namespace axonn::cpu
