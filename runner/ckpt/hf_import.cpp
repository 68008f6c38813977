// axonn ckpt import-hf MODEL_DIR --job JOB.toml -o CKPT_DIR
//
// Checks everything before writing anything: config.json against the job's [model] (every
// mismatch named), then every tensor the model needs present in the safetensors with its
// shape and a floating dtype, and no tensor it does not know. Then one axonn parameter at a
// time (at most one layer's q, k, v and fused qkv in memory): read its HF sources as float32,
// map them (runner/hf/llama_tensors.hpp: transposes, the rotary permutation, the fused
// layouts), write it as its own shard. The shards are committed as step 0 of a checkpoint
// that holds the parameters only (kImportedFrom), in a staged directory renamed to CKPT_DIR at
// the end. `axonn train` with checkpoint.dir = CKPT_DIR continues from it at any layout.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/commit.hpp"
#include "checkpoint/fs_util.hpp"
#include "checkpoint/rect.hpp"
#include "checkpoint/safetensors_dir.hpp"
#include "checkpoint/shard_writer.hpp"
#include "config/config_error.hpp"
#include "config/job_config.hpp"
#include "core/exit_codes.hpp"
#include "runner/ckpt/ckpt_format.hpp"
#include "runner/ckpt/hf_commands.hpp"
#include "runner/ckpt/staged_dir.hpp"
#include "runner/cli/args.hpp"
#include "runner/hf/hf_config.hpp"
#include "runner/hf/llama_tensors.hpp"
#include "trainer/train/training_checkpoint.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

// A buffer dtype the reader widens to float32 exactly (or rounds, F64).
bool floating(SafetensorsType t) {
  return t == SafetensorsType::f32 || t == SafetensorsType::f64 || t == SafetensorsType::f16 ||
         t == SafetensorsType::bf16;
}

// Buffers transformers registers but does not learn (older Llama checkpoints save them).
bool ignorable(const std::string& name) {
  const std::string suffix = ".rotary_emb.inv_freq";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// config.json against the job: ConfigError listing every mismatch.
void check_config(const fs::path& model_dir, const ModelShape& job, const std::string& job_path) {
  const fs::path config = model_dir / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(config, ec))
    throw ConfigError(config.string() + ": not found; MODEL_DIR must be a Hugging Face model directory "
                                        "(config.json beside model.safetensors or model.safetensors.index.json)");
  const HfLlamaConfig hf = read_hf_config(read_text_file(config), config.string());
  const std::vector<std::string> mismatches = config_mismatches(hf, job);
  if (mismatches.empty()) return;
  std::string all;
  for (const std::string& m : mismatches) all += (all.empty() ? "" : "; ") + m;
  throw ConfigError(config.string() + ": " + std::to_string(mismatches.size()) + " mismatch" +
                    (mismatches.size() == 1 ? "" : "es") + " with the [model] of " + job_path + ": " + all +
                    "; import into a job whose [model] is the checkpoint's");
}

// Every tensor the model needs, with its shape and a floating dtype; no tensor it does not
// know. SafetensorsError naming the file, the tensor and the field.
void check_tensors(const SafetensorsDir& dir, const ModelShape& model) {
  std::set<std::string> expected;
  for (const HfTensor& t : hf_llama_tensors(model)) {
    expected.insert(t.name);
    const SafetensorsDir::Found found = dir.at(t.name);
    const std::string where = found.file->path().string() + ": tensor " + t.name;
    if (found.tensor->shape != t.shape)
      throw SafetensorsError(where + ": shape " + shape_string(found.tensor->shape) + ", but config.json's model has " +
                             shape_string(t.shape));
    if (!floating(found.tensor->dtype))
      throw SafetensorsError(where + ": dtype " + safetensors_type_name(found.tensor->dtype) +
                             " is no floating type (F32, BF16, F16 or F64 are read)");
  }
  for (const std::string& name : dir.names())
    if (!expected.count(name) && !ignorable(name))
      throw SafetensorsError(dir.at(name).file->path().string() + ": tensor " + name +
                             " is no tensor of LlamaForCausalLM at this config (a quantized, adapter or other "
                             "architecture's checkpoint?); import reads plain Llama weights only");
}

std::vector<float> read_whole(const SafetensorsDir& dir, const std::string& name) {
  const SafetensorsDir::Found found = dir.at(name);
  std::vector<float> data(static_cast<size_t>(found.tensor->elements()));
  found.file->read_floats(*found.tensor, 0, found.tensor->elements(), data.data());
  return data;
}

Metadata imported_metadata(const JobConfig& job, const fs::path& model_dir, const std::string& job_path) {
  Metadata md;
  md.layout = "1x1x1x1";  // whole tensors, as a serial run writes them
  md.model_config = model_config_text(job.model);
  md.data_cursor = 0;  // no rng_state: the resumed run's sample order is its job's seed
  md.ints["step"] = 0;
  md.ints["training.global_batch"] = job.training.global_batch;
  md.ints["training.steps"] = job.training.steps;
  md.ints["training.shard_optimizer"] = 0;
  md.reals["training.last_lr"] = 0.0;
  md.strings["job"] = job_path;
  md.strings[kImportedFrom] = fs::absolute(model_dir).lexically_normal().string();
  return md;
}

}  // namespace

int ckpt_import_hf(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"job", true, "the job whose [model] the weights are for (config.json must match it)"},
      {"output", true, "the checkpoint directory to create (-o); must not exist"},
      {"help", false, "this help"},
  };
  CommandArgs long_argv = argv;
  for (std::string& a : long_argv)
    if (a == "-o") a = "--output";
  const std::optional<Args> parsed =
      parse_or_usage(long_argv, specs, "axonn ckpt import-hf MODEL_DIR --job JOB.toml -o CKPT_DIR");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  if (args.positionals().size() != 1)
    throw UsageError("takes one MODEL_DIR, got " + std::to_string(args.positionals().size()) +
                     "; see axonn ckpt import-hf --help");
  const std::optional<std::string> job_path = args.value("job");
  const std::optional<std::string> out = args.value("output");
  if (!job_path || !out) throw UsageError("needs --job JOB.toml and -o CKPT_DIR; see axonn ckpt import-hf --help");
  const fs::path model_dir = args.positionals()[0];

  const JobConfig job = load_job_config(*job_path, SiteConfig{}, {});
  require_llama_form(job.model);
  check_config(model_dir, job.model, *job_path);
  const SafetensorsDir weights(model_dir);
  check_tensors(weights, job.model);

  StagedDir staged(*out, "-o");
  const std::vector<AxonnFromHf> tensors = axonn_llama_tensors(job.model);
  std::vector<int> ranks;
  int64_t parameters = 0;
  std::vector<float> converted;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AxonnFromHf& t = tensors[i];
    std::vector<std::vector<float>> sources;
    std::vector<const float*> pointers;
    for (const std::string& name : t.hf_sources) sources.push_back(read_whole(weights, name));
    for (const auto& s : sources) pointers.push_back(s.data());
    const int64_t elements = element_count(t.shape);
    converted.assign(static_cast<size_t>(elements), 0.0f);
    hf_to_axonn(t.name, pointers, converted.data(), job.model);
    const TensorSlice slice{t.name, t.shape, full_rect(t.shape), converted.data()};
    write_shard(staged.path(), 0, static_cast<int>(i), {&slice, 1});
    ranks.push_back(static_cast<int>(i));
    parameters += elements;
  }
  const CommitResult committed =
      commit(staged.path(), 0, ranks, imported_metadata(job, model_dir, *job_path), 1, std::chrono::seconds(60));
  staged.commit();
  std::printf(
      "imported %s: %zu tensors, %lld parameters (%s as float32) into %s (step 0, parameters only: AdamW starts "
      "from zero); continue with checkpoint.dir = \"%s\" in %s, at any layout\n",
      model_dir.string().c_str(), tensors.size(), static_cast<long long>(parameters),
      human_bytes(committed.data_bytes).c_str(), fs::absolute(*out).lexically_normal().string().c_str(),
      fs::absolute(*out).lexically_normal().string().c_str(), job_path->c_str());
  return exit_code::ok;
}

}  // namespace axonn
