#pragma once
// The alpha-beta fit `axonn calibrate` makes of one collective kind on one link tier, in the
// cost model's own terms (collective.hpp), so that the model uses the fit exactly as fitted:
//   time = alpha * ring_steps(kind, n) + size * bus_factor(kind, n) / beta
// with size the nccl-tests size (all-reduce: its buffer; all-gather: its output;
// reduce-scatter: its input), alpha in seconds per message, beta in bytes per second.
//
// Least squares weighted by 1/time^2: it minimizes the relative error of every size, so a
// 4 KiB message (microseconds) counts as much as a 256 MiB one (a second); plain least
// squares would fit the large sizes only and leave alpha to their noise. Alpha is
// constrained to >= 0 (a free fit that goes negative becomes the line through the origin).
// The residual reported is the quantity minimized: RMS over the sizes of (measured - fit) /
// measured.
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "layout/collective.hpp"
#include "layout/layout_cost.hpp"

namespace axonn {

// A measurement the cost model cannot use: a fit that did not converge. Exit code 1.
class CalibrationError : public Error {
 public:
  explicit CalibrationError(const std::string& message) : Error(message, exit_code::failure) {}
};

struct CollectiveSample {
  double bytes = 0;    // nccl-tests size of one call
  double seconds = 0;  // its time (a median over repetitions)
};

struct AlphaBetaFit {
  double latency_s = 0;              // alpha
  double bandwidth_bytes_per_s = 0;  // beta
  double residual = 0;               // RMS of (measured - fit) / measured over the samples
  Link link() const { return {bandwidth_bytes_per_s, latency_s}; }
};

// The residual above which calibrate refuses a fit unless told otherwise (--max-residual):
// the line is then off the measured times by more than half of them on average, no better a
// description than a guess. Below it a fit still beats the site's guessed figures, which are
// off by 2-10x where nobody measured them. Real curves are not one line: noise of a shared
// machine is 5-20% per size, and protocols switch between sizes (Gloo's all-reduce takes a
// one-message path up to 64 KiB and a ring of pieces above, then Gloo's own ring,
// comm/gloo_sync.hpp; NCCL switches algorithm and protocol).
inline constexpr double kDefaultMaxResidual = 0.5;

// Fits `samples` of `kind` on groups of `ranks` (>= 2) over `tier`. Throws CalibrationError
// naming the collective, the tier and what to try when the fit does not converge: fewer than
// two distinct sizes or a non-positive or non-finite time, alpha not finite, beta not
// positive or not finite (time not growing with size), or a residual above max_residual.
AlphaBetaFit fit_alpha_beta(CollectiveKind kind, LinkTier tier, int ranks, const std::vector<CollectiveSample>& samples,
                            double max_residual = kDefaultMaxResidual);

// Where the communicator sends messages of up to small_max_bytes by another path
// (Communicator::small_path_bytes): the samples on each side fitted apart, each as
// fit_alpha_beta does (its residual within max_residual), when each side has two sizes or
// more and both lines converge; else one line over all of them (fit_alpha_beta, which may
// refuse).
struct PiecewiseFit {
  AlphaBetaFit fit;                   // the sizes above small_max_bytes, or every size
  std::optional<AlphaBetaFit> small;  // the sizes up to small_max_bytes
  double small_max_bytes = 0;         // 0 without `small`
  double residual = 0;                // RMS over every sample of its own line's relative error
};
PiecewiseFit fit_piecewise(CollectiveKind kind, LinkTier tier, int ranks, const std::vector<CollectiveSample>& samples,
                           double small_max_bytes, double max_residual = kDefaultMaxResidual);

}  // namespace axonn
