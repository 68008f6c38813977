#include "runner/hf/llama_tensors.hpp"

#include <algorithm>
#include <stdexcept>

#include "runner/hf/hf_config.hpp"

namespace axonn {
namespace {

// How one HF tensor sits in its axonn parameter: copied as is (embeddings, norms), or a
// linear weight [R out, K in] transposed into some of the columns of axonn's [K, W].
enum class Map { copy, q, k, v, o, gate, up, down };

struct Piece {
  std::string hf;
  std::vector<int64_t> hf_shape;
  std::string axonn;
  std::vector<int64_t> axonn_shape;
  Map map = Map::copy;
  int part = 0;  // its index among the axonn parameter's sources
};

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

// Every (HF tensor, axonn parameter) pair of `m`, in HF's state_dict order.
std::vector<Piece> pieces(const ModelShape& m) {
  require_llama_form(m);
  const int64_t C = m.hidden, V = m.vocab, F = m.ffn(), H = m.heads, KV = m.kv(), d = m.head_dim();
  const std::vector<int64_t> qkv =
      m.grouped_attention() ? std::vector<int64_t>{C, KV, H / KV + 2, d} : std::vector<int64_t>{C, 3, C};
  std::vector<Piece> out;
  out.push_back({"model.embed_tokens.weight", {V, C}, "wte", {V, C}, Map::copy, 0});
  for (int l = 0; l < m.layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".", ax = "h." + std::to_string(l) + ".";
    out.push_back({hf + "self_attn.q_proj.weight", {H * d, C}, ax + "attn.qkv.weight", qkv, Map::q, 0});
    out.push_back({hf + "self_attn.k_proj.weight", {KV * d, C}, ax + "attn.qkv.weight", qkv, Map::k, 1});
    out.push_back({hf + "self_attn.v_proj.weight", {KV * d, C}, ax + "attn.qkv.weight", qkv, Map::v, 2});
    out.push_back({hf + "self_attn.o_proj.weight", {C, H * d}, ax + "attn.proj.weight", {H * d, C}, Map::o, 0});
    out.push_back({hf + "mlp.gate_proj.weight", {F, C}, ax + "mlp.fc.weight", {C, 2, F}, Map::gate, 0});
    out.push_back({hf + "mlp.up_proj.weight", {F, C}, ax + "mlp.fc.weight", {C, 2, F}, Map::up, 1});
    out.push_back({hf + "mlp.down_proj.weight", {C, F}, ax + "mlp.proj.weight", {F, C}, Map::down, 0});
    out.push_back({hf + "input_layernorm.weight", {C}, ax + "ln1.weight", {C}, Map::copy, 0});
    out.push_back({hf + "post_attention_layernorm.weight", {C}, ax + "ln2.weight", {C}, Map::copy, 0});
  }
  out.push_back({"model.norm.weight", {C}, "ln_f.weight", {C}, Map::copy, 0});
  if (!m.tie_embeddings) out.push_back({"lm_head.weight", {V, C}, "lm_head.weight", {V, C}, Map::copy, 0});
  return out;
}

// The column of axonn's qkv [C, W] where head `head` of q (part 0), k (1) or v (2) starts:
// [C, 3, C] is q | k | v, each H*d in head order; grouped [C, KV, H/KV + 2, d] is, per group
// j, query heads j*H/KV .. (j+1)*H/KV - 1, then k head j, then v head j.
int64_t qkv_column(const ModelShape& m, int part, int64_t head) {
  const int64_t d = m.head_dim();
  if (!m.grouped_attention()) return part * m.hidden + head * d;
  const int64_t per_group = m.heads / m.kv(), slots = per_group + 2;
  if (part == 0) return ((head / per_group) * slots + head % per_group) * d;
  return (head * slots + per_group + (part - 1)) * d;
}

// columns[r]: the axonn column that HF row r of a linear weight lands in.
std::vector<int64_t> columns(const Piece& p, const ModelShape& m) {
  const int64_t rows = p.hf_shape[0], d = m.head_dim();
  std::vector<int64_t> col(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / d, i = r % d;
    int64_t c = r;
    if (p.map == Map::q || p.map == Map::k) c = qkv_column(m, p.part, head) + interleaved_of_hf_row(i, d);
    if (p.map == Map::v) c = qkv_column(m, p.part, head) + i;
    if (p.map == Map::up) c = m.ffn() + r;
    col[static_cast<size_t>(r)] = c;
  }
  return col;
}

// Moves one piece between HF's [R, K] and axonn's [K, W] (or copies it), in 32x32 tiles so
// both sides are read and written a cache line at a time.
void move(const Piece& p, const ModelShape& m, const float* from, float* to, bool to_axonn) {
  if (p.map == Map::copy) {
    std::copy(from, from + elements(p.hf_shape), to);
    return;
  }
  const int64_t R = p.hf_shape[0], K = p.hf_shape[1], W = elements(p.axonn_shape) / K;
  const std::vector<int64_t> col = columns(p, m);
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < R; r0 += kTile) {
    for (int64_t k0 = 0; k0 < K; k0 += kTile) {
      for (int64_t r = r0; r < std::min(R, r0 + kTile); ++r) {
        const int64_t c = col[static_cast<size_t>(r)];
        for (int64_t k = k0; k < std::min(K, k0 + kTile); ++k) {
          if (to_axonn) {
            to[k * W + c] = from[r * K + k];
          } else {
            to[r * K + k] = from[k * W + c];
          }
        }
      }
    }
  }
}

}  // namespace

std::vector<HfTensor> hf_llama_tensors(const ModelShape& model) {
  std::vector<HfTensor> out;
  for (const Piece& p : pieces(model)) out.push_back({p.hf, p.hf_shape, p.axonn});
  return out;
}

std::vector<AxonnFromHf> axonn_llama_tensors(const ModelShape& model) {
  const std::vector<Piece> all = pieces(model);
  // gpt_parameters' order: the embeddings and the blocks' weights, then the norms' gains.
  std::vector<std::string> names = {"wte"};
  if (!model.tie_embeddings) names.push_back("lm_head.weight");
  for (int l = 0; l < model.layers; ++l)
    for (const char* t : {"attn.qkv.weight", "attn.proj.weight", "mlp.fc.weight", "mlp.proj.weight"})
      names.push_back("h." + std::to_string(l) + "." + t);
  for (int l = 0; l < model.layers; ++l)
    for (const char* t : {"ln1.weight", "ln2.weight"}) names.push_back("h." + std::to_string(l) + "." + t);
  names.push_back("ln_f.weight");

  std::vector<AxonnFromHf> out;
  for (const std::string& name : names) {
    AxonnFromHf t{name, {}, {}};
    for (const Piece& p : all) {  // pieces() lists each parameter's sources in part order
      if (p.axonn != name) continue;
      t.shape = p.axonn_shape;
      t.hf_sources.push_back(p.hf);
    }
    out.push_back(std::move(t));
  }
  return out;
}

void hf_to_axonn(const std::string& axonn_name, const std::vector<const float*>& hf_sources, float* out,
                 const ModelShape& model) {
  std::vector<Piece> mine;
  for (Piece& p : pieces(model))
    if (p.axonn == axonn_name) mine.push_back(std::move(p));
  if (mine.empty()) throw std::invalid_argument("hf_to_axonn: " + axonn_name + " is no parameter of this Llama model");
  if (mine.size() != hf_sources.size())
    throw std::invalid_argument("hf_to_axonn: " + axonn_name + " is built from " + std::to_string(mine.size()) +
                                " HF tensors (" + mine.front().hf + ", ...), but " + std::to_string(hf_sources.size()) +
                                " were given");
  for (const Piece& p : mine) move(p, model, hf_sources[static_cast<size_t>(p.part)], out, true);
}

void axonn_to_hf(const std::string& hf_name, const float* axonn_source, float* out, const ModelShape& model) {
  for (const Piece& p : pieces(model)) {
    if (p.hf != hf_name) continue;
    move(p, model, axonn_source, out, false);
    return;
  }
  throw std::invalid_argument("axonn_to_hf: " + hf_name + " is no tensor of this Llama model");
}

}  // namespace axonn
