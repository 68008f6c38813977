#include "layout/layout_volume.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "layout/comm_overlap.hpp"
#include "layout/layout_memory.hpp"
#include "layout/model_plan.hpp"

namespace axonn {

void StepVolume::add(CommAxis a, CollectiveKind k, int64_t count, int64_t bytes_each, bool overlapped,
                     GemmShape beside) {
  if (group_size[static_cast<size_t>(a)] <= 1 || count == 0) return;
  auto& v = table[static_cast<size_t>(a)][static_cast<size_t>(k)];
  v.calls += count;
  v.bytes += count * bytes_each;
  calls.push_back({a, k, count, bytes_each, overlapped, beside});
}

void StepVolume::mark_varies(CommAxis a, CollectiveKind k) {
  if (group_size[static_cast<size_t>(a)] <= 1) return;
  varies_with_routing[static_cast<size_t>(a)][static_cast<size_t>(k)] = true;
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

namespace {

// An MoE block's collectives on the expert axis per micro-batch (P > 1; none at P = 1, where
// the group has one rank): forward, the routed row counts (E_l float32 per peer), the rows
// out (the whole send buffer, R rows) and the experts' outputs back (R_r rows); backward, the
// outputs' gradients out and the rows' gradients back. `returned` is R_r's prediction. Split
// over the y group (MoeShape::y_shares), a rank sends 1/G_y of each, and each y all-gather
// (an all-to-all over y) sends G_y copies of the share received: R_r rows after the rows go
// out, R after they come back.
struct ExpertCallBytes {
  int64_t counts = 0, sent = 0, returned = 0;        // bytes of one call each
  int64_t gathered_sent = 0, gathered_returned = 0;  // the y all-to-alls after each (y_shares > 1)
};
ExpertCallBytes expert_call_bytes(const MoeShape& moe, int64_t c_local, int64_t e, int64_t returned_rows) {
  const int64_t shares = moe.y_shares, row = c_local * e;
  ExpertCallBytes b{moe.experts * 4, moe.rows / shares * row, returned_rows / shares * row, 0, 0};
  if (shares > 1) {
    b.gathered_sent = returned_rows * row;
    b.gathered_returned = moe.rows * row;
  }
  return b;
}

// `calls` expert all-to-alls of `bytes` each, in MoeShape::rounds rounds (expert_exchange.hpp,
// plan_rounds): round i carries its local experts' share of the bytes, the last round what is
// left, so the rounds sum to the unpipelined bytes exactly. Every round but one runs beside
// the experts' GEMMs (overlapped): toward the experts all but the first (round i+1 moves while
// round i computes), back all but the last.
enum class Direction { to_experts, back };
void add_in_rounds(StepVolume& v, const MoeShape& moe, int64_t calls, int64_t bytes, Direction direction) {
  const int64_t n = decided_rounds(moe), local = moe.local_experts;
  const int64_t exposed = direction == Direction::to_experts ? 0 : n - 1;
  int64_t left = bytes;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t experts = (i + 1) * local / n - i * local / n;
    const int64_t share = i + 1 == n ? left : bytes * experts / local;
    v.add(CommAxis::expert, CollectiveKind::all_to_all, calls, share, i != exposed);
    left -= share;
  }
}

// The MoE blocks (trainer/model/moe_layer.hpp), per micro-batch: forward, the router's
// logits summed over x, the routing statistics summed over z and data, each local expert's fc
// and proj gathered over z, the rows exchanged over the expert axis (P > 1), the experts' rows
// summed over x after fc and over y after proj, the outputs returned; backward, the gates'
// gradient summed over x, the outputs' gradients exchanged, the rows' gradients summed over
// x and y and returned, each local expert's dW reduce-scattered over z. Block recomputation
// does not rerun them. The sums over x and y run once over all the rows this rank's experts
// received, R_r (MoeShape): predicted as `rows`, exact except dropless at P > 1, where those
// entries are marked as varying with the routing.
// A linear layer's all-reduces over the tensor axes, in training.tp_chunks calls of equal rows
// (bytes / chunks each) per micro-batch (trainer/model/sharded_linear.cpp). With overlap:
//   forward, Y over a: chunk i's beside chunk i+1's GEMM, the last one waited for;
//   backward, dX over b: chunk i's beside chunk i+1's dX GEMM, the last one's beside the
//     layer's dW GEMM (one chunk: AxoNN's OAR).
// `layer`: the layer's GEMM, m rows.
struct TensorAllReduces {
  StepVolume& v;
  int64_t chunks;
  bool overlap;

  void forward(CommAxis a, int64_t calls, int64_t bytes, GemmShape layer) const {
    const GemmShape chunk{layer.m / chunks, layer.k, layer.n};
    v.add(a, CollectiveKind::all_reduce, calls * (chunks - 1), bytes / chunks, overlap, chunk);
    v.add(a, CollectiveKind::all_reduce, calls, bytes / chunks);
  }
  void backward(CommAxis a, int64_t calls, int64_t bytes, GemmShape layer) const {
    const GemmShape chunk{layer.m / chunks, layer.k, layer.n};
    v.add(a, CollectiveKind::all_reduce, calls * (chunks - 1), bytes / chunks, overlap, chunk);
    v.add(a, CollectiveKind::all_reduce, calls, bytes / chunks, overlap, layer);
  }
};

void add_moe_blocks(StepVolume& v, const ChooserInput& input, const Layout& g, const BatchSplit& split, bool overlap) {
  const MoeShape moe = moe_shape(input.model, split, g);
  if (moe.layers == 0) return;
  using K = CollectiveKind;
  const CollectiveTypes types = collective_types(input.batch.dtype);
  const int64_t w = element_size(types.weights), e = element_size(types.activations);
  const int64_t grad = element_size(types.gradients), stat = element_size(types.statistics);
  const int64_t m = split.tokens, C = input.model.hidden;
  const int64_t calls = split.accumulation * moe.layers, E = moe.experts, local = moe.local_experts;
  // fc [C/G_x, its width / G_y] (F, or SwiGLU's 2F), proj [F/G_y, C/G_x]
  const int64_t hidden_local = input.model.ffn() / g.y, fc_local = input.model.fc_width() / g.y, c_local = C / g.x;
  const int64_t fc_block = c_local * fc_local, proj_block = c_local * hidden_local;
  const int64_t received = moe.rows;                    // R_r, exact or its mean
  const ExpertCallBytes exchange = expert_call_bytes(moe, c_local, e, received);
  v.add(CommAxis::x, K::all_reduce, calls, m * E * stat);
  v.add(CommAxis::z, K::all_reduce, calls, moe_statistics(input.model) * stat);
  v.add(CommAxis::data, K::all_reduce, calls, moe_statistics(input.model) * stat);
  v.add(CommAxis::z, K::all_gather, calls * local, fc_block * w);
  v.add(CommAxis::z, K::all_gather, calls * local, proj_block * w);
  if (moe.gathers) {
    // All-gather dispatch over the expert group (MoeShape::gathers): forward, every rank's
    // routing (k choices and k gates per token, float32) and tokens gathered, the outputs
    // reduce-scattered back; backward, the outputs' gradients gathered, the gates' and the
    // inputs' gradients reduce-scattered. Sizes: the gathered whole, P·m rows.
    const int64_t group_tokens = moe.expert_ranks * m;
    v.add(CommAxis::expert, K::all_gather, calls, group_tokens * 2 * moe.top_k * stat);
    v.add(CommAxis::expert, K::all_gather, calls * 2, group_tokens * c_local * e);       // tokens, outputs' gradients
    v.add(CommAxis::expert, K::reduce_scatter, calls * 2, group_tokens * c_local * e);   // outputs, inputs' gradients
    v.add(CommAxis::expert, K::reduce_scatter, calls, group_tokens * moe.top_k * stat);  // gates' gradients
  } else {
    v.add(CommAxis::expert, K::all_to_all, calls, exchange.counts);
    add_in_rounds(v, moe, calls * 2, exchange.sent, Direction::to_experts);  // rows, then their gradients
    add_in_rounds(v, moe, calls * 2, exchange.returned, Direction::back);    // outputs, then the rows' gradients
  }
  if (moe.y_shares > 1) {
    v.add(CommAxis::y, K::all_to_all, calls * 2, exchange.gathered_sent);
    v.add(CommAxis::y, K::all_to_all, calls * 2, exchange.gathered_returned);
  }
  // Forward: fc's output over x (R_r·f), proj's over y (R_r·c). Backward
  // (trainer/model/moe_layer.cpp): proj's input gradient over x beside proj's dW GEMMs
  // (R_r·h), fc's over y beside fc's (R_r·c).
  const GemmShape proj_dw{received, c_local, hidden_local}, fc_dw{received, c_local, fc_local};
  v.add(CommAxis::x, K::all_reduce, calls, received * fc_local * e);
  v.add(CommAxis::x, K::all_reduce, calls, received * hidden_local * e, overlap, proj_dw);
  v.add(CommAxis::y, K::all_reduce, calls, received * c_local * e);
  v.add(CommAxis::y, K::all_reduce, calls, received * c_local * e, overlap, fc_dw);
  v.add(CommAxis::x, K::all_reduce, calls, m * moe.top_k * stat);
  v.add(CommAxis::z, K::reduce_scatter, calls * local, fc_block * grad);
  v.add(CommAxis::z, K::reduce_scatter, calls * local, proj_block * grad);
  if (moe.rows_vary()) {
    v.mark_varies(CommAxis::x, K::all_reduce);
    v.mark_varies(CommAxis::y, K::all_reduce);
    if (!moe.gathers) v.mark_varies(CommAxis::expert, K::all_to_all);
  }
  if (moe.rows_vary() || moe.shares_vary()) {
    v.mark_varies(CommAxis::expert, K::all_to_all);
    if (moe.y_shares > 1) v.mark_varies(CommAxis::y, K::all_to_all);
  }
}

}  // namespace

StepVolume predict_step_volume(const ChooserInput& input, const Layout& g) {
  return predict_step_volume(input, g, resolved_modes(input, g));
}

int64_t expert_all_to_all_bound(const ChooserInput& input, const Layout& g) {
  const BatchSplit split = batch_split(input.model, input.batch, g);
  const MoeShape moe = moe_shape(input.model, split, g);
  if (moe.layers == 0 || moe.expert_ranks <= 1 || moe.gathers) return 0;
  const int64_t c_local = input.model.hidden / g.x;
  const ExpertCallBytes worst =
      expert_call_bytes(moe, c_local, element_size(collective_types(input.batch.dtype).activations), moe.expert_rows);
  return split.accumulation * moe.layers * (worst.counts + 2 * worst.sent + 2 * worst.returned);
}

StepVolume predict_step_volume(const ChooserInput& input, const Layout& g, MemoryModes modes) {
  return predict_step_volume(input, g, modes, overlaps_comm(input, g));
}

StepVolume predict_step_volume(const ChooserInput& input, const Layout& g, MemoryModes modes, bool overlap) {
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
  const int64_t chunks = decided_tp_chunks(input.batch);
  const TensorAllReduces tensor{v, chunks, overlap};
  for (const auto& lin : linear_shapes(model)) {
    const int64_t k_local = lin.k / g.size(lin.k_axis);
    const int64_t n_local = lin.n / g.size(lin.n_axis());
    const int64_t calls = A * lin.count;
    v.add(CommAxis::z, K::all_gather, calls, k_local * n_local * w, overlap);
    tensor.forward(comm_axis(lin.k_axis), calls, m * n_local * e, GemmShape{m, k_local, n_local});
    tensor.backward(comm_axis(lin.n_axis()), calls, m * k_local * e, GemmShape{m, k_local, n_local});
    v.add(CommAxis::z, K::reduce_scatter, calls, k_local * n_local * grad, overlap);
  }
  if (!model.tie_embeddings) {  // the token embedding's own wte, gathered and its gradient scattered
    const LinearShape head = linear_shapes(model).back();
    const int64_t block = head.k / g.size(head.k_axis) * (head.n / g.size(head.n_axis()));
    v.add(CommAxis::z, K::all_gather, A, block * w, overlap);
    v.add(CommAxis::z, K::reduce_scatter, A, block * grad, overlap);
  }
  v.add(CommAxis::y, K::all_reduce, A, m * (C / g.x) * e);  // token embedding
  // Each normalization over x: LayerNorm's sums and centered squares forward, its two
  // partials [m, 2] backward; RMSNorm's squares forward and one partial [m] backward.
  const int64_t norms = 2 * int64_t{model.layers} + 1, norm_stages = norm_forward_stages(model);
  v.add(CommAxis::x, K::all_reduce, A * norms * norm_stages, m * stat);
  v.add(CommAxis::x, K::all_reduce, A * norms, m * norm_stages * stat);
  v.add(CommAxis::y, K::all_gather, A, m * g.y * stat);
  v.add(CommAxis::y, K::all_reduce, A, m * 2 * stat);

  add_moe_blocks(v, input, g, split, overlap);

  // The recomputed forwards (trainer/model/gpt.cpp, Gpt::recompute).
  const auto shapes = linear_shapes(model);  // qkv, attn.proj, mlp.fc, mlp.proj, then the head
  const int64_t rerun = A * recomputed_blocks(model, mode);
  if (mode == Recompute::attention) {
    const LinearShape& qkv = shapes[0];
    const int64_t n_local = qkv.n / g.size(qkv.n_axis());
    tensor.forward(comm_axis(qkv.k_axis), rerun, m * n_local * e, GemmShape{m, qkv.k / g.size(qkv.k_axis), n_local});
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
      if (i < rerun_gemms) tensor.forward(comm_axis(lin.k_axis), calls, m * n_local * e, GemmShape{m, k_local, n_local});
    }
    v.add(CommAxis::x, K::all_reduce, rerun * 2 * norm_forward_stages(model), m * stat);  // ln1 and ln2
  }

  const GradientBuckets buckets = gradient_buckets(model, g);
  // The small tensors' gradients summed over z: the experts' biases, where the model has them
  // (model.bias), in a bucket of their own.
  v.add(CommAxis::z, K::all_reduce, 1, buckets.small * grad);
  if (buckets.small_experts > 0) v.add(CommAxis::z, K::all_reduce, 1, buckets.small_experts * grad);
  // Blocks 1..L-1, whose buckets go beside the backward, dense and MoE.
  const int64_t first_moe = model.is_moe_block(0) ? 1 : 0, later_moe = model.moe_layers() - first_moe;
  const struct { int64_t dense, moe; } later{model.layers - 1 - later_moe, later_moe};
  // In buckets (model_plan.hpp, GradientBuckets; trainer/optim/gradient_sync.hpp): each
  // block's weight shards (an MoE block's attention weights, then its local experts' in a
  // bucket of their own), then the wte shard, then the small tensors, then the experts'
  // biases; together every gradient once. The experts' buckets over the ranks holding the same
  // experts (expert_reduce_axis: expert_data with E_p > 1, else data), the others over data.
  // All-reduced; or, with the optimizer sharded (E_p = 1 only, shards_optimizer), reduce-
  // scattered (each bucket padded to G_data equal pieces) and, after AdamW, the updated weights
  // all-gathered. In a float32 job that is the all-reduce's bytes in two halves (nccl-tests
  // sizes: the reduce-scatter's input and the all-gather's output are the bucket) and its time
  // (the ring's (n-1)/n twice for its 2(n-1)/n); in a bfloat16 job the weight buckets'
  // all-gathers move the GEMMs' bf16 copy (their float32 master weights are sharded too), half
  // of that.
  const CommAxis experts_axis = expert_reduce_axis(g);
  const int64_t small_bytes = element_size(types.updated_small);
  // Blocks L-1..1 overlapped, then block 0's, the wte's and the small tensors'.
  const struct {
    CommAxis axis;
    int64_t calls, count, weight_bytes;
    bool overlapped;
  } bucket_calls[] = {{CommAxis::data, later.dense, buckets.block, updated, overlap},
                      {CommAxis::data, later.moe, buckets.moe_attention, updated, overlap},
                      {experts_axis, later.moe, buckets.moe_experts, updated, overlap},
                      {CommAxis::data, 1, buckets.of_block(model, 0), updated, false},
                      {experts_axis, first_moe, buckets.moe_experts, updated, false},
                      {CommAxis::data, 1, buckets.wte, updated, false},
                      {CommAxis::data, 1, buckets.small, small_bytes, false},
                      {experts_axis, buckets.small_experts > 0 ? 1 : 0, buckets.small_experts, small_bytes, false}};
  const bool shard = shards_optimizer(g, modes.shard_optimizer);
  for (const auto& b : bucket_calls) {
    if (!shard) {
      v.add(b.axis, K::all_reduce, b.calls, b.count * grad, b.overlapped);
      continue;
    }
    v.add(b.axis, K::reduce_scatter, b.calls, padded_bucket(b.count, g.data) * grad, b.overlapped);
    v.add(b.axis, K::all_gather, b.calls, padded_bucket(b.count, g.data) * b.weight_bytes, b.overlapped);
  }
  // The step's sums (loss, tokens, squared norm, stop votes) and a slot per rank for its busy
  // time (the straggler watch), in one all-reduce (trainer/optim/optimizer.cpp).
  v.add(CommAxis::world, K::all_reduce, 1, (4 + g.world()) * stat);
  return v;
}

}  // namespace axonn
