// axonn ckpt import-hf / export-hf against an independent reference: tests/hf_llama_reference.py
// writes a small Llama as Hugging Face stores it (q/k rows permuted for rotate-half RoPE,
// Llama 3.1's rope scaling, grouped-query attention, untied head) with random weights, and
// its float64 PyTorch loss on a token file that holds exactly one global batch. The first
// step's loss of `axonn train` from the imported checkpoint is that loss at every layout;
// the export is bit-identical to the import's source; bad input exits 2 naming the file, the
// tensor and the field, and leaves no checkpoint directory.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "checkpoint/safetensors_dir.hpp"
#include "tests/process_helpers.hpp"
#include "tests/train_helpers.hpp"

namespace fs = std::filesystem;

namespace axonn::test {
namespace {

// The model tests/hf_llama_reference.py makes, as a job; one step of one global batch.
std::string llama_job(const fs::path& fixture, int steps) {
  return "[model]\nlayers = 2\nhidden = 32\nheads = 4\nkv_heads = 2\nvocab = 64\nsequence = 16\n"
         "norm = \"rmsnorm\"\nnorm_eps = 1e-5\nmlp = \"swiglu\"\nmlp_hidden = 48\npositions = \"rope\"\n"
         "rope_theta = 500000.0\nbias = false\ntie_embeddings = false\n"
         "[model.rope_scaling]\nfactor = 8.0\nlow_freq_factor = 1.0\nhigh_freq_factor = 4.0\n"
         "original_max_position_embeddings = 8192\n"
         "[training]\nglobal_batch = 4\nmicro_batch = 2\nsteps = " +
         std::to_string(steps) +
         "\nlr = 1e-3\nwarmup_steps = 0\nseed = 7\ndtype = \"float32\"\ndevice = \"cpu\"\n"
         "[data]\npath = \"" +
         (fixture / "tokens.bin").string() +
         "\"\nformat = \"tokens\"\n[checkpoint]\ndir = \"ckpt\"\n[run]\ndir = \"run\"\nlog_interval = 1\n";
}

class HfLlamaCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null") != 0)
      FAIL() << "/usr/bin/python3 cannot import torch and numpy: apt-get install python3-torch python3-numpy "
                "(scripts/install-deps.sh does)";
    dir_ = fresh_dir("hf-llama");
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // A fixture directory from the reference script; its reference loss in *loss.
  fs::path make_fixture(const std::string& name, const std::string& options, double* loss = nullptr) {
    const fs::path out = dir_ / name;
    const CommandResult r = run_command("/usr/bin/python3 " + kSourceDir + "/tests/hf_llama_reference.py make " +
                                            out.string() + " " + options,
                                        120);
    EXPECT_EQ(r.code, 0) << r.output;
    if (loss) reference_loss(out, loss);
    return out;
  }

  // The reference loss tests/hf_llama_reference.py wrote beside the fixture.
  static void reference_loss(const fs::path& fixture, double* loss) {
    const std::string json = read_text(fixture / "reference.json");
    std::smatch m;
    EXPECT_TRUE(std::regex_search(json, m, std::regex(R"("loss": ([-0-9.eE+]+))"))) << json;
    *loss = m.empty() ? NAN : std::stod(m[1]);
  }

  CommandResult ckpt(const std::string& args) { return run_command("cd " + dir_.string() + " && " + kAxonn + " ckpt " + args); }

  // Imports `fixture` into a fresh run directory `name` holding job.toml; returns it.
  fs::path imported_run(const std::string& name, const fs::path& fixture, int steps) {
    const fs::path run = dir_ / name;
    fs::create_directories(run);
    write_file(run / "job.toml", llama_job(fixture, steps));
    const CommandResult r = ckpt("import-hf " + fixture.string() + " --job " + (run / "job.toml").string() + " -o " +
                                 (run / "ckpt").string());
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "15 tensors, 19616 parameters")) << r.output;
    return run;
  }

  fs::path dir_;
};

// Every tensor of two model directories, as float32, equal bit for bit.
void expect_same_weights(const fs::path& a, const fs::path& b) {
  const SafetensorsDir x(a), y(b);
  auto names = [](const SafetensorsDir& d) {
    std::vector<std::string> n = d.names();
    std::sort(n.begin(), n.end());
    return n;
  };
  ASSERT_EQ(names(x), names(y));
  for (const std::string& name : x.names()) {
    const auto p = x.at(name), q = y.at(name);
    ASSERT_EQ(p.tensor->shape, q.tensor->shape) << name;
    std::vector<float> u(static_cast<size_t>(p.tensor->elements())), v(u.size());
    p.file->read_floats(*p.tensor, 0, p.tensor->elements(), u.data());
    q.file->read_floats(*q.tensor, 0, q.tensor->elements(), v.data());
    EXPECT_EQ(0, std::memcmp(u.data(), v.data(), u.size() * sizeof(float))) << name;
  }
}

TEST_F(HfLlamaCli, ImportedWeightsTrainFromTheReferenceLossAtEveryLayout) {
  double reference = 0;
  const fs::path fixture = make_fixture("sharded-f32", "--shards 2", &reference);
  std::vector<double> second;
  for (const std::string layout : {"1x1x1x1", "1x1x2x2", "2x2x1x1", "1x2x2x1"}) {
    const fs::path run = imported_run("run-" + layout, fixture, 2);
    const int ranks = layout == "1x1x1x1" ? 1 : 4;
    const CommandResult r = run_train(run, ranks, layout);
    ASSERT_EQ(r.code, 0) << layout << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "resum")) << r.output;
    const std::vector<StepLine> steps = read_metrics(run / "run");
    ASSERT_EQ(steps.size(), 2u) << layout;
    // float32 against float64: the loss of 64-way softmaxes over 64 tokens.
    EXPECT_NEAR(steps[0].loss, reference, 2e-6 * reference) << layout;
    second.push_back(steps[1].loss);
  }
  for (double loss : second) EXPECT_NEAR(loss, second[0], 2e-6 * second[0]) << "the second step, after AdamW from zero";
}

TEST_F(HfLlamaCli, ExportIsTheImportedModelBitForBitAndReimports) {
  for (const std::string options : {"--shards 3", "--shards 1 --dtype bf16"}) {
    const std::string name = options == "--shards 3" ? "f32" : "bf16";
    const fs::path fixture = make_fixture(name, options);
    const fs::path run = imported_run("run-" + name, fixture, 1);
    // Sharded like save_pretrained (a few KiB per file here), and one file when it fits.
    for (const std::string shard_size : {"20000", "5000000000"}) {
      const fs::path out = dir_ / ("export-" + name + "-" + shard_size);
      const CommandResult r = ckpt("export-hf " + (run / "ckpt").string() + " -o " + out.string() +
                                   " --shard-size " + shard_size);
      ASSERT_EQ(r.code, 0) << r.output;
      EXPECT_EQ(fs::exists(out / "model.safetensors.index.json"), shard_size == "20000") << r.output;
      expect_same_weights(fixture, out);  // bf16 widened exactly: the same values in F32
      if (shard_size == "20000") {  // the reference script reads the shards the export wrote
        const CommandResult loss = run_command("/usr/bin/python3 " + kSourceDir +
                                                   "/tests/hf_llama_reference.py loss " + out.string() + " --tokens " +
                                                   (fixture / "tokens.bin").string(),
                                               120);
        double reference = 0;
        reference_loss(fixture, &reference);
        EXPECT_NEAR(std::stod(loss.output), reference, 1e-9) << loss.output;
      }
      // The export imports again (its config.json is the job's model), to the same tensors.
      write_file(dir_ / "again.toml", llama_job(fixture, 1));
      const fs::path again = dir_ / ("again-" + name + "-" + shard_size);
      const CommandResult back =
          ckpt("import-hf " + out.string() + " --job " + (dir_ / "again.toml").string() + " -o " + again.string());
      ASSERT_EQ(back.code, 0) << back.output;
      expect_same_tensors(read_tensors(again), read_tensors(run / "ckpt"), 0.0f, "re-imported");
    }
  }
}

// Each bad input: exit 2, the message names what is wrong, and no checkpoint directory (nor
// its staging directory) is left.
TEST_F(HfLlamaCli, BadInputExitsTwoNamingTheFileTensorAndFieldAndLeavesNothing) {
  const fs::path good = make_fixture("good", "--shards 2");
  write_file(dir_ / "job.toml", llama_job(good, 1));
  auto variant = [&](const std::string& name) {
    const fs::path v = dir_ / name;
    fs::copy(good, v, fs::copy_options::recursive);
    return v;
  };
  auto edit_config = [](const fs::path& d, const std::string& from, const std::string& to) {
    std::string text = read_text(d / "config.json");
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    write_file(d / "config.json", text);
  };
  struct Case {
    fs::path model;
    std::string job, message;
  };
  std::vector<Case> cases;
  {
    const fs::path d = variant("kv-heads");
    edit_config(d, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 4");
    cases.push_back({d, "job.toml", "num_key_value_heads = 4 in config.json, but model.kv_heads = 2"});
  }
  {
    const fs::path d = variant("sliding-window");
    edit_config(d, "\"mlp_bias\": false", "\"mlp_bias\": false, \"sliding_window\": 4096");
    cases.push_back({d, "job.toml", "sliding_window"});
  }
  {
    const fs::path d = variant("attention-bias");
    edit_config(d, "\"attention_bias\": false", "\"attention_bias\": true");
    cases.push_back({d, "job.toml", "attention_bias"});
  }
  {
    const fs::path d = variant("tied");
    edit_config(d, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
    cases.push_back({d, "job.toml", "tie_word_embeddings"});
  }
  {
    const fs::path d = variant("missing-shard");
    fs::remove(d / "model-00002-of-00002.safetensors");
    cases.push_back({d, "job.toml", "model-00002-of-00002.safetensors"});
  }
  {
    const fs::path d = variant("truncated");  // the header's offsets run past the file
    const fs::path shard = d / "model-00001-of-00002.safetensors";
    fs::resize_file(shard, fs::file_size(shard) - 4);
    cases.push_back({d, "job.toml", "model-00001-of-00002.safetensors"});
  }
  {
    const fs::path d = variant("no-config");
    fs::remove(d / "config.json");
    cases.push_back({d, "job.toml", "config.json: not found"});
  }
  {
    // config.json and the job agree on a vocabulary the tensors do not have.
    const fs::path d = variant("vocab");
    edit_config(d, "\"vocab_size\": 64", "\"vocab_size\": 80");
    std::string job = llama_job(good, 1);
    job.replace(job.find("vocab = 64"), 10, "vocab = 80");
    write_file(dir_ / "vocab.toml", job);
    cases.push_back({d, "vocab.toml", "tensor model.embed_tokens.weight: shape [64, 32], but config.json's model has [80, 32]"});
  }
  for (const Case& c : cases) {
    const fs::path out = dir_ / ("out-" + c.model.filename().string());
    const CommandResult r =
        ckpt("import-hf " + c.model.string() + " --job " + (dir_ / c.job).string() + " -o " + out.string());
    EXPECT_EQ(r.code, 2) << c.model << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, c.message)) << c.model << "\n" << r.output;
    EXPECT_FALSE(fs::exists(out)) << c.model;
    EXPECT_FALSE(fs::exists(dir_ / ("." + out.filename().string() + ".partial"))) << c.model;
  }
  // An existing output directory is never written into.
  fs::create_directories(dir_ / "taken");
  const CommandResult taken =
      ckpt("import-hf " + good.string() + " --job " + (dir_ / "job.toml").string() + " -o " + (dir_ / "taken").string());
  EXPECT_EQ(taken.code, 2) << taken.output;
  EXPECT_TRUE(contains(taken.output, "already exists")) << taken.output;
  // A GPT-2 checkpoint has no Llama form to export.
  const fs::path gpt = dir_ / "gpt";
  fs::create_directories(gpt);
  write_file(gpt / "job.toml", tiny_job(2, 0));
  const CommandResult trained = run_train(gpt, 1, "1x1x1x1");
  ASSERT_EQ(trained.code, 0) << trained.output;
  const CommandResult gpt_export = ckpt("export-hf " + (gpt / "ckpt").string() + " -o " + (dir_ / "gpt-hf").string());
  EXPECT_EQ(gpt_export.code, 2) << gpt_export.output;
  EXPECT_FALSE(fs::exists(dir_ / "gpt-hf"));
}

}  // namespace
}  // namespace axonn::test
