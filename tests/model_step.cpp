#include "model_step.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <map>
#include <string>
#include <utility>
#include <cmath>
#include <mutex>

#include "comm/comm_grid.hpp"
#include "layout/layout_volume.hpp"
#include "thread_exchange.hpp"
#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/optim/optimizer.hpp"

namespace axonn::test {

int32_t token_at(int64_t s, int64_t t, int vocab) {
  return static_cast<int32_t>((s * 131 + t * 31 + (s * t) % 7) % vocab);
}

int64_t global_index(const std::vector<int64_t>& shape, const Rect& rect, int64_t i) {
  int64_t index = 0, rest = i;
  std::vector<int64_t> at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    at[d] = rest % rect.count[d];
    rest /= rect.count[d];
  }
  for (size_t d = 0; d < shape.size(); ++d) index = index * shape[d] + rect.offset[d] + at[d];
  return index;
}

std::unique_ptr<Backend> one_thread_cpu_backend() { return std::make_unique<CpuBackend>(1); }

namespace {

// Bytes of the (axis, kind) entries that vary with the routing (StepVolume::varies), summed
// over the ranks: the check a rank cannot make alone. Guarded by the caller's mutex.
using VariedBytes = std::map<std::pair<int, int>, int64_t>;

// This rank's counted calls and bytes against `steps` times the layout model's; the bytes of
// an entry that varies with the routing go into `varied` instead (under `mu`).
void expect_counted(const CommCounters& counted, const StepVolume& predicted, int64_t steps, const std::string& where,
                    VariedBytes& varied, std::mutex& mu) {
  for (int a = 0; a < kCommAxisCount; ++a)
    for (int k = 0; k < kCollectiveKindCount; ++k) {
      const auto axis = static_cast<CommAxis>(a);
      const auto kind = static_cast<CollectiveKind>(k);
      const CollectiveCount& got = counted[static_cast<size_t>(a)][static_cast<size_t>(k)];
      const std::string what = where + " " + comm_axis_name(axis) + " " + collective_name(kind);
      EXPECT_EQ(got.calls, steps * predicted.at(axis, kind).calls) << what;
      if (!predicted.varies(axis, kind)) {
        EXPECT_EQ(got.bytes, steps * predicted.at(axis, kind).bytes) << what;
        continue;
      }
      std::lock_guard lock(mu);
      varied[{a, k}] += got.bytes;
    }
}

// The varying entries' sums over the world against world x steps x the prediction.
void expect_varied_sums(const VariedBytes& varied, const StepVolume& predicted, int64_t steps, const Layout& layout) {
  for (const auto& [entry, bytes] : varied) {
    const auto axis = static_cast<CommAxis>(entry.first);
    const auto kind = static_cast<CollectiveKind>(entry.second);
    EXPECT_EQ(bytes, steps * layout.world() * predicted.at(axis, kind).bytes)
        << format_layout(layout) << " " << comm_axis_name(axis) << " " << collective_name(kind)
        << ", summed over the ranks";
  }
}

}  // namespace

StepResult run_step(const ModelShape& model, const Layout& layout, int global_batch, int micro_batch, bool overlap,
                    const RankSetup& setup) {
  const int64_t T = model.sequence;
  StepResult result;
  std::mutex mu;
  StepVolume predicted;  // every rank's the same
  VariedBytes varied;
  run_ranks(layout.world(), [&](int rank, Exchange& exchange) {
    const std::unique_ptr<Backend> backend_owner = setup.make_backend();
    Backend& backend = *backend_owner;
    CommGrid grid(exchange, layout, std::chrono::seconds(20), true, setup.comm);
    if (setup.compute_stream) grid.order_with_compute(setup.compute_stream(backend));
    ParameterStore params(backend, model, layout, grid.coords());
    params.initialize(1234);
    const BatchSplit split = batch_split(model, {global_batch, micro_batch, ElementType::float32}, layout);
    Gpt gpt(backend, grid, model, split.micro_batch, params, overlap, setup.recompute, setup.tp_chunks);
    TrainingConfig training;
    training.lr = 0;
    training.grad_clip = 0;
    GradientSync sync(grid, params, model.layers, overlap);
    Optimizer optimizer(backend, grid, params, sync, training);

    const int64_t j = int64_t{grid.coords().data} * layout.z + grid.coords().z;
    DeviceBuffer<float> loss_sum(backend, 1);
    backend.memset_zero(loss_sum.data(), sizeof(float));
    params.zero_grads();
    for (int i = 0; i < split.accumulation; ++i) {
      std::vector<int32_t> in(static_cast<size_t>(split.tokens)), out(in.size());
      for (int s = 0; s < split.micro_batch; ++s)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t seq = j * split.sequences_per_rank + int64_t{i} * split.micro_batch + s;
          in[static_cast<size_t>(s * T + t)] = token_at(seq, t, model.vocab);
          out[static_cast<size_t>(s * T + t)] = token_at(seq, t + 1, model.vocab);
        }
      DeviceBuffer<int32_t> tokens(backend, in), targets(backend, out);
      gpt.forward_backward(tokens.data(), targets.data(), 1.0f / static_cast<float>(global_batch * T), loss_sum.data(),
                           i + 1 == split.accumulation ? &sync : nullptr);
    }
    const StepReport report =
        optimizer.step(0, 0.0, loss_sum.data(), static_cast<double>(split.accumulation * split.tokens), false);

    // The bytes this rank moved, per axis and collective kind, are the layout model's (NCCL
    // counts a collective once it has seen it finish: after synchronize).
    grid.synchronize();
    ChooserInput input;
    input.model = model;
    // Activations and the GEMMs' weights move in the backend's activation type; gradients
    // and statistics in float32 whatever it is.
    input.batch = {global_batch, micro_batch, backend.activation_type(), setup.tp_chunks};
    input.recompute = setup.recompute;
    input.overlap_comm = overlap;
    const StepVolume step_volume = predict_step_volume(input, layout);
    {
      std::lock_guard lock(mu);
      predicted = step_volume;
    }
    expect_counted(grid.counters(), step_volume, 1, format_layout(layout) + " rank " + std::to_string(rank), varied,
                   mu);

    std::vector<float> grads(static_cast<size_t>(params.size()));
    backend.copy_to_host(grads.data(), params.grads(), grads.size() * sizeof(float));
    std::lock_guard lock(mu);
    result.loss = report.loss;
    result.grad_norm = report.grad_norm;
    for (const auto& slot : params.layout().slots) {
      auto& full = result.grads[slot.spec.name];
      if (full.empty()) full.assign(static_cast<size_t>(element_count(slot.spec.shape)), NAN);
      const float* g = grads.data() + slot.offset;
      for (int64_t i = 0; i < slot.count; ++i) {
        float& dst = full[static_cast<size_t>(global_index(slot.spec.shape, slot.rect, i))];
        if (!std::isnan(dst) && dst != g[i])
          ADD_FAILURE() << format_layout(layout) << " rank " << rank << ": replicas of " << slot.spec.name
                        << " disagree at " << i << ": " << dst << " vs " << g[i];
        dst = g[i];
      }
    }
  });
  expect_varied_sums(varied, predicted, 1, layout);
  return result;
}

TrainResult run_steps(const ModelShape& model, const Layout& layout, int global_batch, int micro_batch, int steps,
                      double grad_clip, bool overlap, const RankSetup& setup) {
  const int64_t T = model.sequence;
  TrainResult result;
  std::mutex mu;
  StepVolume predicted;  // every rank's the same
  VariedBytes varied;
  std::vector<std::pair<std::vector<double>, std::vector<double>>> rank_losses(static_cast<size_t>(layout.world()));
  run_ranks(layout.world(), [&](int rank, Exchange& exchange) {
    const std::unique_ptr<Backend> backend_owner = setup.make_backend();
    Backend& backend = *backend_owner;
    CommGrid grid(exchange, layout, std::chrono::seconds(20), true, setup.comm);
    if (setup.compute_stream) grid.order_with_compute(setup.compute_stream(backend));
    ParameterStore params(backend, model, layout, grid.coords(), setup.shard_optimizer);
    params.initialize(1234);
    const BatchSplit split = batch_split(model, {global_batch, micro_batch, ElementType::float32}, layout);
    Gpt gpt(backend, grid, model, split.micro_batch, params, overlap, setup.recompute, setup.tp_chunks);
    TrainingConfig training;
    training.lr = 1e-2;
    training.weight_decay = 0.1;
    training.grad_clip = grad_clip;
    GradientSync sync(grid, params, model.layers, overlap);
    Optimizer optimizer(backend, grid, params, sync, training);
    grid.synchronize();
    grid.reset_counters();

    const int64_t j = int64_t{grid.coords().data} * layout.z + grid.coords().z;
    DeviceBuffer<float> loss_sum(backend, 1);
    std::vector<double> losses, norms;
    for (int step = 0; step < steps; ++step) {
      backend.memset_zero(loss_sum.data(), sizeof(float));
      params.zero_grads();
      for (int i = 0; i < split.accumulation; ++i) {
        std::vector<int32_t> in(static_cast<size_t>(split.tokens)), out(in.size());
        for (int s = 0; s < split.micro_batch; ++s)
          for (int64_t t = 0; t < T; ++t) {
            const int64_t seq =
                int64_t{step} * global_batch + j * split.sequences_per_rank + int64_t{i} * split.micro_batch + s;
            in[static_cast<size_t>(s * T + t)] = token_at(seq, t, model.vocab);
            out[static_cast<size_t>(s * T + t)] = token_at(seq, t + 1, model.vocab);
          }
        DeviceBuffer<int32_t> tokens(backend, in), targets(backend, out);
        gpt.forward_backward(tokens.data(), targets.data(), 1.0f / static_cast<float>(global_batch * T),
                             loss_sum.data(), i + 1 == split.accumulation ? &sync : nullptr);
      }
      const StepReport report = optimizer.step(step, training.lr, loss_sum.data(),
                                               static_cast<double>(split.accumulation * split.tokens), false);
      losses.push_back(report.loss);
      norms.push_back(report.grad_norm);
    }

    grid.synchronize();
    ChooserInput input;
    input.model = model;
    input.batch = {global_batch, micro_batch, backend.activation_type(), setup.tp_chunks};
    input.overlap_comm = overlap;
    const StepVolume step_volume = predict_step_volume(input, layout, {setup.recompute, setup.shard_optimizer});
    {
      std::lock_guard lock(mu);
      predicted = step_volume;
    }
    expect_counted(grid.counters(), step_volume, steps, format_layout(layout) + " rank " + std::to_string(rank), varied,
                   mu);

    // The state as a save writes it: under a sharded master the weight buckets' float32
    // parameters are the master pieces (the bf16 copy is only the GEMMs').
    const size_t n = static_cast<size_t>(params.size()), state = static_cast<size_t>(params.state_size());
    const size_t first = params.master_sharded() ? static_cast<size_t>(params.layout().sharded) : 0;
    std::vector<float> host_params(n), host_m(state), host_v(state), host_master(params.master_size());
    backend.copy_to_host(host_params.data() + first, params.params_at(static_cast<int64_t>(first)),
                         (n - first) * sizeof(float));
    backend.copy_to_host(host_m.data(), params.adam_m(), state * sizeof(float));
    backend.copy_to_host(host_v.data(), params.adam_v(), state * sizeof(float));
    backend.copy_to_host(host_master.data(), params.master(), host_master.size() * sizeof(float));
    rank_losses[static_cast<size_t>(rank)] = {losses, norms};
    std::lock_guard lock(mu);
    for (const StateSlice& slice : state_slices(params.layout(), params.state_runs(), params.master_sharded())) {
      const std::vector<float>& src = slice.buffer == StateBuffer::params   ? host_params
                                      : slice.buffer == StateBuffer::adam_m ? host_m
                                      : slice.buffer == StateBuffer::adam_v ? host_v
                                                                            : host_master;
      const std::vector<int64_t>& shape = slice.slot->spec.shape;
      auto& full = result.state[slice.name];
      if (full.empty()) full.assign(static_cast<size_t>(element_count(shape)), NAN);
      for (int64_t i = 0; i < element_count(slice.rect); ++i) {
        const float v = src[static_cast<size_t>(slice.offset + i)];
        float& dst = full[static_cast<size_t>(global_index(shape, slice.rect, i))];
        if (!std::isnan(dst) && std::bit_cast<uint32_t>(dst) != std::bit_cast<uint32_t>(v))
          ADD_FAILURE() << format_layout(layout) << " rank " << rank << ": replicas of " << slice.name
                        << " disagree at " << i << ": " << dst << " vs " << v;
        dst = v;
      }
    }
  });
  // Every rank reports the world all-reduce's loss and norm: the same bits.
  result.losses = rank_losses[0].first;
  result.grad_norms = rank_losses[0].second;
  for (size_t r = 1; r < rank_losses.size(); ++r) {
    EXPECT_EQ(rank_losses[r].first, result.losses) << format_layout(layout) << " rank " << r;
    EXPECT_EQ(rank_losses[r].second, result.grad_norms) << format_layout(layout) << " rank " << r;
  }
  for (const auto& [name, values] : result.state)
    for (size_t i = 0; i < values.size(); ++i)
      if (std::isnan(values[i])) {
        ADD_FAILURE() << format_layout(layout) << ": " << name << "[" << i << "] is held by no rank";
        break;
      }
  expect_varied_sums(varied, predicted, steps, layout);
  return result;
}

StateDifference state_difference(const TrainResult& got, const TrainResult& want) {
  StateDifference d;
  for (const auto& [name, w] : want.state) {
    const auto it = got.state.find(name);
    if (it == got.state.end() || it->second.size() != w.size()) return {INFINITY, name + " (missing or resized)"};
    for (size_t i = 0; i < w.size(); ++i) {
      const float diff = std::fabs(it->second[i] - w[i]);
      if (diff > d.largest || std::isnan(diff))
        d = {std::isnan(diff) ? INFINITY : diff, name + "[" + std::to_string(i) + "]"};
    }
  }
  return d;
}

void expect_same_bits(const StepResult& got, const StepResult& want, const std::string& what) {
  EXPECT_EQ(std::bit_cast<uint64_t>(got.loss), std::bit_cast<uint64_t>(want.loss)) << what;
  EXPECT_EQ(std::bit_cast<uint64_t>(got.grad_norm), std::bit_cast<uint64_t>(want.grad_norm)) << what;
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (const auto& [name, w] : want.grads) {
    const auto& g = got.grads.at(name);
    ASSERT_EQ(g.size(), w.size()) << what << " " << name;
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(g[i]), std::bit_cast<uint32_t>(w[i]))
          << what << " " << name << "[" << i << "]: " << g[i] << " vs " << w[i];
  }
}

}  // namespace axonn::test
