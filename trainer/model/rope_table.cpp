#include "trainer/model/rope_table.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace axonn {
namespace {

[[noreturn]] void reject(const std::string& what) { throw std::invalid_argument("rope table: " + what); }

void check_scaling(const RopeScaling& s) {
  if (!(s.factor > 0.0)) reject("scaling factor = " + std::to_string(s.factor) + " must be positive");
  if (!(s.high_freq_factor > s.low_freq_factor))
    reject("scaling high_freq_factor = " + std::to_string(s.high_freq_factor) +
           " must exceed low_freq_factor = " + std::to_string(s.low_freq_factor));
  if (s.original_positions <= 0)
    reject("scaling original_positions = " + std::to_string(s.original_positions) + " must be positive");
}

// Llama 3.1's rule for one frequency (RopeScaling's comment).
double scaled(double inv_freq, const RopeScaling& s) {
  const double original = static_cast<double>(s.original_positions);
  const double wavelen = 2.0 * std::numbers::pi / inv_freq;
  if (wavelen < original / s.high_freq_factor) return inv_freq;
  if (wavelen > original / s.low_freq_factor) return inv_freq / s.factor;
  const double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

}  // namespace

std::vector<double> rope_inv_freq(int64_t d, double theta, const RopeScaling* scaling) {
  if (d <= 0 || d % 2 != 0) reject("head size d = " + std::to_string(d) + " must be positive and even");
  if (!(theta > 0.0)) reject("theta = " + std::to_string(theta) + " must be positive");
  if (scaling != nullptr) check_scaling(*scaling);
  std::vector<double> inv_freq(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) {
    const double f = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    inv_freq[static_cast<size_t>(i)] = scaling != nullptr ? scaled(f, *scaling) : f;
  }
  return inv_freq;
}

std::vector<float> rope_cos_sin(int64_t T, int64_t d, double theta, const RopeScaling* scaling) {
  if (T < 0) reject("T = " + std::to_string(T) + " must not be negative");
  const std::vector<double> inv_freq = rope_inv_freq(d, theta, scaling);
  const int64_t half = d / 2;
  std::vector<float> table(static_cast<size_t>(T * half * 2));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * inv_freq[static_cast<size_t>(i)];
      const auto at = static_cast<size_t>((t * half + i) * 2);
      table[at] = static_cast<float>(std::cos(angle));
      table[at + 1] = static_cast<float>(std::sin(angle));
    }
  return table;
}

}  // namespace axonn
