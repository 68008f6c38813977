#include "layout/alpha_beta_fit.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/number_text.hpp"

namespace axonn {

AlphaBetaFit fit_alpha_beta(CollectiveKind kind, LinkTier tier, int ranks, const std::vector<CollectiveSample>& samples,
                            double max_residual) {
  const std::string what = std::string("the ") + collective_name(kind) + " fit over " + link_tier_name(tier) +
                           " links (groups of " + std::to_string(ranks) + ")";
  const std::string advice =
      "; measure again without --quick (more sizes and repetitions) on an allocation nothing else runs on"
      " (other jobs on its nodes or links bend the times), or, if the figures look right, accept a looser fit"
      " with --max-residual";
  const double steps = ring_steps(kind, ranks);
  const double factor = bus_factor(kind, ranks);
  if (steps <= 0 || factor <= 0)
    throw CalibrationError(what + " has nothing to fit: " + collective_name(kind) + " on " + std::to_string(ranks) +
                           " rank(s) moves no bytes; a tier needs groups of at least 2 ranks");
  std::set<double> sizes;
  for (const CollectiveSample& s : samples) {
    if (!(s.seconds > 0) || !std::isfinite(s.seconds) || !(s.bytes > 0))
      throw CalibrationError(what + " got a sample of " + format_number("%.0f", s.bytes) + " bytes in " +
                             format_number("%g", s.seconds) + " s; every sample needs a positive size and time" +
                             advice);
    sizes.insert(s.bytes);
  }
  if (sizes.size() < 2)
    throw CalibrationError(what + " needs at least two message sizes, got " + std::to_string(sizes.size()) + advice);

  // time = u + b' * x with x = size * bus_factor / x_scale in (0, 1] (so the 2x2 normal
  // equations stay well conditioned), weights 1/time^2; then alpha = u / ring_steps and
  // beta = 1 / b with b = b' / x_scale, seconds per bus byte.
  double x_scale = 0;
  for (const CollectiveSample& s : samples) x_scale = std::max(x_scale, s.bytes * factor);
  double sw = 0, sx = 0, sxx = 0, st = 0, sxt = 0;
  for (const CollectiveSample& s : samples) {
    const double w = 1.0 / (s.seconds * s.seconds), x = s.bytes * factor / x_scale;
    sw += w, sx += w * x, sxx += w * x * x, st += w * s.seconds, sxt += w * x * s.seconds;
  }
  const double det = sw * sxx - sx * sx;
  double u = (st * sxx - sx * sxt) / det;
  double b = (sw * sxt - sx * st) / det / x_scale;  // seconds per bus byte
  // A latency is never negative. When the free line's is (the small sizes ran faster than
  // the line through the large ones allows: noise of a loaded machine, or a faster protocol
  // for small messages), the best line with alpha >= 0 has alpha = 0, since the weighted
  // squares are convex in (u, b): the line through the origin.
  if (std::isfinite(u) && u < 0 && sxx > 0) {
    u = 0;
    b = sxt / sxx / x_scale;
  }
  AlphaBetaFit fit;
  fit.latency_s = u / steps;
  fit.bandwidth_bytes_per_s = 1.0 / b;
  double squares = 0;
  for (const CollectiveSample& s : samples) {
    const double predicted = u + b * s.bytes * factor;
    squares += (s.seconds - predicted) * (s.seconds - predicted) / (s.seconds * s.seconds);
  }
  fit.residual = std::sqrt(squares / static_cast<double>(samples.size()));

  const std::string found = " (alpha " + format_number("%.3g", fit.latency_s * 1e6) + " us, beta " +
                            format_number("%.3g", fit.bandwidth_bytes_per_s / 1e9) + " GB/s, residual " +
                            format_number("%.3f", fit.residual) + ")";
  if (!std::isfinite(det) || det <= 0 || !std::isfinite(u) || !std::isfinite(b))
    throw CalibrationError(what + " did not converge: its least-squares system is singular" + advice);
  if (!(b > 0))
    throw CalibrationError(what + " did not converge: beta (bandwidth) came out " +
                           (b < 0 ? std::string("negative") : std::string("infinite")) + found +
                           ": the times do not grow with the message size" + advice);
  if (!(fit.residual <= max_residual))
    throw CalibrationError(what + " did not converge: its residual " + format_number("%.3f", fit.residual) +
                           " is above the bound " + format_number("%.3f", max_residual) + found +
                           ": one alpha and one beta do not describe these times" + advice);
  return fit;
}

PiecewiseFit fit_piecewise(CollectiveKind kind, LinkTier tier, int ranks, const std::vector<CollectiveSample>& samples,
                           double small_max_bytes, double max_residual) {
  std::vector<CollectiveSample> small, large;
  for (const CollectiveSample& s : samples) (s.bytes <= small_max_bytes ? small : large).push_back(s);
  auto distinct_sizes = [](const std::vector<CollectiveSample>& side) {
    std::set<double> sizes;
    for (const CollectiveSample& s : side) sizes.insert(s.bytes);
    return sizes.size();
  };
  PiecewiseFit out;
  const auto one_line = [&] {
    out.fit = fit_alpha_beta(kind, tier, ranks, samples, max_residual);
    out.residual = out.fit.residual;
    return out;
  };
  if (small_max_bytes <= 0 || distinct_sizes(small) < 2 || distinct_sizes(large) < 2) return one_line();
  try {
    out.fit = fit_alpha_beta(kind, tier, ranks, large, max_residual);
    out.small = fit_alpha_beta(kind, tier, ranks, small, max_residual);
  } catch (const CalibrationError&) {
    // A side too few or too noisy for a line of its own (its times not growing with the
    // size, as a side whose time is all latency can come out): one line over all, which
    // has the most sizes to find the slope, and which may refuse in turn.
    out.small.reset();
    return one_line();
  }
  out.small_max_bytes = small_max_bytes;
  const double n_small = static_cast<double>(small.size()), n_large = static_cast<double>(large.size());
  out.residual = std::sqrt((out.small->residual * out.small->residual * n_small +
                            out.fit.residual * out.fit.residual * n_large) /
                           (n_small + n_large));
  return out;
}

}  // namespace axonn
