#include "trainer/model/moe_layer.hpp"

#include <algorithm>
#include <functional>
#include <string>

#include "layout/model_plan.hpp"

namespace axonn {

MoeLayer::MoeLayer(Backend& backend, CommGrid& grid, const ModelShape& model, int layer, int micro_batch,
                   ParameterStore& params, ConstActPtr fc_weight, ConstActPtr proj_weight, bool overlap)
    : backend_(backend), arena_(backend), grid_(grid), overlap_(overlap) {
  const Layout& g = grid.layout();
  const int64_t C = model.hidden;
  experts_ = model.experts;
  expert_ranks_ = g.experts;
  local_experts_ = experts_ / expert_ranks_;
  top_k_ = model.top_k;
  sequence_ = model.sequence;
  capacity_ = expert_capacity_per_sequence(model);
  segment_ = int64_t{micro_batch} * capacity_;
  m_ = int64_t{micro_batch} * model.sequence;
  BatchSplit split;
  split.micro_batch = micro_batch;
  split.tokens = m_;
  const MoeShape shape = moe_shape(model, split, g);
  rows_ = shape.rows;
  // The received rows: this rank's own at E_p = 1; with a capacity the same count (each
  // source's fixed segments); dropless at most every source's every row.
  const int64_t received_max = shape.expert_rows;
  y_shares_ = shape.y_shares;
  y_rank_ = grid.coords().y;
  gathers_ = shape.gathers;
  rounds_ = decided_rounds(shape);
  c_ = C / g.x;
  hidden_ = model.ffn() / g.y;
  swiglu_ = model.mlp == Mlp::swiglu;
  fc_width_ = model.fc_width() / g.y;
  aux_weight_ = static_cast<float>(model.aux_loss_weight);
  z_split_ = g.z > 1;

  const std::string p = "h." + std::to_string(layer) + ".mlp.";
  router_ = params.param(p + "router.weight");
  d_router_ = params.grad(p + "router.weight");
  fc_ = fc_weight;
  proj_ = proj_weight;
  d_fc_ = params.grad(p + "experts.fc.weight");
  d_proj_ = params.grad(p + "experts.proj.weight");
  fc_bias_ = params.param_if_any(p + "experts.fc.bias");  // null without biases (model.bias)
  proj_bias_ = params.param_if_any(p + "experts.proj.bias");
  d_fc_bias_ = params.grad_if_any(p + "experts.fc.bias");
  d_proj_bias_ = params.grad_if_any(p + "experts.proj.bias");
  if (z_split_) {
    const int64_t fc_block = c_ * fc_width_, proj_block = hidden_ * c_;
    fc_gathered_ = arena_.act(local_experts_ * fc_block);
    proj_gathered_ = arena_.act(local_experts_ * proj_block);
    for (int64_t e = 0; e < local_experts_; ++e) {
      fc_gather_.emplace_back(grid.axis(CommAxis::z), fc_ + e * (fc_block / g.z), fc_gathered_ + e * fc_block,
                              fc_block / g.z);
      proj_gather_.emplace_back(grid.axis(CommAxis::z), proj_ + e * (proj_block / g.z), proj_gathered_ + e * proj_block,
                                proj_block / g.z);
    }
  }

  const int64_t m = m_, E = experts_, k = top_k_, R = rows_, Rr = received_max;
  const bool exchanges = expert_ranks_ > 1;  // else the received rows are this rank's own
  const bool sends = exchanges && !gathers_;  // the all-to-all's send side
  logits_ = arena_.floats(m * E);
  probs_ = arena_.floats(m * E);
  gates_ = arena_.floats(m * k);
  choices_ = arena_.ints(m * k);
  slots_ = arena_.ints(m * k);
  token_of_row_ = arena_.ints(R);
  row_gates_ = arena_.floats(R);
  if (!gathers_) {
    rows_in_ = arena_.act(R * c_);
    rows_out_ = arena_.act(R * c_);
  }
  expert_in_ = exchanges ? arena_.act(Rr * c_) : rows_in_;
  fc_out_ = arena_.act(Rr * fc_width_);
  act_out_ = arena_.act(Rr * hidden_);
  expert_out_ = exchanges ? arena_.act(Rr * c_) : rows_out_;
  if (y_shares_ > 1) {  // sizes: layout_memory.cpp, add_moe_layers
    pack_ = arena_.act(Rr * c_);
    shares_ = arena_.act((Rr + y_shares_ * expert_ranks_) * c_);
    gathered_ = arena_.act(Rr * c_);
  }
  counts_sent_ = sends ? arena_.floats(E) : nullptr;
  counts_received_ = sends ? arena_.floats(E) : nullptr;
  if (gathers_) {  // sizes: layout_memory.cpp, add_moe_layers
    const int64_t group = expert_ranks_ * m;
    routing_sent_ = arena_.floats(2 * m * k);
    routing_all_ = arena_.floats(2 * group * k);
    group_tokens_ = arena_.act(group * c_);
    partial_ = arena_.act(group * c_);
    d_gates_all_ = arena_.floats(group * k);
    slots_all_ = arena_.ints(group * k);
    dispatch_tokens_ = arena_.ints(Rr);
    dispatch_gates_ = arena_.floats(Rr);
  }
  coef_ = arena_.floats(E);
  statistics_ = arena_.floats(moe_statistics(model));
  if (!gathers_) {
    d_rows_out_ = arena_.act(R * c_);
    d_rows_in_ = arena_.act(R * c_);
  }
  d_expert_out_ = exchanges ? arena_.act(Rr * c_) : d_rows_out_;
  d_act_ = arena_.act(Rr * hidden_);
  d_fc_out_ = swiglu_ ? arena_.act(Rr * fc_width_) : d_act_;
  d_expert_in_ = exchanges ? arena_.act(Rr * c_) : d_rows_in_;
  d_gates_ = arena_.floats(m * k);
  d_logits_ = arena_.floats(m * E);
}

void MoeLayer::upload(int32_t* device, const std::vector<int32_t>& host) {
  if (!host.empty()) backend_.copy_to_device(device, host.data(), host.size() * sizeof(int32_t));
}

void MoeLayer::upload(float* device, const std::vector<float>& host) {
  if (!host.empty()) backend_.copy_to_device(device, host.data(), host.size() * sizeof(float));
}

void MoeLayer::zero(ActPtr buffer, int64_t elements) {
  backend_.memset_zero(buffer.raw(), static_cast<size_t>(elements) * buffer.element_bytes());
}

void MoeLayer::plan(int64_t m) {
  const int64_t k = top_k_;
  std::vector<int32_t> choices(static_cast<size_t>(m * k));
  std::vector<float> gates(choices.size());
  backend_.copy_to_host(choices.data(), choices_, choices.size() * sizeof(int32_t));
  backend_.copy_to_host(gates.data(), gates_, gates.size() * sizeof(float));
  plan_ = plan_routing(choices, k, experts_, sequence_, capacity_);
  if (gathers_) return;  // plan_gather lays out the gathered rows and uploads their own tables
  std::vector<float> row_gates(plan_.token_of_row.size());
  for (size_t j = 0; j < row_gates.size(); ++j)
    row_gates[j] = gates[static_cast<size_t>(plan_.token_of_row[j] * k + plan_.choice_of_row[j])];
  upload(slots_, plan_.slots);
  upload(token_of_row_, plan_.token_of_row);
  upload(row_gates_, row_gates);
}

void MoeLayer::plan_exchange() {
  if (expert_ranks_ == 1) {
    exchange_ = plan_expert_exchange(plan_.used, plan_.used, 1, segment_);
    return;
  }
  // Each rank's plan lists its rows expert by expert, so the counts for expert rank j's
  // experts are the j-th E_l of them: one all-to-all of E_l counts per peer (float32, exact
  // below 2^24 rows).
  const auto E = static_cast<size_t>(experts_);
  std::vector<float> counts(E);
  for (size_t e = 0; e < E; ++e) counts[e] = static_cast<float>(plan_.used[e]);
  upload(counts_sent_, counts);
  grid_.axis(CommAxis::expert)
      .all_to_all(counts_sent_, counts_received_, static_cast<size_t>(local_experts_), ElementType::float32);
  backend_.copy_to_host(counts.data(), counts_received_, E * sizeof(float));
  std::vector<int64_t> received(E);
  for (size_t i = 0; i < E; ++i) received[i] = static_cast<int64_t>(counts[i]);
  exchange_ = plan_expert_exchange(plan_.used, received, expert_ranks_, segment_);
  if (rounds_ > 1) rounds_plan_ = plan_rounds(exchange_, rounds_);
}

void MoeLayer::plan_gather() {
  const int64_t m = m_, k = top_k_, P = expert_ranks_, El = local_experts_;
  const auto mk = static_cast<size_t>(m * k);
  // This rank's routing, [m·k choices | m·k gates], gathered from every rank of the group.
  std::vector<float> routing(2 * mk);
  std::vector<int32_t> choices(mk);
  backend_.copy_to_host(choices.data(), choices_, mk * sizeof(int32_t));
  for (size_t i = 0; i < mk; ++i) routing[i] = static_cast<float>(choices[i]);
  backend_.copy_to_host(routing.data() + mk, gates_, mk * sizeof(float));
  upload(routing_sent_, routing);
  grid_.axis(CommAxis::expert).all_gather(routing_sent_, routing_all_, 2 * mk, ElementType::float32);
  std::vector<float> all(2 * mk * static_cast<size_t>(P));
  backend_.copy_to_host(all.data(), routing_all_, all.size() * sizeof(float));

  // Every source's plan, as that source made it (plan_routing is the same function of the
  // same choices), and the rows it routes to this rank's experts, source by source.
  const int64_t me = grid_.layout().coordinate(grid_.coords(), Axis::expert), first = me * El;
  std::vector<RoutingPlan> plans(static_cast<size_t>(P));
  std::vector<int64_t> received_used(static_cast<size_t>(P * El));
  for (int64_t s = 0; s < P; ++s) {
    if (s == me) {
      plans[static_cast<size_t>(s)] = plan_;
    } else {
      const float* source = all.data() + static_cast<size_t>(s) * 2 * mk;
      for (size_t i = 0; i < mk; ++i) choices[i] = static_cast<int32_t>(source[i]);
      plans[static_cast<size_t>(s)] = plan_routing(choices, k, experts_, sequence_, capacity_);
    }
    for (int64_t e = 0; e < El; ++e)
      received_used[static_cast<size_t>(s * El + e)] = plans[static_cast<size_t>(s)].used[static_cast<size_t>(first + e)];
  }
  exchange_ = plan_expert_exchange(plan_.used, received_used, P, segment_);

  // Each received row's token (in its source's m) and gate; each source token choice's row.
  std::vector<int32_t> tokens(static_cast<size_t>(exchange_.received), -1), slots(mk * static_cast<size_t>(P), -1);
  std::vector<float> gates(tokens.size());
  for (int64_t s = 0; s < P; ++s) {
    const RoutingPlan& plan = plans[static_cast<size_t>(s)];
    const float* source_gates = all.data() + static_cast<size_t>(s) * 2 * mk + mk;
    for (int64_t e = 0; e < El; ++e) {
      const ExpertChunk& chunk = exchange_.chunks[static_cast<size_t>(s * El + e)];
      const auto ge = static_cast<size_t>(first + e);
      for (int64_t i = 0; i < chunk.rows; ++i) {
        const auto row = static_cast<size_t>(plan.listed[ge] + i);
        const int32_t token = plan.token_of_row[row];
        const size_t pair = static_cast<size_t>(token) * static_cast<size_t>(k) + static_cast<size_t>(plan.choice_of_row[row]);
        tokens[static_cast<size_t>(chunk.start + i)] = token;
        gates[static_cast<size_t>(chunk.start + i)] = source_gates[pair];
        slots[static_cast<size_t>(s) * mk + pair] = static_cast<int32_t>(chunk.start + i);
      }
    }
  }
  upload(dispatch_tokens_, tokens);
  upload(dispatch_gates_, gates);
  upload(slots_all_, slots);
}

void MoeLayer::dispatch_gathered(ConstActPtr group_rows, ActPtr received, bool scaled) {
  const int64_t m = m_, c = c_;
  for (size_t i = 0; i < exchange_.chunks.size(); ++i) {
    const ExpertChunk& chunk = exchange_.chunks[i];
    if (chunk.rows == 0) continue;
    const auto source = static_cast<int64_t>(i) / local_experts_;
    backend_.gather_rows(received + chunk.start * c, group_rows + source * m * c, dispatch_tokens_ + chunk.start,
                         scaled ? dispatch_gates_ + chunk.start : nullptr, chunk.rows, m, c);
  }
}

void MoeLayer::combine_gathered(ConstActPtr received, bool gated, ActPtr out) {
  const int64_t m = m_, k = top_k_, c = c_, P = expert_ranks_;
  zero(partial_, P * m * c);
  for (int64_t s = 0; s < P; ++s)
    backend_.combine_rows(partial_ + s * m * c, received, slots_all_ + s * m * k,
                          gated ? routing_all_ + (2 * s + 1) * m * k : nullptr, m, k, exchange_.received, c);
  grid_.axis(CommAxis::expert).reduce_scatter(partial_.raw(), out.raw(), static_cast<size_t>(m * c), out.type());
}

void MoeLayer::to_experts(ConstActPtr rows, ActPtr received) {
  if (expert_ranks_ > 1) exchange(rows, exchange_.send_rows, received, exchange_.receive_rows);
}

void MoeLayer::from_experts(ConstActPtr received, ActPtr rows) {
  if (expert_ranks_ > 1) exchange(received, exchange_.receive_rows, rows, exchange_.send_rows);
}

namespace {

// Rows [first, end) of y rank j's share of a block of n rows split over `shares` y ranks.
std::pair<int64_t, int64_t> share_of(size_t n, int64_t j, int64_t shares) {
  const auto rows = static_cast<int64_t>(n);
  return {rows * j / shares, rows * (j + 1) / shares};
}

std::vector<size_t> times(std::vector<size_t> counts, int64_t width) {
  for (size_t& n : counts) n *= static_cast<size_t>(width);
  return counts;
}

}  // namespace

void MoeLayer::exchange(ConstActPtr from, const std::vector<size_t>& from_rows, ActPtr to,
                        const std::vector<size_t>& to_rows) {
  Communicator& expert = grid_.axis(CommAxis::expert);
  const ElementType type = from.type();
  if (y_shares_ == 1) return expert.all_to_allv(from.raw(), times(from_rows, c_), to.raw(), times(to_rows, c_), type);

  // Split over the y group (model_plan.hpp, MoeShape::y_shares): this rank sends its share of
  // each peer's block and receives its share of each peer's block to it.
  const int64_t Y = y_shares_, j = y_rank_, c = c_;
  const auto row_bytes = static_cast<size_t>(c) * from.element_bytes();
  const size_t P = from_rows.size();
  std::vector<size_t> sent(P), received(P);
  int64_t packed = 0, block = 0;
  for (size_t p = 0; p < P; ++p) {
    const auto [first, end] = share_of(from_rows[p], j, Y);
    backend_.copy((pack_ + packed * c).raw(), (from + (block + first) * c).raw(),
                  static_cast<size_t>(end - first) * row_bytes);
    sent[p] = static_cast<size_t>(end - first);
    packed += end - first;
    block += static_cast<int64_t>(from_rows[p]);
    const auto [to_first, to_end] = share_of(to_rows[p], j, Y);
    received[p] = static_cast<size_t>(to_end - to_first);
  }
  expert.all_to_allv(pack_.raw(), times(sent, c), shares_.raw(), times(received, c), type);

  // The y group's shares, each y rank's to every y rank: Y copies of this rank's share, back
  // to back, as all_to_allv sends them; y rank k's share is block by block, as received.
  int64_t mine = 0;
  for (const size_t n : received) mine += static_cast<int64_t>(n);
  for (int64_t k = 1; k < Y; ++k)
    backend_.copy((shares_ + k * mine * c).raw(), shares_.raw(), static_cast<size_t>(mine) * row_bytes);
  std::vector<size_t> share_rows(static_cast<size_t>(Y));
  for (int64_t k = 0; k < Y; ++k)
    for (const size_t n : to_rows) {
      const auto [first, end] = share_of(n, k, Y);
      share_rows[static_cast<size_t>(k)] += static_cast<size_t>(end - first);
    }
  grid_.axis(CommAxis::y)
      .all_to_allv(shares_.raw(), std::vector<size_t>(static_cast<size_t>(Y), static_cast<size_t>(mine * c)),
                   gathered_.raw(), times(share_rows, c), type);

  // Each y rank's share of each block to its place in `to`.
  int64_t at = 0;
  for (int64_t k = 0; k < Y; ++k) {
    int64_t to_block = 0;
    for (size_t p = 0; p < P; ++p) {
      const auto [first, end] = share_of(to_rows[p], k, Y);
      backend_.copy((to + (to_block + first) * c).raw(), (gathered_ + at * c).raw(),
                    static_cast<size_t>(end - first) * row_bytes);
      at += end - first;
      to_block += static_cast<int64_t>(to_rows[p]);
    }
  }
}

void MoeLayer::reduce_statistics(float loss_scale) {
  const int64_t E = experts_;
  // [routed per expert | probability sums | dropped]: the sums on the device, then the host's counts.
  backend_.memset_zero(statistics_, static_cast<size_t>(2 * E + 1) * sizeof(float));
  backend_.bias_backward(statistics_ + E, probs_, m_, E, E);
  std::vector<float> host(static_cast<size_t>(2 * E + 1));
  backend_.copy_to_host(host.data(), statistics_, host.size() * sizeof(float));
  for (int64_t e = 0; e < E; ++e) host[static_cast<size_t>(e)] = static_cast<float>(plan_.routed[static_cast<size_t>(e)]);
  host.back() = static_cast<float>(plan_.dropped);
  upload(statistics_, host);
  for (CommAxis axis : {CommAxis::z, CommAxis::data})
    grid_.axis(axis).all_reduce(statistics_, host.size(), ElementType::float32);
  backend_.copy_to_host(host.data(), statistics_, host.size() * sizeof(float));

  double pairs = 0, max_routed = 0;
  for (int64_t e = 0; e < E; ++e) {
    pairs += host[static_cast<size_t>(e)];
    max_routed = std::max<double>(max_routed, host[static_cast<size_t>(e)]);
  }
  const double tokens = pairs / static_cast<double>(top_k_);
  // f_i = routed_i / pairs, P_i = probability sum_i / tokens; the gradient at each token's
  // probability of expert i is w·E·f_i / tokens, here times the micro-batch's share of the
  // step (tokens·loss_scale), as the language-model loss is.
  double loss = 0;
  std::vector<float> coef(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const double f = pairs > 0 ? host[static_cast<size_t>(e)] / pairs : 0;
    const double P = tokens > 0 ? host[static_cast<size_t>(E + e)] / tokens : 0;
    loss += aux_weight_ * static_cast<double>(E) * f * P;
    coef[static_cast<size_t>(e)] = static_cast<float>(aux_weight_ * static_cast<double>(E) * f * loss_scale);
  }
  upload(coef_, coef);
  stats_.balance_loss += loss;
  stats_.routed_pairs += pairs;
  stats_.dropped_pairs += host.back();
  stats_.max_expert_load += pairs > 0 ? max_routed / (pairs / static_cast<double>(E)) : 0;
  ++stats_.micro_batches;
}

void MoeLayer::forward(ConstActPtr in, ActPtr out, float loss_scale) {
  const int64_t m = m_, E = experts_, k = top_k_, c = c_, f = fc_width_;
  backend_.router_logits(logits_, in, router_, m, c, E);
  grid_.axis(CommAxis::x).all_reduce(logits_, static_cast<size_t>(m * E), ElementType::float32);
  backend_.router_top_k(probs_, choices_, gates_, logits_, m, E, k);
  plan(m);
  reduce_statistics(loss_scale);
  if (gathers_) {
    plan_gather();
    grid_.axis(CommAxis::expert).all_gather(in.raw(), group_tokens_.raw(), static_cast<size_t>(m * c), in.type());
    dispatch_gathered(group_tokens_, expert_in_, false);
  } else {
    plan_exchange();
    for (int64_t e = 0; e < E; ++e)
      if (const int64_t n = plan_.used[static_cast<size_t>(e)]; n > 0)
        backend_.gather_rows(rows_of(rows_in_, e, c), in, token_of_row_ + plan_.listed[static_cast<size_t>(e)],
                             nullptr, n, m, c);
    if (rounds_ == 1) to_experts(rows_in_, expert_in_);
  }
  const int64_t Rr = exchange_.received;
  if (capacity_ > 0) {  // rows no token uses stay zero through every collective
    zero(fc_out_, Rr * f);
    zero(expert_out_, Rr * c);
  }
  for (size_t e = 0; e < fc_gather_.size(); ++e) {
    fc_gather_[e].complete();
    proj_gather_[e].complete();
  }
  if (rounds_ > 1) {
    forward_in_rounds();
  } else {
    expert_gemms(Weight::fc, Transpose::no, expert_in_, fc_out_);
    grid_.axis(CommAxis::x).all_reduce(fc_out_.raw(), static_cast<size_t>(Rr * f), fc_out_.type());
    add_expert_biases(fc_out_, fc_bias_, f);
    activate(0, Rr);
    expert_gemms(Weight::proj, Transpose::no, act_out_, expert_out_);
    grid_.axis(CommAxis::y).all_reduce(expert_out_.raw(), static_cast<size_t>(Rr * c), expert_out_.type());
    add_expert_biases(expert_out_, proj_bias_, c);
    if (gathers_) return combine_gathered(expert_out_, true, out);
    from_experts(expert_out_, rows_out_);
  }
  zero(out, m * c);
  backend_.combine_rows(out, rows_out_, slots_, gates_, m, k, rows_, c);
}

void MoeLayer::pack_runs(ConstActPtr from, const std::vector<int64_t>& first, const std::vector<size_t>& rows,
                         ActPtr packed) {
  const size_t row_bytes = static_cast<size_t>(c_) * from.element_bytes();
  for (size_t p = 0; p < rows.size(); ++p) {
    if (rows[p] > 0) backend_.copy(packed.raw(), (from + first[p] * c_).raw(), rows[p] * row_bytes);
    packed = packed + static_cast<int64_t>(rows[p]) * c_;
  }
}

void MoeLayer::unpack_runs(ConstActPtr packed, const std::vector<int64_t>& first, const std::vector<size_t>& rows,
                           ActPtr to) {
  const size_t row_bytes = static_cast<size_t>(c_) * packed.element_bytes();
  for (size_t p = 0; p < rows.size(); ++p) {
    if (rows[p] > 0) backend_.copy((to + first[p] * c_).raw(), packed.raw(), rows[p] * row_bytes);
    packed = packed + static_cast<int64_t>(rows[p]) * c_;
  }
}

// Every round's all-to-all is started at once (a group's collectives run in the order they
// are called), each from and into its own region of the two staging buffers; round i's
// results go back through the same regions once its received rows are unpacked.
void MoeLayer::exchange_in_rounds(const RoundsStaging& stage, const std::function<void(const ExchangeRound&)>& compute,
                                  const std::function<void()>& while_returning) {
  Communicator& expert = grid_.axis(CommAxis::expert);
  const std::vector<ExchangeRound>& rounds = rounds_plan_;
  const ElementType type = stage.rows.type();
  const int64_t c = c_;
  std::vector<ActPtr> mine, theirs;  // each round's staging regions
  std::vector<Communicator::Ticket> dispatched;
  ActPtr next_mine = stage.mine, next_theirs = stage.theirs;
  for (const ExchangeRound& r : rounds) {
    mine.push_back(next_mine);
    theirs.push_back(next_theirs);
    next_mine = next_mine + static_cast<int64_t>(r.sent()) * c;
    next_theirs = next_theirs + static_cast<int64_t>(r.received()) * c;
    pack_runs(stage.rows, r.send_first, r.send_rows, mine.back());
    dispatched.push_back(expert.start_all_to_allv(mine.back().raw(), times(r.send_rows, c), theirs.back().raw(),
                                                  times(r.receive_rows, c), type));
  }
  Communicator::Ticket returned = 0;
  for (size_t i = 0; i < rounds.size(); ++i) {
    const ExchangeRound& r = rounds[i];
    expert.finish(dispatched[i]);
    unpack_runs(theirs[i], r.receive_first, r.receive_rows, stage.received);
    compute(r);
    pack_runs(stage.computed, r.receive_first, r.receive_rows, theirs[i]);
    returned = expert.start_all_to_allv(theirs[i].raw(), times(r.receive_rows, c), mine[i].raw(),
                                        times(r.send_rows, c), type);
  }
  while_returning();
  expert.finish(returned);
  for (size_t i = 0; i < rounds.size(); ++i)
    unpack_runs(mine[i], rounds[i].send_first, rounds[i].send_rows, stage.returned);
}

// Staged in d_rows_in_ and d_expert_in_, which the forward does not otherwise use.
void MoeLayer::forward_in_rounds() {
  const int64_t c = c_;
  const auto experts = [&](const ExchangeRound& r) {
    expert_gemms(Weight::fc, Transpose::no, expert_in_, fc_out_, r.first_expert, r.end_expert);
    add_expert_biases(fc_out_, fc_bias_, fc_width_, r.first_expert, r.end_expert);
    for (size_t p = 0; p < r.receive_rows.size(); ++p)
      activate(r.receive_first[p], static_cast<int64_t>(r.receive_rows[p]));
    expert_gemms(Weight::proj, Transpose::no, act_out_, expert_out_, r.first_expert, r.end_expert);
    add_expert_biases(expert_out_, proj_bias_, c, r.first_expert, r.end_expert);
  };
  exchange_in_rounds({rows_in_, expert_in_, expert_out_, rows_out_, d_rows_in_, d_expert_in_}, experts, [] {});
}

// Staged in rows_in_ and expert_out_, which the all-to-all path's backward does not read.
// The experts' dW run while the last round's gradients go back, from the same rows in the same
// order as without rounds.
void MoeLayer::backward_in_rounds(GradScatter& scatter) {
  const int64_t c = c_, h = hidden_, f = fc_width_;
  const auto experts = [&](const ExchangeRound& r) {
    expert_gemms(Weight::proj, Transpose::yes, d_expert_out_, d_act_, r.first_expert, r.end_expert);
    for (size_t p = 0; p < r.receive_rows.size(); ++p)
      activate_backward(r.receive_first[p], static_cast<int64_t>(r.receive_rows[p]));
    expert_gemms(Weight::fc, Transpose::yes, d_fc_out_, d_expert_in_, r.first_expert, r.end_expert);
  };
  const auto weight_gradients = [&] {
    weight_grads(d_proj_, d_proj_bias_, c, act_out_, d_expert_out_, h, c, scatter);
    weight_grads(d_fc_, d_fc_bias_, f, expert_in_, d_fc_out_, c, f, scatter);
  };
  exchange_in_rounds({d_rows_out_, d_expert_out_, d_expert_in_, d_rows_in_, rows_in_, expert_out_}, experts,
                     weight_gradients);
}

void MoeLayer::expert_gemms(Weight which, Transpose transpose, ConstActPtr in, ActPtr out, int64_t first,
                            int64_t end) {
  // fc's weight is [c, f], proj's [h, c]: `in` has the weight's rows (or columns, transposed)
  // as its width, `out` the other.
  const int64_t rows = which == Weight::fc ? c_ : hidden_, cols = which == Weight::fc ? fc_width_ : c_;
  const int64_t in_width = transpose == Transpose::no ? rows : cols, out_width = transpose == Transpose::no ? cols : rows;
  const ConstActPtr shards = which == Weight::fc ? fc_ : proj_;
  const ActPtr gathered = which == Weight::fc ? fc_gathered_ : proj_gathered_;
  const int64_t block = rows * cols, shard = z_split_ ? block / grid_.layout().z : block;
  for (const ExpertChunk& chunk : exchange_.chunks) {
    if (chunk.rows == 0 || chunk.expert < first || chunk.expert >= end) continue;
    const int64_t e = chunk.expert;
    const ConstActPtr w = z_split_ ? ConstActPtr(gathered + e * block) : shards + e * shard;
    backend_.gemm(Transpose::no, transpose, chunk.rows, out_width, in_width, 1.0f, in + chunk.start * in_width,
                  in_width, w, cols, 0.0f, out + chunk.start * out_width, out_width);
  }
}

void MoeLayer::activate(int64_t first, int64_t rows) {
  const int64_t h = hidden_, f = fc_width_;
  if (swiglu_)
    backend_.swiglu_forward(act_out_ + first * h, fc_out_ + first * f, rows, h);
  else
    backend_.gelu_forward(act_out_ + first * h, fc_out_ + first * f, rows * h);
}

void MoeLayer::activate_backward(int64_t first, int64_t rows) {
  const int64_t h = hidden_, f = fc_width_;
  if (swiglu_)
    backend_.swiglu_backward(d_fc_out_ + first * f, fc_out_ + first * f, d_act_ + first * h, rows, h);
  else
    backend_.gelu_backward(d_act_ + first * h, fc_out_ + first * f, d_act_ + first * h, rows * h);
}

void MoeLayer::add_expert_biases(ActPtr rows, const float* bias, int64_t width, int64_t first, int64_t end) {
  if (bias == nullptr) return;
  for (const ExpertChunk& chunk : exchange_.chunks)
    if (chunk.rows > 0 && chunk.expert >= first && chunk.expert < end)
      backend_.bias_forward(rows + chunk.start * width, bias + chunk.expert * width, chunk.rows, width, width);
}

void MoeLayer::backward(ConstActPtr dout, ConstActPtr in, ActPtr d_in, GradScatter& scatter) {
  const int64_t m = m_, E = experts_, k = top_k_, c = c_, h = hidden_, f = fc_width_, R = rows_;
  const int64_t Rr = exchange_.received;
  const bool padded = capacity_ > 0;
  // The combine's gradients: each used row's (its gate times its token's), each gate's.
  if (padded) {
    zero(gathers_ ? d_expert_out_ : d_rows_out_, (gathers_ ? Rr : R) * c);
    zero(d_act_, Rr * h);
    zero(d_expert_in_, Rr * c);
  }
  if (gathers_) {
    // The group's output gradients; each source's gates' gradients from this rank's experts'
    // outputs, summed back to their tokens' ranks.
    Communicator& expert = grid_.axis(CommAxis::expert);
    expert.all_gather(dout.raw(), group_tokens_.raw(), static_cast<size_t>(m * c), dout.type());
    dispatch_gathered(group_tokens_, d_expert_out_, true);
    for (int64_t s = 0; s < expert_ranks_; ++s)
      backend_.combine_gates_grad(d_gates_all_ + s * m * k, group_tokens_ + s * m * c, expert_out_,
                                  slots_all_ + s * m * k, m, k, Rr, c);
    expert.reduce_scatter(d_gates_all_, d_gates_, static_cast<size_t>(m * k), ElementType::float32);
  } else {
    for (int64_t e = 0; e < E; ++e) {
      const auto ei = static_cast<size_t>(e);
      if (const int64_t n = plan_.used[ei]; n > 0)
        backend_.gather_rows(rows_of(d_rows_out_, e, c), dout, token_of_row_ + plan_.listed[ei],
                             row_gates_ + plan_.listed[ei], n, m, c);
    }
    if (rounds_ == 1) to_experts(d_rows_out_, d_expert_out_);
    backend_.combine_gates_grad(d_gates_, dout, rows_out_, slots_, m, k, R, c);
  }
  grid_.axis(CommAxis::x).all_reduce(d_gates_, static_cast<size_t>(m * k), ElementType::float32);
  if (rounds_ > 1) {
    backward_in_rounds(scatter);
  } else {
    // proj: d(act out) = d(expert out)·W^T summed over x, then through the activation; dW,
    // dbias. dX first, then dW beside its sum (OAR): proj's dW reads the activation's output
    // and d(expert out), not d(act out); the activation's backward waits for the sum.
    expert_gemms(Weight::proj, Transpose::yes, d_expert_out_, d_act_);
    const Sum d_act_sum = start_sum(CommAxis::x, d_act_, Rr * h);
    weight_grads(d_proj_, d_proj_bias_, c, act_out_, d_expert_out_, h, c, scatter);
    finish_sum(d_act_sum);
    activate_backward(0, Rr);

    // fc: d(expert in) = d(fc out)·W^T summed over y; dW, dbias beside the sum.
    expert_gemms(Weight::fc, Transpose::yes, d_fc_out_, d_expert_in_);
    const Sum d_in_sum = start_sum(CommAxis::y, d_expert_in_, Rr * c);
    weight_grads(d_fc_, d_fc_bias_, f, expert_in_, d_fc_out_, c, f, scatter);
    finish_sum(d_in_sum);
  }

  // Back to the tokens: each token's rows summed, then the router's path added.
  if (gathers_) {
    combine_gathered(d_expert_in_, false, d_in);
  } else {
    if (rounds_ == 1) from_experts(d_expert_in_, d_rows_in_);
    zero(d_in, m * c);
    backend_.combine_rows(d_in, d_rows_in_, slots_, nullptr, m, k, R, c);
  }
  backend_.router_logits_grad(d_logits_, probs_, choices_, d_gates_, coef_, m, E, k);
  backend_.router_backward(d_in, d_router_, d_logits_, in, router_, m, c, E);
}

MoeLayer::Sum MoeLayer::start_sum(CommAxis axis, ActPtr buffer, int64_t elements) {
  Communicator& group = grid_.axis(axis);
  const auto count = static_cast<size_t>(elements);
  if (!overlap_ || group.size() == 1) {
    group.all_reduce(buffer.raw(), count, buffer.type());
    return {&group, std::nullopt};
  }
  return {&group, group.start_all_reduce(buffer.raw(), count, buffer.type())};
}

void MoeLayer::finish_sum(const Sum& sum) {
  if (sum.ticket) sum.group->finish(*sum.ticket);
}

void MoeLayer::weight_grads(float* grad, float* bias_grad, int64_t bias_width, ConstActPtr x, ConstActPtr dy,
                            int64_t k_local, int64_t n_local, GradScatter& scatter) {
  const int64_t block = k_local * n_local;
  const int64_t shard = z_split_ ? block / grid_.layout().z : block;
  for (int64_t e = 0; e < local_experts_; ++e) {
    float* dbias = bias_grad != nullptr ? bias_grad + e * bias_width : nullptr;
    // Without a z split the chunks add to the gradient; with one, to a block that is then
    // reduce-scattered: every expert's, also an expert no row reached here (others' may have).
    float* dw = z_split_ ? scatter.block(block) : grad + e * shard;
    float beta = z_split_ ? 0.0f : 1.0f;
    for (const ExpertChunk& chunk : exchange_.chunks) {
      if (chunk.expert != e || chunk.rows == 0) continue;
      backend_.linear_weight_grad(dw, beta, dbias, x + chunk.start * k_local, dy + chunk.start * n_local, chunk.rows,
                                  n_local, k_local);
      beta = 1.0f;
    }
    if (!z_split_) continue;
    if (beta == 0.0f) backend_.memset_zero(dw, static_cast<size_t>(block) * sizeof(float));
    scatter.add_to(grad + e * shard, dw, shard);
  }
}

}  // namespace axonn
