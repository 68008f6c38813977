#include "layout/layout_volume.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "layout/layout_memory.hpp"
#include "layout/model_plan.hpp"

namespace axonn {

void StepVolume::add(CommAxis a, CollectiveKind k, int64_t count, int64_t bytes_each, bool overlapped) {
  if (group_size[static_cast<size_t>(a)] <= 1 || count == 0) return;
  auto& v = table[static_cast<size_t>(a)][static_cast<size_t>(k)];
  v.calls += count;
  v.bytes += count * bytes_each;
  calls.push_back({a, k, count, bytes_each, overlapped});
}

int64_t StepVolume::bytes(CommAxis a) const {
  int64_t total = 0;
  for (const auto& v : table[static_cast<size_t>(a)]) total += v.bytes;
  return total;
}

double StepVolume::wire_bytes(CommAxis a) const {
  double total = 0;
  for (int k = 0; k < kCollectiveKindCount; ++k)
    total += bus_factor(static_cast<CollectiveKind>(k), group_size[static_cast<size_t>(a)]) *
             static_cast<double>(table[static_cast<size_t>(a)][static_cast<size_t>(k)].bytes);
  return total;
}

CollectiveTypes collective_types(ElementType dtype) {
  // Gradients stay float32 beside the float32 master weights and AdamW state; statistics
  // (sums over rows) need float32's range.
  // Sharded, the weight buckets' float32 master weights are sharded too in a bfloat16 job, so
  // their all-gather moves the GEMMs' copy; the small tensors stay float32 everywhere.
  return {dtype, dtype, ElementType::float32, ElementType::float32, dtype, ElementType::float32};
}

std::string describe_collective_types(ElementType dtype) {
  const CollectiveTypes t = collective_types(dtype);
  const std::pair<const char*, ElementType> parts[] = {
      {"weights", t.weights},       {"activations", t.activations},         {"gradients", t.gradients},
      {"statistics", t.statistics}, {"updated weights", t.updated_weights}, {"updated small tensors", t.updated_small}};
  // The parts of one type together, the types in the order they first appear.
  std::vector<std::pair<ElementType, std::vector<const char*>>> groups;
  for (const auto& part : parts) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == part.second; });
    if (it == groups.end()) it = groups.insert(groups.end(), {part.second, {}});
    it->second.push_back(part.first);
  }
  std::string s;
  for (const auto& [type, names] : groups) {
    if (!s.empty()) s.append(", ");
    for (size_t i = 0; i < names.size(); ++i)
      s.append(i == 0 ? "" : i + 1 == names.size() ? " and " : ", ").append(names[i]);
    s.append(" ")
        .append(std::to_string(element_size(type)))
        .append(" bytes (")
        .append(element_type_name(type))
        .append(")");
  }
  return s;
}

StepVolume predict_step_volume(const ChooserInput& input, const Layout& g) {
  return predict_step_volume(input, g, resolved_modes(input, g));
}

StepVolume predict_step_volume(const ChooserInput& input, const Layout& g, MemoryModes modes) {
  const Recompute mode = modes.recompute;
  const ModelShape& model = input.model;
  const BatchSplit split = batch_split(model, input.batch, g);
  const CollectiveTypes types = collective_types(input.batch.dtype);
  const int64_t w = element_size(types.weights);
  const int64_t updated = element_size(types.updated_weights);
  const int64_t e = element_size(types.activations);
  const int64_t grad = element_size(types.gradients);
  const int64_t stat = element_size(types.statistics);
  const int64_t m = split.tokens;
  const int64_t A = split.accumulation;
  const int64_t C = model.hidden;

  StepVolume v;
  for (int a = 0; a < kCommAxisCount; ++a) v.group_size[static_cast<size_t>(a)] = g.comm_size(static_cast<CommAxis>(a));

  using K = CollectiveKind;
  const bool overlap = input.overlap_comm;  // CollectiveCalls::overlapped
  for (const auto& lin : linear_shapes(model)) {
    const int64_t k_local = lin.k / g.size(lin.k_axis);
    const int64_t n_local = lin.n / g.size(lin.n_axis());
    const int64_t calls = A * lin.count;
    v.add(CommAxis::z, K::all_gather, calls, k_local * n_local * w, overlap);
    v.add(comm_axis(lin.k_axis), K::all_reduce, calls, m * n_local * e);
    v.add(comm_axis(lin.n_axis()), K::all_reduce, calls, m * k_local * e);
    v.add(CommAxis::z, K::reduce_scatter, calls, k_local * n_local * grad, overlap);
  }
  v.add(CommAxis::y, K::all_reduce, A, m * (C / g.x) * e);  // token embedding
  const int64_t layer_norms = 2 * int64_t{model.layers} + 1;
  v.add(CommAxis::x, K::all_reduce, A * layer_norms * 2, m * stat);
  v.add(CommAxis::x, K::all_reduce, A * layer_norms, m * 2 * stat);
  v.add(CommAxis::y, K::all_gather, A, m * g.y * stat);
  v.add(CommAxis::y, K::all_reduce, A, m * 2 * stat);

  // The MoE blocks (trainer/model/moe_layer.hpp), per micro-batch: forward, the router's
  // logits summed over x, the routing statistics summed over z and data, each expert's fc
  // and proj gathered over z, the experts' rows summed over x after fc and over y after proj;
  // backward, the gates' gradient summed over x, the rows' gradients over x and y, each
  // expert's dW reduce-scattered over z. Block recomputation does not rerun them.
  const MoeShape moe = moe_shape(model, split);
  if (moe.layers > 0) {
    const int64_t calls = A * moe.layers, E = moe.experts;
    const int64_t hidden_local = 4 * C / g.y, c_local = C / g.x;
    const int64_t expert_block = c_local * hidden_local;  // fc [C/G_x, 4C/G_y], proj [4C/G_y, C/G_x]
    v.add(CommAxis::x, K::all_reduce, calls, m * E * stat);
    v.add(CommAxis::z, K::all_reduce, calls, moe_statistics(model) * stat);
    v.add(CommAxis::data, K::all_reduce, calls, moe_statistics(model) * stat);
    v.add(CommAxis::z, K::all_gather, calls * 2 * E, expert_block * w);
    v.add(CommAxis::x, K::all_reduce, calls * 2, moe.rows * hidden_local * e);
    v.add(CommAxis::y, K::all_reduce, calls * 2, moe.rows * c_local * e);
    v.add(CommAxis::x, K::all_reduce, calls, m * moe.top_k * stat);
    v.add(CommAxis::z, K::reduce_scatter, calls * 2 * E, expert_block * grad);
  }

  // The recomputed forwards (trainer/model/gpt.cpp, Gpt::recompute).
  const auto shapes = linear_shapes(model);  // qkv, attn.proj, mlp.fc, mlp.proj, then the head
  const int64_t rerun = A * recomputed_blocks(model, mode);
  if (mode == Recompute::attention) {
    const LinearShape& qkv = shapes[0];
    v.add(comm_axis(qkv.k_axis), K::all_reduce, rerun, m * (qkv.n / g.size(qkv.n_axis())) * e);
  } else if (mode == Recompute::block) {
    // Every block layer gathers its weight again; qkv, attn.proj and mlp.fc rerun their GEMMs
    // (mlp.proj's output is the next block's input, which is kept).
    // An MoE block's MLP is not rerun: of the recomputed blocks 0..L-2, the MLP layers rerun
    // in the dense ones.
    const size_t rerun_gemms = 3, first_mlp = 2;
    const int64_t dense_rerun = A * (recomputed_blocks(model, mode) - model.moe_blocks_before(model.layers - 1));
    for (size_t i = 0; i + 1 < shapes.size(); ++i) {
      const LinearShape& lin = shapes[i];
      const int64_t k_local = lin.k / g.size(lin.k_axis);
      const int64_t n_local = lin.n / g.size(lin.n_axis());
      const int64_t calls = i >= first_mlp ? dense_rerun : rerun;
      v.add(CommAxis::z, K::all_gather, calls, k_local * n_local * w, overlap);
      if (i < rerun_gemms) v.add(comm_axis(lin.k_axis), K::all_reduce, calls, m * n_local * e);
    }
    v.add(CommAxis::x, K::all_reduce, rerun * 2 * 2, m * stat);  // ln1 and ln2, two stages each
  }

  const GradientBuckets buckets = gradient_buckets(model, g);
  v.add(CommAxis::z, K::all_reduce, 1, buckets.small * grad);
  // Blocks 1..L-1, whose buckets go beside the backward, dense and MoE.
  const int64_t later_moe = model.moe_layers() - (model.is_moe_block(0) ? 1 : 0);
  const struct {
    int64_t dense, moe;
  } later{model.layers - 1 - later_moe, later_moe};
  // Over data in buckets (trainer/optim/gradient_sync.hpp): each block's four weight shards,
  // then the wte shard, then the small tensors; together every gradient once. All-reduced;
  // or, with the optimizer sharded, reduce-scattered (each bucket padded to G_data equal
  // pieces) and, after AdamW, the updated weights all-gathered. In a float32 job that is the
  // all-reduce's bytes in two halves (nccl-tests sizes: the reduce-scatter's input and the
  // all-gather's output are the bucket) and its time (the ring's (n-1)/n twice for its
  // 2(n-1)/n); in a bfloat16 job the weight buckets' all-gathers move the GEMMs' bf16 copy
  // (their float32 master weights are sharded too), half of that.
  if (shards_optimizer(g, modes.shard_optimizer)) {
    // Blocks L-1..1 overlapped, then block 0's, the wte's and the small tensors'.
    const struct {
      int64_t calls, count, weight_bytes;
      bool overlapped;
    } sharded[] = {{later.dense, buckets.block, updated, overlap},
                   {later.moe, buckets.moe_block, updated, overlap},
                   {1, buckets.of_block(model, 0), updated, false},
                   {1, buckets.wte, updated, false},
                   {1, buckets.small, static_cast<int64_t>(element_size(types.updated_small)), false}};
    for (const auto& b : sharded) {
      v.add(CommAxis::data, K::reduce_scatter, b.calls, padded_bucket(b.count, g.data) * grad, b.overlapped);
      v.add(CommAxis::data, K::all_gather, b.calls, padded_bucket(b.count, g.data) * b.weight_bytes, b.overlapped);
    }
  } else {
    v.add(CommAxis::data, K::all_reduce, later.dense, buckets.block * grad, overlap);
    v.add(CommAxis::data, K::all_reduce, later.moe, buckets.moe_block * grad, overlap);
    v.add(CommAxis::data, K::all_reduce, 1, buckets.of_block(model, 0) * grad);
    v.add(CommAxis::data, K::all_reduce, 1, buckets.wte * grad);
    v.add(CommAxis::data, K::all_reduce, 1, buckets.small * grad);
  }
  v.add(CommAxis::world, K::all_reduce, 1, 4 * stat);
  return v;
}

}  // namespace axonn
