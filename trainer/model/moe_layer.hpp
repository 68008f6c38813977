#pragma once
// An MoE block's MLP on one rank (docs/moe.md): a float32 router [C, E] picks each token's
// top-k experts, the tokens are copied into a row buffer expert by expert (routing_plan.hpp),
// the rows go to the rank holding their expert (expert_exchange.hpp), each expert (a GPT-2
// MLP, fc and proj sharded over x, y and z exactly as the dense MLP's) runs on the rows it
// received, the outputs go back, and each token's output is the gate-weighted sum of its
// experts' rows. An expert's MLP is the model's: GELU (fc [C, F]) or SwiGLU (Mixtral's: fc
// [C, 2, F], gate then up, each split over y so a rank's SwiGLU is local). Expert rank r (of E_p) holds the E_l = E/E_p experts [r·E_l, (r+1)·E_l); at
// E_p = 1 every rank holds every expert and nothing is exchanged. The y ranks, which hold the
// same rows, split each exchange: each sends its share and the y group all-gathers what it
// received (MoeShape::y_shares, DeepSpeed-TED's order). Where that moves fewer rows
// (MoeShape::gathers, E_p·m < R/S), the expert group instead all-gathers its tokens and their
// routing, each rank lays out the same received rows the all-to-all would have delivered, and
// the outputs are summed back to their tokens by a reduce-scatter.
//
// Shapes on this rank (m = mb·T tokens, c = C/G_x, h = F/G_y, f = fc's width / G_y (h, or 2h
// with SwiGLU), R = MoeShape::rows, R_r the
// received rows: R at E_p = 1 or with a capacity; dropless with E_p > 1 up to E_p·m·k):
//   input and output [m, c] (the residual stream's columns), router shard [c, E],
//   logits and probabilities [m, E] float32, choices and gates [m, k],
//   this rank's rows (sent and returned) [R, c]; the received rows [R_r, c], their fc output
//   [R_r, f] and its activation [R_r, h], their output [R_r, c].
// Collectives per micro-batch (layout_volume.cpp counts the same): logits all-reduced over x;
// the routing statistics over z and data; each local expert's two weights gathered over z;
// with E_p > 1 the rows' counts, the rows and the outputs exchanged over the expert group
// (all-to-all), or under the all-gather dispatch the routing and the tokens gathered and the
// outputs reduce-scattered over it; the fc output summed over x and the proj output over y, once for all
// received rows; backward, the gates' gradient over x, the outputs' gradients to the experts
// and the inputs' gradients back (E_p > 1), the rows' gradients over x and y, each local
// expert's dW reduce-scattered over z.
//
// The balance loss (Switch/GShard) w·E·Σ_i f_i·P_i, f_i the fraction of the routed (token,
// choice) pairs that chose expert i, P_i the mean router probability of expert i, both over
// the tokens of this micro-batch on every rank (the routing statistics' sums), so with one
// micro-batch per rank and step its value and gradient are the global batch's at any layout.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "comm/comm_grid.hpp"
#include "layout/layout_inputs.hpp"
#include "trainer/backend.hpp"
#include "trainer/model/device_arena.hpp"
#include "trainer/model/expert_exchange.hpp"
#include "trainer/model/grad_scatter.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/model/routing_plan.hpp"
#include "trainer/model/z_gather.hpp"

namespace axonn {

// What the router did in the micro-batches since the last reset, summed over the job.
struct MoeStatistics {
  double balance_loss = 0;    // Σ over micro-batches of w·E·Σ f_i·P_i
  double routed_pairs = 0;    // (token, choice) pairs
  double dropped_pairs = 0;   // of which dropped by the capacity
  double max_expert_load = 0; // Σ over micro-batches of max_i routed_i / mean_i routed_i
  int64_t micro_batches = 0;
};

class MoeLayer {
 public:
  // layer: the block's index (parameter names h.<layer>.mlp.*); fc_weight, proj_weight: the
  // GEMMs' copy of the local experts' shards, expert by expert; micro_batch: mb sequences.
  // overlap: the backward's input-gradient all-reduces (over x for proj, y for fc) beside the
  // experts' dW GEMMs (OAR, as ShardedLinear's).
  MoeLayer(Backend& backend, CommGrid& grid, const ModelShape& model, int layer, int micro_batch,
           ParameterStore& params, ConstActPtr fc_weight, ConstActPtr proj_weight, bool overlap = false);
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  // Elements of the largest dW block an expert reduce-scatters over z (GradScatter's pairs fit it).
  int64_t expert_block() const { return c_ * std::max(fc_width_, hidden_); }

  // out (m, c) = Σ_s gate·expert_s(in) per token; keeps what backward reads. loss_scale: the
  // language-model loss's weight per token (1 / the step's tokens), which the balance loss's
  // gradient is scaled by too.
  void forward(ConstActPtr in, ActPtr out, float loss_scale);
  // d_in (m, c) = the gradient at `in` (overwritten) from dout (m, c); parameter gradients +=,
  // the experts' dW through `scatter` (G_z > 1).
  void backward(ConstActPtr dout, ConstActPtr in, ActPtr d_in, GradScatter& scatter);

  const MoeStatistics& statistics() const { return stats_; }
  void reset_statistics() { stats_ = {}; }

 private:
  void upload(int32_t* device, const std::vector<int32_t>& host);
  void upload(float* device, const std::vector<float>& host);
  // Copies the router's choices to the host, plans the rows and uploads the plan.
  void plan(int64_t m);
  // The rows' counts to the expert ranks (E_p > 1) and where the received rows lie (and,
  // pipelined, each round's runs).
  void plan_exchange();
  // All-gather dispatch: every rank's routing gathered over the expert group, each source's
  // plan made here, and from them the received rows' layout (exchange_) and where each of
  // them, and each source's token choices, lie (dispatch_tokens_, dispatch_gates_, slots_all_).
  void plan_gather();
  // Every received row from the group's gathered rows [P·m, c] (source s's at s·m), times its
  // gate when `scaled`.
  void dispatch_gathered(ConstActPtr group_rows, ActPtr received, bool scaled);
  // out (m, c) = this rank's tokens' sums of `received` rows over the group: each source's
  // partial sums (gate-weighted when `gated`) reduce-scattered over the expert axis.
  void combine_gathered(ConstActPtr received, bool gated, ActPtr out);
  // Sums the routing statistics over z and data; sets the balance loss's gradient coef_.
  void reduce_statistics(float loss_scale);
  // This rank's rows [R, c] to their experts' ranks [R_r, c], and the experts' rows back.
  void to_experts(ConstActPtr rows, ActPtr received);
  void from_experts(ConstActPtr received, ActPtr rows);
  // The all-to-all over the expert group: `from` holds from_rows[p] rows for peer p, block by
  // block; `to` receives to_rows[p] from peer p. Split over the y group when y_shares_ > 1.
  void exchange(ConstActPtr from, const std::vector<size_t>& from_rows, ActPtr to, const std::vector<size_t>& to_rows);
  // Pipelined rounds (MoeShape::rounds > 1): the exchange to the experts, their MLPs and the
  // exchange back, round by round, with rounds i+1.. moving while round i computes. Forward:
  // rows_in_ to rows_out_; backward: d_rows_out_ to d_rows_in_, then the experts' dW.
  void forward_in_rounds();
  void backward_in_rounds(GradScatter& scatter);
  // The buffers of one pipelined exchange: `rows` (this rank's side, [R, c]) go to `received`
  // (the experts' side, [R_r, c]); after compute(round) `computed` ([R_r, c]) comes back to
  // `returned` ([R, c]). `mine` [R, c] and `theirs` [R_r, c] stage the packed rounds.
  struct RoundsStaging {
    ConstActPtr rows;
    ActPtr received;
    ConstActPtr computed;
    ActPtr returned, mine, theirs;
  };
  // The rounds of exchange_ (rounds_plan_): each sent, computed as it arrives, and sent back;
  // while_returning runs before waiting for the last round to come back.
  void exchange_in_rounds(const RoundsStaging& stage, const std::function<void(const ExchangeRound&)>& compute,
                          const std::function<void()>& while_returning);
  // Copies the runs (first[p], rows[p]) of `from` back to back into `packed`, or back.
  void pack_runs(ConstActPtr from, const std::vector<int64_t>& first, const std::vector<size_t>& rows, ActPtr packed);
  void unpack_runs(ConstActPtr packed, const std::vector<int64_t>& first, const std::vector<size_t>& rows, ActPtr to);
  // Expert e's part of this rank's row buffer of `width` columns.
  template <class Ptr>
  Ptr rows_of(Ptr buffer, int64_t e, int64_t width) const {
    return buffer + plan_.start[static_cast<size_t>(e)] * width;
  }
  void zero(ActPtr buffer, int64_t elements);
  enum class Weight { fc, proj };
  // For every received chunk of a local expert in [first, end): its rows of `out` = its rows
  // of `in` · W (or W^T), W its expert's fc [c, h] or proj [h, c] as the GEMMs read it
  // (gathered over z when split).
  void expert_gemms(Weight which, Transpose transpose, ConstActPtr in, ActPtr out, int64_t first = 0,
                    int64_t end = kAllExperts);
  // The activation of received rows [first, first + rows): act_out_ from fc_out_; and its
  // backward, d_fc_out_ from d_act_ (the GELU's in place).
  void activate(int64_t first, int64_t rows);
  void activate_backward(int64_t first, int64_t rows);
  // Every such chunk's expert's bias (width) added to its used rows of `rows`.
  void add_expert_biases(ActPtr rows, const float* bias, int64_t width, int64_t first = 0, int64_t end = kAllExperts);
  static constexpr int64_t kAllExperts = INT64_MAX;
  // Every local expert's dW (k_local, n_local) += x^T·dy over its chunks' rows, dbias
  // (bias_width) += Σ dy, through the z reduce-scatter when the weights are split over z.
  void weight_grads(float* grad, float* bias_grad, int64_t bias_width, ConstActPtr x, ConstActPtr dy,
                    int64_t k_local, int64_t n_local, GradScatter& scatter);
  // An input gradient's all-reduce over `axis`: started with overlap (the caller computes the
  // dW beside it, then finishes it), else run at once (finish_sum has nothing left to do).
  struct Sum {
    Communicator* group;
    std::optional<Communicator::Ticket> ticket;
  };
  Sum start_sum(CommAxis axis, ActPtr buffer, int64_t elements);
  void finish_sum(const Sum& sum);

  Backend& backend_;
  DeviceArena arena_;  // every buffer below, allocated in the constructor
  CommGrid& grid_;
  bool overlap_;
  int64_t experts_, local_experts_, expert_ranks_;  // E, E_l, E_p
  int64_t y_shares_, y_rank_;  // MoeShape::y_shares (G_y or 1), this rank's y coordinate
  bool gathers_;               // MoeShape::gathers: all-gather dispatch
  int64_t rounds_;             // MoeShape::rounds: the all-to-all's pipelined rounds
  int64_t top_k_, sequence_, capacity_, segment_, m_, rows_, c_, hidden_;  // hidden_ = F/G_y, segment_ = mb·cap
  int64_t fc_width_;  // fc's output columns here: hidden_, or 2·hidden_ (SwiGLU's gate | up)
  bool swiglu_;
  float aux_weight_;
  bool z_split_;

  // Parameters, per local expert e at e·(their shard).
  float* router_;
  float* d_router_;
  ConstActPtr fc_, proj_;  // shards [c/G_z, fc_width] and [hidden/G_z, c] (GEMM copy)
  float *d_fc_, *d_proj_;
  const float *fc_bias_, *proj_bias_;  // [fc_width], [c]
  float *d_fc_bias_, *d_proj_bias_;
  ActPtr fc_gathered_, proj_gathered_;  // [E_l][c, fc_width], [E_l][hidden, c] when G_z > 1
  std::vector<ZGather> fc_gather_, proj_gather_;

  // Kept from forward to backward.
  float *logits_, *probs_, *gates_;  // [m, E], [m, E], [m, k]
  int32_t *choices_, *slots_;         // [m, k]
  int32_t* token_of_row_;             // [R]
  float* row_gates_;                  // [R]
  ActPtr rows_in_, rows_out_;         // this rank's rows [R, c]: sent, and returned with the experts' outputs
  ActPtr expert_in_, fc_out_, act_out_, expert_out_;  // received [R_r, c], [R_r, f], [R_r, h], [R_r, c]
  RoutingPlan plan_;
  ExpertExchange exchange_;
  std::vector<ExchangeRound> rounds_plan_;  // exchange_ in rounds (rounds_ > 1), for the forward and the backward
  float *counts_sent_, *counts_received_;  // [E]: the rows' counts exchange (E_p > 1)
  // The exchange split over the y group (y_shares_ > 1): this rank's share packed, the share
  // received in Y copies, the group's shares gathered.
  ActPtr pack_, shares_, gathered_;
  // The all-gather dispatch (gathers_): each token's k choices (as float32) then its k gates,
  // this rank's [m, 2k] and the group's [P·m, 2k]; the group's tokens gathered (then the
  // outputs' gradients) [P·m, c]; the partial sums to reduce-scatter [P·m, c]; the gates'
  // gradients [P·m, k]; each source token choice's received row or −1 [P·m, k]; each received
  // row's token in its source and gate [R_max].
  float *routing_sent_, *routing_all_;
  ActPtr group_tokens_, partial_;
  float* d_gates_all_;
  int32_t *slots_all_, *dispatch_tokens_;
  float* dispatch_gates_;
  float* coef_;        // [E]: d(balance loss)/d(probability of expert i), every token
  float* statistics_;  // [2E + 1]: routed per expert, probability sums, dropped
  // Backward scratch: this rank's rows' gradients [R, c] (sent, returned), the received ones:
  // d_act_ [R_r, h], d_fc_out_ [R_r, f] (d_act_ itself with GELU, whose backward is in place).
  ActPtr d_rows_out_, d_rows_in_, d_expert_out_, d_act_, d_fc_out_, d_expert_in_;
  float *d_gates_, *d_logits_;
  MoeStatistics stats_;
};

}  // namespace axonn
