#include "config/job_config.hpp"

#include <csignal>
#include <filesystem>
#include <sstream>
#include <utility>

#include "config/config_error.hpp"
#include "config/switch_map.hpp"
#include "config/toml_reader.hpp"

namespace axonn {
namespace {

namespace fs = std::filesystem;

std::string absolute_from(const fs::path& base, const std::string& p) {
  if (p.empty()) return p;
  const fs::path path(p);
  return (path.is_absolute() ? path : base / path).lexically_normal().string();
}

constexpr int64_t kMaxDim = int64_t{1} << 24;

// data.format's words (trainer/data/token_data.hpp reads each).
const std::vector<std::string> kDataFormats = {"auto", "tokens", "text", "megatron"};

// The divisor of n closest to target (the smaller one on a tie).
int nearest_divisor(int n, int target) {
  for (int d = 0;; ++d) {
    if (target - d >= 1 && n % (target - d) == 0) return target - d;
    if (n % (target + d) == 0) return target + d;
  }
}

// A number as TOML reader messages show it ("0.5", "1e+06").
std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// The keys that shape a mixture-of-experts model: only meaningful with model.experts > 0, so
// a dense job that sets one is an error rather than a setting silently ignored.
void reject_moe_keys_of_a_dense_model(TomlReader& t, const ModelShape& m) {
  const std::pair<const char*, std::string> given[] = {{"top_k", std::to_string(m.top_k)},
                                                       {"moe_every", std::to_string(m.moe_every)},
                                                       {"capacity_factor", number_text(m.capacity_factor)},
                                                       {"aux_loss_weight", number_text(m.aux_loss_weight)},
                                                       {"moe_chunks", moe_chunks_name(m)}};
  for (const auto& [key, value] : given)
    if (t.has(key))
      t.fail(key, "= " + value +
                      " applies only to a mixture-of-experts model, and this one is dense (model.experts = 0); "
                      "set model.experts to the number of experts, or drop model." +
                      key);
}

// model.experts and the MoE keys (layout_inputs.hpp, ModelShape). model.layers is read.
void read_experts(TomlReader& t, ModelShape& m) {
  m.experts = static_cast<int>(t.integer("experts", m.experts, 0, kMaxDim));
  m.top_k = static_cast<int>(t.integer("top_k", m.top_k, 1, 2));
  m.moe_every = static_cast<int>(t.integer("moe_every", m.moe_every, 1, m.layers));
  m.capacity_factor = t.number("capacity_factor", m.capacity_factor, 0.0, 1e6);
  m.aux_loss_weight = t.number("aux_loss_weight", m.aux_loss_weight, 0.0, 1e6);
  const auto chunks = t.integer_or_auto(
      "moe_chunks", m.moe_chunks_auto() ? std::nullopt : std::optional<int64_t>(m.moe_chunks), 1, 1024);
  m.moe_chunks = chunks ? static_cast<int>(*chunks) : ModelShape::kAutoMoeChunks;
  if (!m.moe()) reject_moe_keys_of_a_dense_model(t, m);
  if (m.moe() && m.top_k > m.experts) {
    // A token goes to top_k distinct experts, so there must be that many (only E = 1 has too few).
    const std::string fix = "; set model.top_k = 1 or model.experts >= 2";
    const std::string experts = std::to_string(m.experts), top_k = std::to_string(m.top_k);
    if (t.has("top_k")) t.fail("top_k", "= " + top_k + " is more than model.experts = " + experts + fix);
    t.fail("experts", "= " + experts + " is fewer than model.top_k = " + top_k + " (its default)" + fix);
  }
}

// The keys that only mean something with another key's value: an error when given without
// it, rather than a setting silently ignored.
void reject_keys_without(TomlReader& t, const std::vector<std::string>& keys, const std::string& needs) {
  for (const std::string& key : keys)
    if (t.has(key)) t.fail(key, "applies only with " + needs + "; set that, or drop model." + key);
}

// [model.rope_scaling]: Llama 3.1's frequency scaling, keyed as Hugging Face's config.json
// keys it (layout_inputs.hpp, RopeScaling).
RopeScaling read_rope_scaling(TomlReader&& t) {
  RopeScaling s;
  t.string("rope_type", "llama3", {"llama3"});
  s.factor = t.number("factor", s.factor, 1.0, 1e6);
  s.low_freq_factor = t.number("low_freq_factor", s.low_freq_factor, 1e-6, 1e6);
  s.high_freq_factor = t.number("high_freq_factor", s.high_freq_factor, 1e-6, 1e6);
  s.original_positions =
      static_cast<int>(t.integer("original_max_position_embeddings", s.original_positions, 1, kMaxDim));
  if (s.high_freq_factor <= s.low_freq_factor)
    t.fail("high_freq_factor", "= " + number_text(s.high_freq_factor) + " must be above low_freq_factor = " +
                                   number_text(s.low_freq_factor) + " (Llama 3.1: 4 and 1)");
  t.finish();
  return s;
}

// The architecture keys (layout_inputs.hpp, ModelShape): normalization, MLP, positions,
// grouped-query attention, biases, tied embeddings. model.hidden and model.heads are read.
void read_architecture(TomlReader& t, ModelShape& m) {
  m.norm = t.string("norm", norm_name(m.norm), {"layernorm", "rmsnorm"}) == "rmsnorm" ? Norm::rmsnorm
                                                                                       : Norm::layernorm;
  m.norm_eps = t.number("norm_eps", m.norm_eps, 1e-12, 1.0);
  m.mlp = t.string("mlp", mlp_name(m.mlp), {"gelu", "swiglu"}) == "swiglu" ? Mlp::swiglu : Mlp::gelu;
  m.mlp_hidden = static_cast<int>(t.integer("mlp_hidden", m.ffn(), 1, kMaxDim));
  m.positions = t.string("positions", positions_name(m.positions), {"learned", "rope"}) == "rope"
                    ? Positions::rope
                    : Positions::learned;
  m.rope_theta = t.number("rope_theta", m.rope_theta, 1.0, 1e12);  // read always, so "valid keys" lists it
  if (m.positions == Positions::rope) {
    if (t.has("rope_scaling")) m.rope_scaling = read_rope_scaling(t.table("rope_scaling"));
    if (m.head_dim() % 2 != 0)
      t.fail("positions", "= \"rope\" rotates pairs of a head's elements, and the head size model.hidden / "
                          "model.heads = " +
                              std::to_string(m.head_dim()) + " is odd; pick hidden and heads with an even ratio");
  } else {
    reject_keys_without(t, {"rope_theta", "rope_scaling"}, "model.positions = \"rope\"");
  }
  m.kv_heads = static_cast<int>(t.integer("kv_heads", m.heads, 1, m.heads));
  if (m.heads % m.kv_heads != 0)
    t.fail("kv_heads", "= " + std::to_string(m.kv_heads) + " must divide model.heads = " + std::to_string(m.heads) +
                           " (each key/value head serves an equal group of query heads); the nearest that does is " +
                           std::to_string(nearest_divisor(m.heads, m.kv_heads)));
  m.bias = t.boolean("bias", m.bias);
  m.tie_embeddings = t.boolean("tie_embeddings", m.tie_embeddings);
}

JobConfig read_job(toml::table root, const std::string& file, const fs::path& data_base, const SiteConfig& site,
                   const std::vector<std::string>& overrides) {
  apply_overrides(root, overrides, file);
  JobConfig job;
  job.source = file;
  TomlReader r(root, file, "");
  {
    auto t = r.table("model");
    ModelShape& m = job.model;
    m.layers = static_cast<int>(t.integer("layers", m.layers, 1, 1024));
    m.hidden = static_cast<int>(t.integer("hidden", m.hidden, 1, kMaxDim));
    m.heads = static_cast<int>(t.integer("heads", m.heads, 1, m.hidden));
    if (m.hidden % m.heads != 0) {
      const std::string fix =
          "; the nearest head count that divides it is " + std::to_string(nearest_divisor(m.hidden, m.heads));
      const std::string hidden = std::to_string(m.hidden), heads = std::to_string(m.heads);
      if (t.has("heads")) t.fail("heads", "= " + heads + " must divide model.hidden = " + hidden + fix);
      t.fail("hidden", "= " + hidden + " must be a multiple of model.heads = " + heads + fix);  // heads by default
    }
    m.vocab = static_cast<int>(t.integer("vocab", m.vocab, 2, kMaxDim));
    m.sequence = static_cast<int>(t.integer("sequence", m.sequence, 1, kMaxDim));
    read_architecture(t, m);
    read_experts(t, m);
    t.finish();
  }
  {
    auto t = r.table("training");
    TrainingConfig& c = job.training;
    c.global_batch = static_cast<int>(t.integer("global_batch", c.global_batch, 1, kMaxDim));
    c.micro_batch = static_cast<int>(t.integer("micro_batch", c.micro_batch, 1, c.global_batch));
    c.steps = static_cast<int>(t.integer("steps", c.steps, 1, 1'000'000'000));
    c.lr = t.number("lr", c.lr, 1e-12, 10.0);
    c.min_lr = t.number("min_lr", std::min(c.min_lr, c.lr), 0.0, c.lr);
    c.warmup_steps = static_cast<int>(t.integer("warmup_steps", std::min(c.warmup_steps, c.steps), 0, c.steps));
    c.schedule = t.string("schedule", c.schedule, {"cosine", "constant"});
    c.weight_decay = t.number("weight_decay", c.weight_decay, 0.0, 10.0);
    c.grad_clip = t.number("grad_clip", c.grad_clip, 0.0, 1e9);
    c.beta1 = t.number("beta1", c.beta1, 0.0, 0.999999);
    c.beta2 = t.number("beta2", c.beta2, 0.0, 0.999999999);
    c.eps = t.number("eps", c.eps, 1e-30, 1.0);
    c.seed = static_cast<uint64_t>(t.integer("seed", static_cast<int64_t>(c.seed), 0, INT64_MAX));
    c.dtype = parse_element_type(t.string("dtype", element_type_name(site.default_dtype), {"float32", "bfloat16"}));
    c.device = t.string("device", c.device, {"auto", "cpu", "cuda"});
    c.overlap_comm = t.boolean_or_auto("overlap_comm", c.overlap_comm);
    const auto chunks = t.integer_or_auto("tp_chunks",
                                          c.tp_chunks == BatchShape::kAutoTpChunks ? std::nullopt
                                                                                   : std::optional<int64_t>(c.tp_chunks),
                                          1, BatchShape::kMaxTpChunks);
    c.tp_chunks = chunks ? static_cast<int>(*chunks) : BatchShape::kAutoTpChunks;
    const std::string recompute =
        t.string("recompute", recompute_setting_name(c.recompute), {"auto", "none", "attention", "block"});
    c.recompute.reset();
    for (Recompute mode : kRecomputeModes)
      if (recompute == recompute_name(mode)) c.recompute = mode;
    c.shard_optimizer = t.boolean_or_auto("shard_optimizer", c.shard_optimizer);
    t.finish();
  }
  {
    auto t = r.table("data");
    job.data.path = absolute_from(data_base, t.string("path", ""));
    job.data.format = t.string("format", job.data.format, kDataFormats);
    for (TomlReader& s : t.tables("sources")) {
      if (!s.has("path")) s.fail("path", "is missing; every data.sources entry names its path (and weight)");
      DataSourceConfig source;
      source.path = absolute_from(data_base, s.string("path", ""));
      source.format = s.string("format", source.format, kDataFormats);
      source.weight = s.number("weight", source.weight, 0.0, 1e12);
      s.finish();
      job.data.sources.push_back(source);
    }
    if (!job.data.sources.empty()) {
      if (t.has("path") || t.has("format"))
        t.fail(t.has("path") ? "path" : "format",
               "is set beside data.sources; a job trains on either one source (data.path, data.format) or a "
               "mixture ([[data.sources]] with path, format and weight): move it into a data.sources entry");
      double total = 0;
      for (const DataSourceConfig& s : job.data.sources) total += s.weight;
      if (!(total > 0)) t.fail("sources", "weights sum to 0; give at least one source a positive weight");
    }
    if (t.has("valid") && t.has("valid_fraction"))
      t.fail("valid_fraction", "is set beside data.valid; hold out either a file of its own (valid) or a fraction "
                               "of the training data (valid_fraction), not both");
    job.data.valid = absolute_from(data_base, t.string("valid", ""));
    job.data.valid_format = t.string("valid_format", job.data.valid_format, kDataFormats);
    job.data.valid_fraction = t.number("valid_fraction", job.data.valid_fraction, 0.0, 0.5);
    t.finish();
  }
  const fs::path cwd = fs::current_path();
  {
    auto t = r.table("checkpoint");
    job.checkpoint.dir = absolute_from(cwd, t.string("dir", site.checkpoint_dir));
    job.checkpoint.interval = static_cast<int>(t.integer("interval", job.checkpoint.interval, 0, 1'000'000'000));
    job.checkpoint.keep = static_cast<int>(t.integer("keep", job.checkpoint.keep, 1, 1'000'000));
    const auto memory_interval =
        t.integer_or_auto("memory_interval", job.checkpoint.fixed_memory_interval(), 0, 1'000'000'000);
    job.checkpoint.memory_interval =
        memory_interval ? static_cast<int>(*memory_interval) : CheckpointConfig::kAutoMemoryInterval;
    job.checkpoint.memory_dir = absolute_from(cwd, t.string("memory_dir", job.checkpoint.memory_dir));
    t.finish();
  }
  {
    auto t = r.table("run");
    job.run.dir = absolute_from(cwd, t.string("dir", job.run.dir));
    job.run.log_interval = static_cast<int>(t.integer("log_interval", job.run.log_interval, 1, 1'000'000'000));
    if (const std::string steps = t.string("trace_steps", ""); !steps.empty())
      job.run.trace_steps = parse_step_range("run.trace_steps", steps);
    job.run.straggler_factor = t.number("straggler_factor", job.run.straggler_factor, 1.0, 1e6);
    job.run.preempt_signal = t.string("preempt_signal", site.preempt_signal, kPreemptSignals);
    job.run.eval_interval = static_cast<int>(t.integer("eval_interval", job.run.eval_interval, 0, 1'000'000'000));
    job.run.eval_batches = static_cast<int>(t.integer("eval_batches", job.run.eval_batches, 1, 1'000'000));
    job.run.max_restarts = static_cast<int>(t.integer("max_restarts", job.run.max_restarts, 0, 1000));
    job.run.spare_nodes = static_cast<int>(t.integer("spare_nodes", job.run.spare_nodes, 0, 100'000));
    if (job.run.eval_interval > 0 && !job.data.held_out())
      t.fail("eval_interval", "= " + std::to_string(job.run.eval_interval) +
                                  " needs held-out data: set data.valid (a file) or data.valid_fraction (e.g. 0.01)");
    t.finish();
  }
  r.finish();
  return job;
}

}  // namespace

StepRange parse_step_range(const std::string& key, const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return ConfigError(key + " = \"" + text + "\": " + why +
                       "; give a step or a range of steps FIRST-LAST, counted from 1 (e.g. \"10-12\")");
  };
  const auto number = [&](const std::string& part) {
    if (part.empty() || part.size() > 12 || part.find_first_not_of("0123456789") != std::string::npos)
      throw bad("'" + part + "' is not a step number");
    const int64_t n = std::stoll(part);
    if (n < 1) throw bad("steps count from 1");
    return n;
  };
  const size_t dash = text.find('-');
  StepRange r;
  r.first = number(text.substr(0, dash));
  r.last = dash == std::string::npos ? r.first : number(text.substr(dash + 1));
  if (r.last < r.first) throw bad("the last step is before the first");
  return r;
}

std::string recompute_setting_name(const std::optional<Recompute>& recompute) {
  return recompute ? recompute_name(*recompute) : "auto";
}

std::string moe_chunks_name(const ModelShape& model) {
  return model.moe_chunks_auto() ? "auto" : std::to_string(model.moe_chunks);
}

std::string shard_setting_name(const std::optional<bool>& shard_optimizer) {
  return shard_optimizer ? (*shard_optimizer ? "true" : "false") : "auto";
}

std::vector<DataSourceConfig> DataConfig::training_sources() const {
  if (!sources.empty()) return sources;
  return {DataSourceConfig{path, format, 1.0}};
}

int preempt_signal_number(const std::string& name) {
  if (name == "USR1") return SIGUSR1;
  if (name == "USR2") return SIGUSR2;
  if (name == "HUP") return SIGHUP;
  throw ConfigError("preempt signal \"" + name + "\" is not one of \"USR1\", \"USR2\", \"HUP\"");
}

JobConfig load_job_config(const std::string& path, const SiteConfig& site, const std::vector<std::string>& overrides) {
  const fs::path folder = fs::absolute(fs::path(path)).parent_path();
  return read_job(parse_toml_file(path, "a job TOML (e.g. job_templates/tiny.toml)"), path, folder, site, overrides);
}

JobConfig load_job_config_string(const std::string& text, const std::string& name, const SiteConfig& site,
                                 const std::vector<std::string>& overrides) {
  return read_job(parse_toml_string(text, name), name, fs::current_path(), site, overrides);
}

namespace {

// Fitted kinds (their small-message lines and measured sweeps) in the chooser's units (us ->
// s, GB/s -> bytes/s).
void measured_links(const CollectiveFits& fits, KindLinks& kinds, SmallMessageLinks& small, KindSweeps& sweeps) {
  for (size_t k = 0; k < fits.size(); ++k) {
    if (!fits[k]) continue;
    const CollectiveFit& fit = *fits[k];
    kinds[k] = Link{fit.bandwidth_GBps * 1e9, fit.latency_us * 1e-6};
    sweeps[k] = fit.measured;
    if (fit.small_max_bytes > 0)
      small[k] =
          SmallMessageLink{fit.small_max_bytes, Link{fit.small_bandwidth_GBps * 1e9, fit.small_latency_us * 1e-6}};
  }
}

// A tier's fits, its groups', its overlap, its fill and its busy cores, as the chooser takes them.
MeasuredTier measured_tier(const SiteConfig& site, const SiteTier& tier) {
  MeasuredTier measured;
  measured_links(site.*tier.fits, measured.kinds, measured.small, measured.sweeps);
  for (const GroupFits& g : site.*tier.groups) {
    MeasuredGroup& group = measured.groups.emplace_back();
    group.ranks = g.ranks;
    measured_links(g.fits, group.kinds, group.small, group.sweeps);
    group.filled_by_others = g.filled_by_others;
    group.cores_busy = g.cores_busy;
    group.overlap = g.overlap;
  }
  measured.overlap = site.*tier.overlap;
  measured.filled_by_others = site.*tier.filled_by_others;
  measured.cores_busy = site.*tier.cores_busy;
  return measured;
}

}  // namespace

ChooserInput chooser_input(const SiteConfig& site, const JobConfig& job, int nodes, int tasks_per_node,
                           const std::vector<std::string>& hostnames) {
  if (nodes < 1 || tasks_per_node < 1)
    throw ConfigError("nodes = " + std::to_string(nodes) + " and tasks per node = " + std::to_string(tasks_per_node) +
                      " must both be >= 1");
  ChooserInput in;
  in.model = job.model;
  in.batch = {job.training.global_batch, job.training.micro_batch, job.training.dtype, job.training.tp_chunks};
  in.recompute = job.training.recompute;
  in.shard_optimizer = job.training.shard_optimizer;
  in.overlap_comm = job.training.overlap_comm;
  in.memory_copies = job.checkpoint.memory_copies();
  Machine& m = in.machine;
  m.nodes = nodes;
  m.tasks_per_node = tasks_per_node;
  m.nodes_per_switch = allocation_nodes_per_switch(site, nodes, hostnames);
  const double tflops =
      job.training.dtype == ElementType::float32 ? site.peak_tflops_float32 : site.peak_tflops_bfloat16;
  m.peak_flops = tflops * 1e12;
  m.compute_efficiency = site.efficiency;
  m.memory_bytes = site.memory_gib * 1024.0 * 1024.0 * 1024.0;
  m.memory_headroom = site.memory_headroom;
  m.intra_node = {site.intra_node_bandwidth_GBps * 1e9, site.intra_node_latency_us * 1e-6};
  m.inter_node = {site.inter_node_bandwidth_GBps * 1e9, site.inter_node_latency_us * 1e-6};
  m.inter_switch = {site.inter_switch_bandwidth_GBps * 1e9, site.inter_switch_latency_us * 1e-6};
  // What calibrate measured, at the job's dtype.
  m.gemm_flops = site_gemm_tflops(site, job.training.dtype) * 1e12;
  m.attention_flops = site_attention_tflops(site, job.training.dtype) * 1e12;
  m.elementwise_bytes_per_s = site.elementwise_GBps * 1e9;
  for (const SiteGemm& g : site.gemm)
    if (g.dtype == job.training.dtype) m.gemm_rates.push_back({{g.m, g.k, g.n}, g.tflops * 1e12});
  // "cuda", or "auto" on a GPU site; `axonn train` passes the device it resolved "auto" to.
  const bool host_ranks = job.training.device == "cpu";
  m.gemm_epilogues = !host_ranks;
  if (host_ranks) scale_compute(m, static_cast<double>(site.gpus_per_node) / tasks_per_node);
  static_assert(kSiteTiers[0].tier == LinkTier::intra_node && kSiteTiers[1].tier == LinkTier::inter_node &&
                kSiteTiers[2].tier == LinkTier::inter_switch);
  m.intra_node_measured = measured_tier(site, kSiteTiers[0]);
  m.inter_node_measured = measured_tier(site, kSiteTiers[1]);
  m.inter_switch_measured = measured_tier(site, kSiteTiers[2]);
  in.policy = site_policy(site);
  return in;
}

}  // namespace axonn
