#include "trainer/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "trainer/model/parameters.hpp"

namespace axonn {
namespace {
constexpr int kStatistics = 4;  // loss sum, tokens, squared norm, stop requests; then busy seconds per rank
}  // namespace

Optimizer::Optimizer(Backend& backend, CommGrid& grid, ParameterStore& params, GradientSync& sync,
                     const TrainingConfig& training)
    : backend_(backend),
      grid_(grid),
      params_(params),
      sync_(sync),
      training_(training),
      counts_loss_(grid.coords().x == 0 && grid.coords().y == 0),
      stats_(backend, static_cast<size_t>(kStatistics + grid.world().size())),
      overlap_(sync.overlaps()) {
  // A shard enters the norm on exactly one of its copies: the one at coordinate 0 of every
  // axis that replicates it; sharded, the data axis splits the summed gradient instead, and
  // each data rank adds its own pieces. Adjacent ranges merge into one.
  for (const auto& slot : params.layout().slots) {
    const auto replicas = replica_axes(slot.spec);
    const bool mine = std::all_of(replicas.begin(), replicas.end(), [&](Axis a) {
      return grid.layout().coordinate(grid.coords(), a) == 0 || (optimizer_pieces_over(a) && params.sharded());
    });
    if (!mine) continue;
    for (const StateRun& run : params.state_runs()) {
      const int64_t begin = std::max(slot.offset, run.offset);
      const int64_t end = std::min(slot.offset + slot.count, run.offset + run.count);
      if (begin >= end) continue;
      if (!norm_runs_.empty() && norm_runs_.back().offset + norm_runs_.back().count == begin)
        norm_runs_.back().count += end - begin;
      else
        norm_runs_.push_back({begin, end - begin});
    }
  }
}

void Optimizer::adamw(const AdamWStep& s, const StateRun& run) {
  // The decayed prefix (ParameterLayout::decayed) with weight decay, the rest without. The
  // float32 weights are the parameters, or (master_sharded) the master pieces of the weight
  // buckets, whose runs come first and are held at their state offsets.
  const int64_t count = run.count;
  const int64_t decayed = std::clamp(params_.layout().decayed - run.offset, int64_t{0}, count);
  const bool master = params_.master_sharded() && run.offset < params_.layout().sharded;
  float* p = master ? params_.master() + run.state_offset : params_.params_at(run.offset);
  float* g = params_.grads() + run.offset;
  float* m = params_.adam_m() + run.state_offset;
  float* v = params_.adam_v() + run.state_offset;
  if (decayed > 0) backend_.adamw(p, g, m, v, decayed, s, true);
  if (count > decayed) backend_.adamw(p + decayed, g + decayed, m + decayed, v + decayed, count - decayed, s, false);
  // The GEMMs' bf16 copy of this rank's piece, which the all-gather then spreads.
  if (master) backend_.convert(params_.weights() + run.offset, p, count);
}

Communicator::Ticket Optimizer::gather_weights(const ParamBucket& b) {
  Communicator& data = grid_.axis(CommAxis::data);
  const int64_t piece = b.piece(params_.layout().pieces);
  // The bf16 copy of a weight bucket under a sharded master, else the float32 parameters.
  const bool master = params_.master_sharded() && b.offset < params_.layout().sharded;
  const ActPtr bucket = master ? params_.weights() + b.offset : ActPtr(params_.params_at(b.offset));
  const ActPtr mine = bucket + data.rank() * piece;
  if (overlap_) return data.start_all_gather(mine.raw(), bucket.raw(), static_cast<size_t>(piece), bucket.type());
  data.all_gather(mine.raw(), bucket.raw(), static_cast<size_t>(piece), bucket.type());
  return 0;
}

StepReport Optimizer::step(int64_t step, double lr, const float* loss_sum, double tokens, bool stop_requested,
                           float busy_s) {
  float* grads = params_.grads();
  sync_.finish();

  // One all-reduce carries the step's sums and, as a sum with every other rank's slot 0, each
  // rank's busy time (an all-gather inside the all-reduce the step needs anyway).
  Communicator& world = grid_.world();
  std::vector<float> host(static_cast<size_t>(kStatistics + world.size()), 0.0f);
  host[1] = counts_loss_ ? static_cast<float>(tokens) : 0.0f;
  host[3] = stop_requested ? 1.0f : 0.0f;
  host[static_cast<size_t>(kStatistics + world.rank())] = busy_s;
  backend_.copy_to_device(stats_.data(), host.data(), host.size() * sizeof(float));
  if (counts_loss_) backend_.copy(stats_.data(), loss_sum, sizeof(float));
  for (const Run& r : norm_runs_) backend_.sum_squares(stats_.data() + 2, grads + r.offset, r.count);
  world.all_reduce(stats_.data(), host.size(), ElementType::float32);
  // On NCCL the all-reduce is queued: wait for it under the communicator's timeout, then the
  // copy on the compute stream (ordered after it) reads the totals. Nothing to wait on Gloo.
  grid_.world().synchronize();
  const std::vector<float> totals = stats_.download();

  StepReport report;
  report.tokens = totals[1];
  report.loss = totals[1] > 0 ? totals[0] / totals[1] : 0.0;
  report.grad_norm = std::sqrt(static_cast<double>(totals[2]));
  report.stop = totals[3] > 0.0f;
  report.rank_busy_s.assign(totals.begin() + kStatistics, totals.end());
  if (training_.grad_clip > 0) report.clip_scale = std::min(1.0, training_.grad_clip / (report.grad_norm + 1e-6));

  AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(training_.beta1);
  s.beta2 = static_cast<float>(training_.beta2);
  s.eps = static_cast<float>(training_.eps);
  s.weight_decay = static_cast<float>(training_.weight_decay);
  s.t = step + 1;
  s.grad_scale = static_cast<float>(report.clip_scale);
  // Sharded, the runs are the buckets' pieces, in bucket order: each bucket's all-gather
  // follows its AdamW (and, overlapped, runs beside the next bucket's).
  const std::vector<StateRun>& runs = params_.state_runs();
  Communicator::Ticket last = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    adamw(s, runs[i]);
    if (params_.sharded()) last = gather_weights(params_.layout().buckets[i]);
  }
  grid_.axis(CommAxis::data).finish(last);
  return report;
}

}  // namespace axonn
