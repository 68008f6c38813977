// axonn ckpt export-hf CKPT_DIR -o MODEL_DIR [--step N] [--shard-size BYTES]
//
// The checkpoint's model (its model_config) must have the Llama form (hf_config.hpp,
// require_llama_form). Writes MODEL_DIR/config.json (LlamaForCausalLM) and the parameters as
// Hugging Face names and lays them out (runner/hf/llama_tensors.hpp), float32, in
// transformers' state_dict order: one model.safetensors, or shards of at most --shard-size
// bytes (save_pretrained's default, 5 GB) named model-0000i-of-0000n.safetensors with
// model.safetensors.index.json, as save_pretrained writes them. One axonn parameter is read
// at a time (checksums verified), so memory holds one tensor twice. Any layout's checkpoint
// exports the same files. The directory is staged and renamed at the end.
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/fs_util.hpp"
#include "checkpoint/rect.hpp"
#include "checkpoint/safetensors_writer.hpp"
#include "core/exit_codes.hpp"
#include "core/json_text.hpp"
#include "runner/ckpt/ckpt_format.hpp"
#include "runner/ckpt/ckpt_open.hpp"
#include "runner/ckpt/ckpt_resume.hpp"
#include "runner/ckpt/hf_commands.hpp"
#include "runner/ckpt/staged_dir.hpp"
#include "runner/cli/args.hpp"
#include "runner/hf/hf_config.hpp"
#include "runner/hf/llama_tensors.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

constexpr int64_t kDefaultShardBytes = 5'000'000'000;  // save_pretrained's max_shard_size="5GB"

int64_t bytes_of(const std::vector<int64_t>& shape) { return 4 * element_count(shape); }

// Consecutive tensors (in state_dict order) grouped into shards of at most `limit` bytes; a
// tensor larger than the limit is a shard alone.
std::vector<std::vector<HfTensor>> shards_of(const std::vector<HfTensor>& tensors, int64_t limit) {
  std::vector<std::vector<HfTensor>> shards(1);
  int64_t bytes = 0;
  for (const HfTensor& t : tensors) {
    if (!shards.back().empty() && bytes + bytes_of(t.shape) > limit) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(t);
    bytes += bytes_of(t.shape);
  }
  return shards;
}

std::string shard_name(size_t i, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return name;
}

// {"metadata": {"total_size": N}, "weight_map": {name: file, ...}} with names sorted, as
// save_pretrained writes it.
std::string index_json(const std::map<std::string, std::string>& weight_map, int64_t total_bytes) {
  std::string json = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total_bytes) +
                     "\n  },\n  \"weight_map\": {\n";
  size_t i = 0;
  for (const auto& [name, file] : weight_map)
    json += "    " + json_string(name) + ": " + json_string(file) + (++i < weight_map.size() ? ",\n" : "\n");
  return json + "  }\n}\n";
}

// Reads each axonn parameter once, however many HF tensors come from it (q, k and v from one
// fused qkv).
class SourceCache {
 public:
  explicit SourceCache(CheckpointReader& reader) : reader_(reader) {}
  const float* get(const std::string& name) {
    if (name != name_) {
      const TensorInfo& info = reader_.tensor(name);
      data_.resize(static_cast<size_t>(element_count(info.global_shape)));
      reader_.read(name, full_rect(info.global_shape), data_.data());
      name_ = name;
    }
    return data_.data();
  }

 private:
  CheckpointReader& reader_;
  std::string name_;
  std::vector<float> data_;
};

}  // namespace

int ckpt_export_hf(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"output", true, "the Hugging Face model directory to create (-o); must not exist"},
      {"step", true, "export another committed step than `latest` (CKPT_DIR is then the checkpoint directory)"},
      {"shard-size", true, "the most bytes of tensor data in one safetensors file (default 5000000000, as "
                           "save_pretrained); one file when everything fits"},
      {"help", false, "this help"},
  };
  CommandArgs long_argv = argv;
  for (std::string& a : long_argv)
    if (a == "-o") a = "--output";
  const std::optional<Args> parsed = parse_or_usage(long_argv, specs, "axonn ckpt export-hf CKPT_DIR -o MODEL_DIR");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  if (args.positionals().size() != 1)
    throw UsageError("takes one CKPT_DIR, got " + std::to_string(args.positionals().size()) +
                     "; see axonn ckpt export-hf --help");
  const std::optional<std::string> out = args.value("output");
  if (!out) throw UsageError("needs -o MODEL_DIR; see axonn ckpt export-hf --help");
  const int64_t shard_bytes =
      args.integer("shard-size", 1, std::numeric_limits<long>::max()).value_or(kDefaultShardBytes);
  const StepChoice choice = choose_step(args.positionals()[0], args.integer("step", 0, std::numeric_limits<long>::max()));
  CheckpointReader reader = open_step_choice(choice, false, "ckpt export-hf");
  const std::string index = (reader.step_dir() / "index.h5").string();
  const ModelShape model = parse_model_config(reader.metadata().model_config, index);
  require_llama_form(model);
  const std::vector<HfTensor> tensors = hf_llama_tensors(model);

  StagedDir staged(*out, "-o");
  write_file_atomic(staged.path() / "config.json", write_hf_config(model));
  const std::vector<std::vector<HfTensor>> shards = shards_of(tensors, shard_bytes);
  SourceCache sources(reader);
  std::map<std::string, std::string> weight_map;
  int64_t total = 0;
  std::vector<float> converted;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1 ? "model.safetensors" : shard_name(s, shards.size());
    std::vector<SafetensorsEntry> entries;
    for (const HfTensor& t : shards[s]) entries.push_back({t.name, t.shape});
    SafetensorsWriter writer(staged.path() / file, entries, {{"format", "pt"}});
    for (const HfTensor& t : shards[s]) {
      converted.assign(static_cast<size_t>(bytes_of(t.shape) / 4), 0.0f);
      axonn_to_hf(t.name, sources.get(t.axonn_source), converted.data(), model);
      writer.append(converted.data(), static_cast<int64_t>(converted.size()));
      weight_map[t.name] = file;
    }
    writer.finish();
    total += writer.data_bytes();
  }
  if (shards.size() > 1) write_file_atomic(staged.path() / "model.safetensors.index.json", index_json(weight_map, total));
  staged.commit();
  std::printf("wrote %s: config.json (LlamaForCausalLM) and %zu tensors in %zu safetensors file%s, %s float32, from "
              "step %lld written at %s\n",
              fs::absolute(*out).lexically_normal().string().c_str(), tensors.size(), shards.size(),
              shards.size() == 1 ? "" : "s", human_bytes(total).c_str(), static_cast<long long>(reader.step()),
              reader.metadata().layout.c_str());
  return exit_code::ok;
}

}  // namespace axonn
