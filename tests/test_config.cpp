// Site and job configs: the shipped files load; errors carry file:line:column and the
// allowed values; merge order; path resolution; unit conversion for the chooser.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "config/config_error.hpp"
#include "config/job_config.hpp"

namespace axonn {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = AXONN_SOURCE_DIR;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Config, EveryShippedFileLoads) {
  for (const auto& entry : fs::directory_iterator(kSource / "site_configs")) {
    const SiteConfig site = load_site_config(entry.path().string());
    EXPECT_GE(site.gpus_per_node, 1) << entry.path();
    for (const auto& job : fs::directory_iterator(kSource / "job_templates"))
      if (job.path().extension() == ".toml") {
        EXPECT_NO_THROW(load_job_config(job.path().string(), site)) << job.path();
      }
  }
  const SiteConfig dgx = load_site_config((kSource / "site_configs/dgx-h100.toml").string());
  EXPECT_EQ(dgx.gpus_per_node, 8);
  EXPECT_EQ(dgx.memory_gib, 80);
}

TEST(Config, UnknownKeyNamesPositionValidKeysAndSuggestion) {
  const std::string err = error_of([] {
    load_job_config_string("[model]\nlayers = 2\n\n[training]\nsteps = 3\nstesp = 4\n", "job.toml", SiteConfig{});
  });
  EXPECT_NE(err.find("job.toml:6:1: unknown key 'training.stesp'"), std::string::npos) << err;
  EXPECT_NE(err.find("did you mean 'training.steps'?"), std::string::npos) << err;
  EXPECT_NE(err.find("global_batch"), std::string::npos) << err;  // lists the valid keys
  const std::string top = error_of([] { load_site_config_string("[nodes]\ngpus_per_node = 2\n", "site.toml"); });
  EXPECT_NE(top.find("site.toml:1:2: unknown key 'nodes'"), std::string::npos) << top;
  EXPECT_NE(top.find("did you mean 'node'?"), std::string::npos) << top;
}

TEST(Config, WrongTypeNamesPositionAndExpectedType) {
  const std::string err = error_of([] { load_job_config_string("[model]\nhidden = \"big\"\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(err.find("j.toml:2:10: model.hidden must be an integer, got a string"), std::string::npos) << err;
}

TEST(Config, OutOfRangeNamesTheAllowedRange) {
  const std::string err = error_of([] { load_job_config_string("[training]\nsteps = 0\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(err.find("j.toml:2:9: training.steps = 0 is out of range; allowed [1, "), std::string::npos) << err;
  const std::string choice =
      error_of([] { load_job_config_string("[training]\nschedule = \"linear\"\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(choice.find("use one of \"cosine\", \"constant\""), std::string::npos) << choice;
  const std::string heads =
      error_of([] { load_job_config_string("[model]\nhidden = 64\nheads = 5\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(heads.find("model.heads = 5 must divide model.hidden = 64"), std::string::npos) << heads;
}

TEST(Config, SyntaxErrorHasPosition) {
  const std::string err = error_of([] { load_job_config_string("[model\nlayers = 2\n", "bad.toml", SiteConfig{}); });
  EXPECT_EQ(err.rfind("bad.toml:1:", 0), 0u) << err;
}

TEST(Config, MergeOrderDefaultsSiteJobOverride) {
  SiteConfig site;
  site.default_dtype = Dtype::bfloat16;
  site.checkpoint_dir = "/site/ckpt";
  // The job is silent: the site's policy fills dtype and checkpoint dir.
  JobConfig silent = load_job_config_string("[model]\nlayers = 3\n", "j.toml", site);
  EXPECT_EQ(silent.training.dtype, Dtype::bfloat16);
  EXPECT_EQ(silent.checkpoint.dir, "/site/ckpt");
  EXPECT_EQ(silent.training.steps, TrainingConfig{}.steps);  // built-in default
  // The job speaks: it wins over the site.
  JobConfig speaks =
      load_job_config_string("[training]\ndtype = \"float32\"\n[checkpoint]\ndir = \"/job/ckpt\"\n", "j.toml", site);
  EXPECT_EQ(speaks.training.dtype, Dtype::float32);
  EXPECT_EQ(speaks.checkpoint.dir, "/job/ckpt");
  // An override wins over both, and is as strict as the file.
  JobConfig over = load_job_config_string("[training]\nsteps = 5\n", "j.toml", site,
                                          {"training.steps=20", "training.dtype=float32", "checkpoint.dir=/o"});
  EXPECT_EQ(over.training.steps, 20);
  EXPECT_EQ(over.training.dtype, Dtype::float32);
  EXPECT_EQ(over.checkpoint.dir, "/o");
  const std::string err = error_of([&] { load_job_config_string("", "j.toml", site, {"training.stepz=3"}); });
  EXPECT_NE(err.find("unknown key 'training.stepz'"), std::string::npos) << err;
  const std::string neg = error_of([&] { load_job_config_string("", "j.toml", site, {"training.steps=-1"}); });
  EXPECT_NE(neg.find("command-line override: training.steps = -1 is out of range"), std::string::npos) << neg;
}

TEST(Config, RelativeOutputsResolveAgainstCwdAndDataAgainstTheJobFile) {
  const fs::path root = fs::path(AXONN_BINARY_DIR) / "test_config_paths";
  fs::remove_all(root);
  fs::create_directories(root / "a");
  fs::create_directories(root / "b");
  fs::create_directories(root / "jobs");
  const fs::path job_file = root / "jobs" / "job.toml";
  std::ofstream(job_file) << "[data]\npath = \"data/train.bin\"\n[checkpoint]\ndir = \"ckpt\"\n[run]\ndir = \"out\"\n";
  const fs::path before = fs::current_path();
  fs::current_path(root / "a");
  const JobConfig in_a = load_job_config(job_file.string(), SiteConfig{});
  fs::current_path(root / "b");
  const JobConfig in_b = load_job_config(job_file.string(), SiteConfig{});
  fs::current_path(before);
  EXPECT_EQ(in_a.checkpoint.dir, (root / "a" / "ckpt").string());
  EXPECT_EQ(in_b.checkpoint.dir, (root / "b" / "ckpt").string());
  EXPECT_EQ(in_a.run.dir, (root / "a" / "out").string());
  EXPECT_EQ(in_a.data.path, (root / "jobs" / "data" / "train.bin").string());
  EXPECT_EQ(in_b.data.path, in_a.data.path);
}

TEST(Config, ChooserInputConvertsUnits) {
  const SiteConfig site = load_site_config_string(
      "[node]\ngpus_per_node = 8\nmemory_gib = 80\n[compute]\npeak_tflops_float32 = 67\npeak_tflops_bfloat16 = 989\n"
      "efficiency = 0.4\n[network]\ninter_node_bandwidth_GBps = 50\ninter_node_latency_us = 5\n"
      "intra_node_bandwidth_GBps = 450\nintra_node_latency_us = 2\n[policy]\nmax_tensor_parallel = 16\n",
      "site.toml");
  JobConfig job = load_job_config_string("[training]\ndtype = \"bfloat16\"\nglobal_batch = 64\nmicro_batch = 2\n",
                                         "j.toml", site);
  const ChooserInput in = chooser_input(site, job, 4, 8);
  EXPECT_EQ(in.world(), 32);
  EXPECT_DOUBLE_EQ(in.machine.inter_node.bandwidth_bytes_per_s, 5e10);
  EXPECT_DOUBLE_EQ(in.machine.inter_node.latency_s, 5e-6);
  EXPECT_DOUBLE_EQ(in.machine.intra_node.bandwidth_bytes_per_s, 4.5e11);
  EXPECT_DOUBLE_EQ(in.machine.peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(in.machine.memory_bytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(in.machine.compute_efficiency, 0.4);
  EXPECT_EQ(in.policy.max_tensor_parallel, 16);
  EXPECT_EQ(in.batch.global_batch, 64);
  job.training.dtype = Dtype::float32;
  EXPECT_DOUBLE_EQ(chooser_input(site, job, 1, 8).machine.peak_flops, 67e12);
}

}  // namespace
}  // namespace axonn
