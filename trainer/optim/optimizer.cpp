#include "trainer/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "trainer/model/parameters.hpp"

namespace axonn {

Optimizer::Optimizer(Backend& backend, CommGrid& grid, ParameterStore& params, GradientSync& sync,
                     const TrainingConfig& training)
    : backend_(backend),
      grid_(grid),
      params_(params),
      sync_(sync),
      training_(training),
      counts_loss_(grid.coords().x == 0 && grid.coords().y == 0),
      stats_(backend, 4) {
  // A shard enters the norm on exactly one of its copies: the one at coordinate 0 of every
  // axis that replicates it. Adjacent shards merge into one range.
  for (const auto& slot : params.layout().slots) {
    const auto replicas = replica_axes(slot.spec);
    const bool mine = std::all_of(replicas.begin(), replicas.end(), [&](Axis a) { return grid.coords()[a] == 0; });
    if (!mine) continue;
    if (!norm_runs_.empty() && norm_runs_.back().offset + norm_runs_.back().count == slot.offset)
      norm_runs_.back().count += slot.count;
    else
      norm_runs_.push_back({slot.offset, slot.count});
  }
}

StepReport Optimizer::step(int64_t step, double lr, const float* loss_sum, double tokens, bool stop_requested) {
  const ParameterLayout& layout = params_.layout();
  float* grads = params_.grads();
  sync_.finish();

  const float host[4] = {0.0f, counts_loss_ ? static_cast<float>(tokens) : 0.0f, 0.0f, stop_requested ? 1.0f : 0.0f};
  backend_.copy_to_device(stats_.data(), host, sizeof host);
  if (counts_loss_) backend_.copy(stats_.data(), loss_sum, sizeof(float));
  for (const Run& r : norm_runs_) backend_.sum_squares(stats_.data() + 2, grads + r.offset, r.count);
  grid_.world().all_reduce(stats_.data(), 4, ElementType::float32);
  // On NCCL the all-reduce is queued: wait for it under the communicator's timeout, then the
  // copy on the compute stream (ordered after it) reads the totals. Nothing to wait on Gloo.
  grid_.world().synchronize();
  const std::vector<float> totals = stats_.download();

  StepReport report;
  report.tokens = totals[1];
  report.loss = totals[1] > 0 ? totals[0] / totals[1] : 0.0;
  report.grad_norm = std::sqrt(static_cast<double>(totals[2]));
  report.stop = totals[3] > 0.0f;
  if (training_.grad_clip > 0) report.clip_scale = std::min(1.0, training_.grad_clip / (report.grad_norm + 1e-6));

  AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(training_.beta1);
  s.beta2 = static_cast<float>(training_.beta2);
  s.eps = static_cast<float>(training_.eps);
  s.weight_decay = static_cast<float>(training_.weight_decay);
  s.t = step + 1;
  s.grad_scale = static_cast<float>(report.clip_scale);
  float* p = params_.params();
  backend_.adamw(p, grads, params_.adam_m(), params_.adam_v(), layout.decayed, s, true);
  const int64_t rest = layout.total - layout.decayed;
  backend_.adamw(p + layout.decayed, grads + layout.decayed, params_.adam_m() + layout.decayed,
                 params_.adam_v() + layout.decayed, rest, s, false);
  return report;
}

}  // namespace axonn
