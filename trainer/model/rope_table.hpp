#pragma once
// The cos/sin table Backend::rope_forward reads: for positions t < T and pairs i < d/2,
// θ_{t,i} = t·inv_freq_i with inv_freq_i = theta^(−2i/d) (Llama: theta 10000 for Llama 2,
// 500000 for Llama 3), optionally rescaled by Llama 3.1's rule for long contexts
// (layout_inputs.hpp, RopeScaling): with wavelen_i = 2π/inv_freq_i, a frequency whose
// wavelength is shorter than original_positions/high_freq_factor is kept, one longer than
// original_positions/low_freq_factor is divided by factor, and one between is blended:
//   smooth = (original_positions/wavelen − low_freq_factor)/(high_freq_factor − low_freq_factor),
//   inv_freq = (1 − smooth)·inv_freq/factor + smooth·inv_freq.
// Computed in double, rounded once to float. Pure: the same table on every rank and backend.
#include <cstdint>
#include <vector>

#include "layout/layout_inputs.hpp"

namespace axonn {

// inv_freq (d/2) = theta^(−2i/d), rescaled when scaling is not null. Throws
// std::invalid_argument naming the value for d odd or not positive, theta <= 0, or a scaling
// with factor <= 0, high_freq_factor <= low_freq_factor or original_positions <= 0.
std::vector<double> rope_inv_freq(int64_t d, double theta, const RopeScaling* scaling);

// cos_sin (T, d/2, 2) = [cos(t·inv_freq_i), sin(t·inv_freq_i)] in double, rounded to float.
// T >= 0; the rest as rope_inv_freq.
std::vector<float> rope_cos_sin(int64_t T, int64_t d, double theta, const RopeScaling* scaling);

}  // namespace axonn
