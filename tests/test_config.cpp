// Site and job configs: the shipped files load; errors carry file:line:column and the
// allowed values; merge order; path resolution; unit conversion for the chooser.
#include <gtest/gtest.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "config/config_error.hpp"
#include "config/hostlist.hpp"
#include "config/job_config.hpp"
#include "config/site_writer.hpp"
#include "config/switch_map.hpp"
#include "layout/model_plan.hpp"

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

// A path that names no config must not load as all defaults: a directory, an empty file,
// /dev/null, a file of comments only. The message starts with the path and names a file to use.
TEST(Config, DirectoryEmptyFileAndDevNullAreErrorsNamingTheFile) {
  const fs::path dir = fs::temp_directory_path() / ("axonn_test_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "empty.toml").close();
  std::ofstream(dir / "comments.toml") << "# a site config, some day\n\n";
  for (const fs::path& path : {dir, dir / "empty.toml", dir / "comments.toml", fs::path("/dev/null")}) {
    const std::string site = error_of([&] { load_site_config(path.string()); });
    EXPECT_EQ(site.rfind(path.string() + ": ", 0), 0u) << site;
    EXPECT_NE(site.find("site_configs/example.toml"), std::string::npos) << site;
    const std::string job = error_of([&] { load_job_config(path.string(), SiteConfig{}); });
    EXPECT_EQ(job.rfind(path.string() + ": ", 0), 0u) << job;
    EXPECT_NE(job.find("job_templates/tiny.toml"), std::string::npos) << job;
  }
  EXPECT_NE(error_of([&] { load_site_config(dir.string()); }).find(": is a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { load_job_config("/dev/null", SiteConfig{}); }).find(": holds no settings"),
            std::string::npos);
  fs::remove_all(dir);
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
  const std::string warmup =
      error_of([] { load_job_config_string("[training]\nsteps = 10\nwarmup_steps = 11\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(warmup.find("j.toml:3:16: training.warmup_steps = 11 is out of range; allowed [0, 10]"), std::string::npos)
      << warmup;
  const std::string lr = error_of([] { load_job_config_string("[training]\nlr = -0.1\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(lr.find("j.toml:2:6: training.lr = -0.1 is out of range; allowed [1e-12, 10]"), std::string::npos) << lr;
  const std::string site = error_of([] { load_site_config_string("[policy]\nmemory_headroom = 1.5\n", "s.toml"); });
  EXPECT_NE(site.find("s.toml:2:19: policy.memory_headroom = 1.5 is out of range; allowed [0, 0.9]"), std::string::npos)
      << site;
}

// [cost]: optional per-GPU power and price for `axonn layout --scan`; 0 (the default) means
// not known. The shipped GPU sites carry their GPUs' TDP and no invented price.
TEST(Config, CostKeysLoadWithRangeChecksAndDefaultToNotKnown) {
  const SiteConfig unset = load_site_config_string("[node]\ngpus_per_node = 2\n", "s.toml");
  EXPECT_EQ(unset.gpu_power_watts, 0);
  EXPECT_EQ(unset.gpu_hour_cost, 0);
  const SiteConfig set = load_site_config_string("[cost]\ngpu_power_watts = 350.5\ngpu_hour_cost = 2\n", "s.toml");
  EXPECT_EQ(set.gpu_power_watts, 350.5);
  EXPECT_EQ(set.gpu_hour_cost, 2);
  const std::string negative = error_of([] { load_site_config_string("[cost]\ngpu_hour_cost = -1\n", "s.toml"); });
  EXPECT_NE(negative.find("s.toml:2:17: cost.gpu_hour_cost = -1 is out of range; allowed [0, 1e+06]"),
            std::string::npos)
      << negative;
  const std::string huge = error_of([] { load_site_config_string("[cost]\ngpu_power_watts = 2e5\n", "s.toml"); });
  EXPECT_NE(huge.find("s.toml:2:19: cost.gpu_power_watts = 200000 is out of range; allowed [0, 100000]"),
            std::string::npos)
      << huge;
  const std::string text = error_of([] { load_site_config_string("[cost]\ngpu_power_watts = \"700W\"\n", "s.toml"); });
  EXPECT_NE(text.find("cost.gpu_power_watts must be a number, got a string"), std::string::npos) << text;
  const std::string typo = error_of([] { load_site_config_string("[cost]\ngpu_power_wats = 700\n", "s.toml"); });
  EXPECT_NE(typo.find("did you mean 'cost.gpu_power_watts'?"), std::string::npos) << typo;
  EXPECT_EQ(load_site_config((kSource / "site_configs/dgx-h100.toml").string()).gpu_power_watts, 700);
  EXPECT_EQ(load_site_config((kSource / "site_configs/perlmutter-a100.toml").string()).gpu_power_watts, 400);
  for (const char* site : {"dgx-h100", "perlmutter-a100", "laptop-cpu"})
    EXPECT_EQ(load_site_config((kSource / "site_configs" / (std::string(site) + ".toml")).string()).gpu_hour_cost, 0)
        << site;
}

TEST(Config, HeadsThatDoNotDivideHiddenPointAtTheKeyAndSuggestADivisor) {
  const std::string heads =
      error_of([] { load_job_config_string("[model]\nhidden = 64\nheads = 5\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(heads.find("j.toml:3:9: model.heads = 5 must divide model.hidden = 64; the nearest head count that "
                       "divides it is 4"),
            std::string::npos)
      << heads;
  // heads left at its default (4): the message points at hidden instead.
  const std::string hidden = error_of([] { load_job_config_string("[model]\nhidden = 66\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(hidden.find("j.toml:2:10: model.hidden = 66 must be a multiple of model.heads = 4; the nearest head "
                        "count that divides it is 3"),
            std::string::npos)
      << hidden;
}

// training.tp_chunks: a count from 1 to 64, or "auto" (decided per layout); anything else
// fails at load naming the key, the value and what is allowed. A count that does not split a
// layout's micro-batch rows is that layout's divisibility problem, naming the counts that would.
TEST(Config, TpChunksIsACountOrAutoAndMustSplitTheMicroBatchRows) {
  EXPECT_EQ(load_job_config_string("", "j.toml", SiteConfig{}).training.tp_chunks, 1);
  EXPECT_EQ(load_job_config_string("[training]\ntp_chunks = 4\n", "j.toml", SiteConfig{}).training.tp_chunks, 4);
  EXPECT_EQ(load_job_config_string("[training]\ntp_chunks = \"auto\"\n", "j.toml", SiteConfig{}).training.tp_chunks,
            BatchShape::kAutoTpChunks);
  const std::pair<const char*, const char*> bad[] = {
      {"tp_chunks = 0", "j.toml:2:13: training.tp_chunks = 0 is out of range; allowed [1, 64]"},
      {"tp_chunks = -2", "j.toml:2:13: training.tp_chunks = -2 is out of range; allowed [1, 64]"},
      {"tp_chunks = 128", "j.toml:2:13: training.tp_chunks = 128 is out of range; allowed [1, 64]"},
      {"tp_chunks = 1.5", "j.toml:2:13: training.tp_chunks must be an integer or \"auto\", got a float"},
      {"tp_chunks = \"two\"", "j.toml:2:13: training.tp_chunks must be an integer or \"auto\", got \"two\""},
  };
  for (const auto& [text, want] : bad) {
    try {
      load_job_config_string(std::string("[training]\n") + text + "\n", "j.toml", SiteConfig{});
      ADD_FAILURE() << text << " loaded";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
      EXPECT_EQ(e.exit_code(), exit_code::bad_input) << text;
    }
  }
  // T = 64 tokens, micro-batch 2 at 1x2x1x1 with global batch 4: 128 rows.
  ModelShape model;
  model.sequence = 64;
  BatchShape batch{4, 2, ElementType::float32, 3};
  const std::string why = divisibility_problem(model, batch, parse_layout("1x2x1x1"));
  EXPECT_EQ(why,
            "training.tp_chunks = 3 does not split the micro-batch's 128 rows (micro-batch 2 x sequence 64 at layout "
            "1x2x1x1) into equal chunks; counts that would: 1, 2, 4, 8, 16, 32, 64, or \"auto\"");
  batch.tp_chunks = 4;
  EXPECT_EQ(divisibility_problem(model, batch, parse_layout("1x2x1x1")), "");
  batch.tp_chunks = BatchShape::kAutoTpChunks;
  EXPECT_EQ(divisibility_problem(model, batch, parse_layout("1x2x1x1")), "");
}

// model.experts and the MoE keys reach ModelShape as given, from the file and from overrides;
// a job that names none is dense with ModelShape's defaults.
TEST(Config, MoeKeysRoundTripIntoTheModelShape) {
  const ModelShape dense = load_job_config_string("", "j.toml", SiteConfig{}).model;
  EXPECT_EQ(dense.experts, 0);
  EXPECT_FALSE(dense.moe());
  EXPECT_EQ(dense.top_k, 2);
  EXPECT_EQ(dense.moe_every, 1);
  EXPECT_EQ(dense.capacity_factor, 0.0);
  EXPECT_EQ(dense.aux_loss_weight, 0.01);
  EXPECT_EQ(dense.moe_chunks, 1);
  const ModelShape moe = load_job_config_string(
                             "[model]\nlayers = 4\nexperts = 8\ntop_k = 1\nmoe_every = 2\ncapacity_factor = 1.25\n"
                             "aux_loss_weight = 0.02\nmoe_chunks = 4\n",
                             "j.toml", SiteConfig{})
                             .model;
  EXPECT_EQ(moe.experts, 8);
  EXPECT_EQ(moe.top_k, 1);
  EXPECT_EQ(moe.moe_every, 2);
  EXPECT_EQ(moe.capacity_factor, 1.25);
  EXPECT_EQ(moe.aux_loss_weight, 0.02);
  EXPECT_EQ(moe.moe_chunks, 4);
  EXPECT_FALSE(moe.is_moe_block(0));
  // "auto": decided per layout by the layout model (resolved_moe_chunks).
  const ModelShape automatic =
      load_job_config_string("[model]\nexperts = 8\nmoe_chunks = \"auto\"\n", "j.toml", SiteConfig{}).model;
  EXPECT_TRUE(automatic.moe_chunks_auto());
  EXPECT_EQ(moe_chunks_name(automatic), "auto");
  EXPECT_EQ(moe_chunks_name(moe), "4");
  EXPECT_TRUE(moe.is_moe_block(1));
  // Integers are numbers too; the bounds are allowed; top_k = 1 allows a single expert.
  const ModelShape edges = load_job_config_string(
                               "[model]\nlayers = 3\nexperts = 1\ntop_k = 1\nmoe_every = 3\ncapacity_factor = 2\n"
                               "aux_loss_weight = 0\n",
                               "j.toml", SiteConfig{})
                               .model;
  EXPECT_EQ(edges.experts, 1);
  EXPECT_EQ(edges.moe_every, 3);
  EXPECT_EQ(edges.capacity_factor, 2.0);
  EXPECT_EQ(edges.aux_loss_weight, 0.0);
  const ModelShape overridden =
      load_job_config_string("", "j.toml", SiteConfig{},
                             {"model.experts=4", "model.top_k=2", "model.capacity_factor=0", "model.layers=2",
                              "model.moe_every=2", "model.aux_loss_weight=1e-3"})
          .model;
  EXPECT_EQ(overridden.experts, 4);
  EXPECT_EQ(overridden.top_k, 2);
  EXPECT_EQ(overridden.moe_every, 2);
  EXPECT_EQ(overridden.capacity_factor, 0.0);
  EXPECT_EQ(overridden.aux_loss_weight, 1e-3);
  // The chooser sees the model as loaded.
  EXPECT_EQ(chooser_input(SiteConfig{}, load_job_config_string("[model]\nexperts = 4\n", "j.toml", SiteConfig{}), 1, 4)
                .model.experts,
            4);
}

// tiny.toml documents the MoE keys commented out; uncommented as they stand, they load.
TEST(Config, TheTemplatesCommentedMoeKeysLoadWhenUncommented) {
  std::ifstream in(kSource / "job_templates/tiny.toml");
  std::string text;
  int uncommented = 0;
  for (std::string line; std::getline(in, line);) {
    for (const char* key : {"experts", "top_k", "moe_every", "capacity_factor", "aux_loss_weight", "moe_chunks"})
      if (line.rfind(std::string("# ") + key + " = ", 0) == 0) {
        line.erase(0, 2);
        ++uncommented;
      }
    text += line + "\n";
  }
  EXPECT_EQ(uncommented, 6);
  const ModelShape m = load_job_config_string(text, "tiny.toml", SiteConfig{}).model;
  EXPECT_EQ(m.experts, 8);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(m.moe_every, 1);
  EXPECT_EQ(m.capacity_factor, 0.0);
  EXPECT_EQ(m.aux_loss_weight, 0.01);
  EXPECT_EQ(m.moe_chunks, 1);
}

// Each bad MoE value is refused naming the key, its position, the value and the fix.
// checkpoint.memory_interval: a count (0: no copies), or "auto" (measured by the run); anything
// else names the key, the value and what it takes.
TEST(Config, MemoryIntervalIsACountOrAuto) {
  auto checkpoint = [](const std::string& toml) {
    return load_job_config_string("[checkpoint]\n" + toml + "\n", "j.toml", SiteConfig{}).checkpoint;
  };
  EXPECT_FALSE(checkpoint("").memory_copies());
  EXPECT_EQ(checkpoint("memory_interval = 5").fixed_memory_interval(), 5);
  EXPECT_TRUE(checkpoint("memory_interval = 5").memory_copies());
  const CheckpointConfig automatic = checkpoint("memory_interval = \"auto\"");
  EXPECT_TRUE(automatic.memory_copies());
  EXPECT_EQ(automatic.fixed_memory_interval(), std::nullopt);
  EXPECT_EQ(error_of([&] { checkpoint("memory_interval = \"often\""); }),
            "j.toml:2:19: checkpoint.memory_interval must be an integer or \"auto\", got \"often\"");
  EXPECT_EQ(error_of([&] {
              checkpoint("memory_interval = -1");
            }).rfind("j.toml:2:19: checkpoint.memory_interval = -1 is out of range; allowed [0, ", 0),
            0u);
}

TEST(Config, BadMoeValuesNameTheKeyTheValueAndTheFix) {
  struct Case {
    std::string toml, expect;
  };
  const std::vector<Case> cases = {
      {"experts = -1", "j.toml:2:11: model.experts = -1 is out of range; allowed [0, "},
      {"experts = 2.5", "j.toml:2:11: model.experts must be an integer, got a float"},
      {"experts = 8\ntop_k = 3", "j.toml:3:9: model.top_k = 3 is out of range; allowed [1, 2]"},
      {"experts = 8\ntop_k = 0", "j.toml:3:9: model.top_k = 0 is out of range; allowed [1, 2]"},
      {"experts = 8\nmoe_every = 0", "j.toml:3:13: model.moe_every = 0 is out of range; allowed [1, 2]"},
      {"layers = 4\nexperts = 8\nmoe_every = 5", "j.toml:4:13: model.moe_every = 5 is out of range; allowed [1, 4]"},
      {"experts = 8\ncapacity_factor = -0.5",
       "j.toml:3:19: model.capacity_factor = -0.5 is out of range; allowed [0, 1e+06]"},
      {"experts = 8\ncapacity_factor = \"1.0\"", "j.toml:3:19: model.capacity_factor must be a number, got a string"},
      {"experts = 8\naux_loss_weight = -1", "j.toml:3:19: model.aux_loss_weight = -1 is out of range; allowed [0, "},
      {"experts = 8\naux_loss_weight = nan", "j.toml:3:19: model.aux_loss_weight = nan is out of range"},
      {"experts = 8\nmoe_chunks = 0", "j.toml:3:14: model.moe_chunks = 0 is out of range; allowed [1, 1024]"},
      {"experts = 8\nmoe_chunks = \"fast\"", "j.toml:3:14: model.moe_chunks must be an integer or \"auto\", got \"fast\""},
      {"experts = 8\nmoe_chunks = 2.0", "j.toml:3:14: model.moe_chunks must be an integer or \"auto\", got a float"},
      // More experts per token than there are experts.
      {"experts = 1\ntop_k = 2",
       "j.toml:3:9: model.top_k = 2 is more than model.experts = 1; set model.top_k = 1 or model.experts >= 2"},
      {"experts = 1",
       "j.toml:2:11: model.experts = 1 is fewer than model.top_k = 2 (its default); set model.top_k = 1 or "
       "model.experts >= 2"},
      // The MoE keys of a dense model.
      {"top_k = 1",
       "j.toml:2:9: model.top_k = 1 applies only to a mixture-of-experts model, and this one is dense "
       "(model.experts = 0); set model.experts to the number of experts, or drop model.top_k"},
      {"experts = 0\nmoe_every = 2", "j.toml:3:13: model.moe_every = 2 applies only to a mixture-of-experts model"},
      {"capacity_factor = 1.5", "j.toml:2:19: model.capacity_factor = 1.5 applies only to a mixture-of-experts model"},
      {"moe_chunks = 2", "j.toml:2:14: model.moe_chunks = 2 applies only to a mixture-of-experts model"},
      {"moe_chunks = \"auto\"", "j.toml:2:14: model.moe_chunks = auto applies only to a mixture-of-experts model"},
      {"aux_loss_weight = 0.01",
       "j.toml:2:19: model.aux_loss_weight = 0.01 applies only to a mixture-of-experts model, and this one is dense "
       "(model.experts = 0); set model.experts"},
  };
  for (const Case& c : cases) {
    const std::string err =
        error_of([&] { load_job_config_string("[model]\n" + c.toml + "\n", "j.toml", SiteConfig{}); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.toml << "\n" << err;
  }
  // An override that makes the model dense leaves the file's MoE keys in error.
  const std::string dense = error_of(
      [] { load_job_config_string("[model]\nexperts = 4\ntop_k = 1\n", "j.toml", SiteConfig{}, {"model.experts=0"}); });
  EXPECT_NE(dense.find("j.toml:3:9: model.top_k = 1 applies only to a mixture-of-experts model"), std::string::npos)
      << dense;
  const std::string typo = error_of([] { load_job_config_string("[model]\nexpert = 4\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(typo.find("did you mean 'model.experts'?"), std::string::npos) << typo;
}

// The architecture keys: GPT-2's by default, Llama's as the templates set them.
TEST(Config, ArchitectureKeysDefaultToGpt2AndReadLlamasShape) {
  const ModelShape gpt2 = load_job_config_string("[model]\nhidden = 64\n", "j.toml", SiteConfig{}).model;
  EXPECT_EQ(gpt2.norm, Norm::layernorm);
  EXPECT_EQ(gpt2.mlp, Mlp::gelu);
  EXPECT_EQ(gpt2.ffn(), 256);
  EXPECT_EQ(gpt2.positions, Positions::learned);
  EXPECT_EQ(gpt2.kv(), gpt2.heads);
  EXPECT_TRUE(gpt2.bias);
  EXPECT_TRUE(gpt2.tie_embeddings);
  EXPECT_FALSE(gpt2.rope_scaling);
  EXPECT_EQ(gpt2.qkv_width(), 3 * 64);

  const ModelShape llama =
      load_job_config((kSource / "job_templates/llama3-8b.toml").string(), SiteConfig{}).model;
  EXPECT_EQ(llama.norm, Norm::rmsnorm);
  EXPECT_EQ(llama.norm_eps, 1e-5);
  EXPECT_EQ(llama.mlp, Mlp::swiglu);
  EXPECT_EQ(llama.ffn(), 14336);
  EXPECT_EQ(llama.fc_width(), 2 * 14336);
  EXPECT_EQ(llama.positions, Positions::rope);
  EXPECT_EQ(llama.rope_theta, 500000.0);
  ASSERT_TRUE(llama.rope_scaling);
  EXPECT_EQ(*llama.rope_scaling, (RopeScaling{8.0, 1.0, 4.0, 8192}));
  EXPECT_EQ(llama.kv(), 8);
  EXPECT_TRUE(llama.grouped_attention());
  EXPECT_EQ(llama.qkv_width(), (32 + 2 * 8) * 128);
  EXPECT_FALSE(llama.bias);
  EXPECT_FALSE(llama.tie_embeddings);
  // Meta's published counts (Hugging Face's model cards): 8,030,261,248 and 70,553,706,496.
  EXPECT_EQ(parameters_total(llama), 8030261248);
  const ModelShape llama70 =
      load_job_config((kSource / "job_templates/llama3-70b.toml").string(), SiteConfig{}).model;
  EXPECT_EQ(parameters_total(llama70), 70553706496);
}

TEST(Config, BadArchitectureValuesNameTheKeyTheValueAndTheFix) {
  struct Case {
    std::string toml, expect;
  };
  const std::vector<Case> cases = {
      {"norm = \"batchnorm\"", "j.toml:2:8: model.norm = \"batchnorm\" is not allowed; use one of \"layernorm\", \"rmsnorm\""},
      {"mlp = \"relu\"", "model.mlp = \"relu\" is not allowed; use one of \"gelu\", \"swiglu\""},
      {"mlp_hidden = 0", "j.toml:2:14: model.mlp_hidden = 0 is out of range; allowed [1, "},
      {"heads = 4\nkv_heads = 3",
       "j.toml:3:12: model.kv_heads = 3 must divide model.heads = 4 (each key/value head serves an equal group of "
       "query heads); the nearest that does is 2"},
      {"heads = 4\nkv_heads = 8", "j.toml:3:12: model.kv_heads = 8 is out of range; allowed [1, 4]"},
      {"rope_theta = 500000.0",
       "j.toml:2:14: model.rope_theta applies only with model.positions = \"rope\"; set that, or drop "
       "model.rope_theta"},
      {"[model.rope_scaling]\nfactor = 8.0", "model.rope_scaling applies only with model.positions = \"rope\""},
      {"hidden = 12\nheads = 4\npositions = \"rope\"",
       "model.positions = \"rope\" rotates pairs of a head's elements, and the head size model.hidden / model.heads = "
       "3 is odd"},
      {"positions = \"rope\"\n[model.rope_scaling]\nlow_freq_factor = 4.0\nhigh_freq_factor = 1.0",
       "model.rope_scaling.high_freq_factor = 1 must be above low_freq_factor = 4 (Llama 3.1: 4 and 1)"},
      {"positions = \"rope\"\n[model.rope_scaling]\nrope_type = \"yarn\"",
       "model.rope_scaling.rope_type = \"yarn\" is not allowed; use one of \"llama3\""},
      {"positions = \"rope\"\n[model.rope_scaling]\nfactr = 8.0", "unknown key 'model.rope_scaling.factr'"},
      {"bias = 1", "model.bias must be true or false, got an integer"},
  };
  for (const Case& c : cases) {
    const std::string err =
        error_of([&] { load_job_config_string("[model]\n" + c.toml + "\n", "j.toml", SiteConfig{}); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.toml << "\n" << err;
  }
}

TEST(Config, SyntaxErrorHasPosition) {
  const std::string err = error_of([] { load_job_config_string("[model\nlayers = 2\n", "bad.toml", SiteConfig{}); });
  EXPECT_EQ(err.rfind("bad.toml:1:", 0), 0u) << err;
}

TEST(Config, MergeOrderDefaultsSiteJobOverride) {
  SiteConfig site;
  site.default_dtype = ElementType::bfloat16;
  site.checkpoint_dir = "/site/ckpt";
  // The job is silent: the site's policy fills dtype and checkpoint dir.
  JobConfig silent = load_job_config_string("[model]\nlayers = 3\n", "j.toml", site);
  EXPECT_EQ(silent.training.dtype, ElementType::bfloat16);
  EXPECT_EQ(silent.checkpoint.dir, "/site/ckpt");
  EXPECT_EQ(silent.training.steps, TrainingConfig{}.steps);  // built-in default
  // The job speaks: it wins over the site.
  JobConfig speaks =
      load_job_config_string("[training]\ndtype = \"float32\"\n[checkpoint]\ndir = \"/job/ckpt\"\n", "j.toml", site);
  EXPECT_EQ(speaks.training.dtype, ElementType::float32);
  EXPECT_EQ(speaks.checkpoint.dir, "/job/ckpt");
  // An override wins over both, and is as strict as the file.
  JobConfig over = load_job_config_string("[training]\nsteps = 5\n", "j.toml", site,
                                          {"training.steps=20", "training.dtype=float32", "checkpoint.dir=/o"});
  EXPECT_EQ(over.training.steps, 20);
  EXPECT_EQ(over.training.dtype, ElementType::float32);
  EXPECT_EQ(over.checkpoint.dir, "/o");
  const std::string err = error_of([&] { load_job_config_string("", "j.toml", site, {"training.stepz=3"}); });
  EXPECT_NE(err.find("unknown key 'training.stepz'"), std::string::npos) << err;
  const std::string neg = error_of([&] { load_job_config_string("", "j.toml", site, {"training.steps=-1"}); });
  EXPECT_NE(neg.find("command-line override: training.steps = -1 is out of range"), std::string::npos) << neg;
}

// training.device picks the backend: "auto" unless the job or an override says otherwise;
// anything else is an error listing the three choices.
TEST(Config, TrainingDeviceIsAutoCpuOrCuda) {
  EXPECT_EQ(load_job_config_string("", "j.toml", SiteConfig{}).training.device, "auto");
  EXPECT_EQ(load_job_config_string("[training]\ndevice = \"cuda\"\n", "j.toml", SiteConfig{}).training.device,
            "cuda");
  EXPECT_EQ(load_job_config_string("[training]\ndevice = \"cuda\"\n", "j.toml", SiteConfig{}, {"training.device=cpu"})
                .training.device,
            "cpu");
  const std::string err =
      error_of([] { load_job_config_string("[training]\ndevice = \"gpu\"\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(err.find("j.toml:2:10: training.device"), std::string::npos) << err;
  EXPECT_NE(err.find("\"gpu\""), std::string::npos) << err;
  EXPECT_NE(err.find("\"auto\", \"cpu\", \"cuda\""), std::string::npos) << err;
}

// training.overlap_comm: "auto" (unset) unless the job or an override says true or false;
// anything else is an error naming the key and what it got.
TEST(Config, OverlapCommIsAutoUnlessTrueOrFalse) {
  EXPECT_EQ(load_job_config_string("", "j.toml", SiteConfig{}).training.overlap_comm, std::nullopt);
  EXPECT_EQ(load_job_config_string("[training]\noverlap_comm = false\n", "j.toml", SiteConfig{}).training.overlap_comm,
            false);
  EXPECT_EQ(load_job_config_string("[training]\noverlap_comm = true\n", "j.toml", SiteConfig{},
                                   {"training.overlap_comm=auto"})
                .training.overlap_comm,
            std::nullopt);
  EXPECT_EQ(load_job_config_string("", "j.toml", SiteConfig{}, {"training.overlap_comm=true"}).training.overlap_comm,
            true);
  const std::string err =
      error_of([] { load_job_config_string("[training]\noverlap_comm = \"yes\"\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(err.find("j.toml:2:16: training.overlap_comm must be true, false or \"auto\", got \"yes\""),
            std::string::npos)
      << err;
}

// The site's measured elementwise and attention rates (the job's dtype) reach the model; a
// job on the CPU gets no GEMM epilogues (its backend runs bias and GELU as separate passes),
// any other device does.
TEST(Config, ElementwiseRateAndEpiloguesReachTheChooser) {
  SiteConfig site;
  site.gpus_per_node = 4;
  site.elementwise_GBps = 4.25;
  site.attention_tflops_float32 = 0.5;
  site.attention_tflops_bfloat16 = 7;
  const JobConfig cpu = load_job_config_string("[training]\ndevice = \"cpu\"\n", "j.toml", site);
  const ChooserInput on_cpu = chooser_input(site, cpu, 1, 4);
  EXPECT_EQ(on_cpu.machine.elementwise_bytes_per_s, 4.25e9);
  EXPECT_EQ(on_cpu.machine.attention_flops, 0.5e12);
  const JobConfig bf16 = load_job_config_string("[training]\ndtype = \"bfloat16\"\n", "j.toml", site);
  EXPECT_EQ(chooser_input(site, bf16, 1, 4).machine.attention_flops, 7e12);
  EXPECT_FALSE(on_cpu.machine.gemm_epilogues);
  for (const std::string device : {"cuda", "auto"}) {
    const JobConfig job = load_job_config_string("[training]\ndevice = \"" + device + "\"\n", "j.toml", site);
    EXPECT_TRUE(chooser_input(site, job, 1, 4).machine.gemm_epilogues) << device;
  }
  EXPECT_EQ(chooser_input(SiteConfig{}, cpu, 1, 4).machine.elementwise_bytes_per_s, 0);
}

// A CPU job's ranks share their node's cores: the site's per-"GPU" figures are one of
// gpus_per_node shares of a node, so 2 ranks on a gpus_per_node = 4 site get two shares each
// and 8 ranks half of one; links and memory are per rank whatever the count. A GPU job's
// figures are per GPU at any count.
TEST(Config, ACpuJobsRanksSplitTheNodesComputeBetweenThem) {
  SiteConfig site;
  site.gpus_per_node = 4;
  site.peak_tflops_float32 = 0.04;
  site.gemm_tflops_float32 = 0.02;
  site.attention_tflops_float32 = 0.01;
  site.elementwise_GBps = 4;
  site.gemm.push_back({ElementType::float32, 64, 64, 64, 0.03});
  const JobConfig cpu = load_job_config_string("[training]\ndevice = \"cpu\"\n", "j.toml", site);
  for (const auto& [ranks, share] : {std::pair{2, 2.0}, {4, 1.0}, {8, 0.5}}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks on the node");
    const Machine m = chooser_input(site, cpu, 1, ranks).machine;
    EXPECT_DOUBLE_EQ(m.peak_flops, share * 0.04e12);
    EXPECT_DOUBLE_EQ(m.gemm_flops, share * 0.02e12);
    EXPECT_DOUBLE_EQ(m.attention_flops, share * 0.01e12);
    EXPECT_DOUBLE_EQ(m.elementwise_bytes_per_s, share * 4e9);
    ASSERT_EQ(m.gemm_rates.size(), 1u);
    EXPECT_DOUBLE_EQ(m.gemm_rates[0].flops_per_s, share * 0.03e12);
    EXPECT_DOUBLE_EQ(m.memory_bytes, chooser_input(site, cpu, 1, 4).machine.memory_bytes);
  }
  for (const std::string device : {"cuda", "auto"}) {
    const JobConfig job = load_job_config_string("[training]\ndevice = \"" + device + "\"\n", "j.toml", site);
    EXPECT_DOUBLE_EQ(chooser_input(site, job, 1, 2).machine.gemm_flops, 0.02e12) << device;
  }
}

// training.recompute: "auto" (unset) unless the job or an override names a mode; it reaches
// the chooser's input with overlap_comm; anything else is an error listing the values.
TEST(Config, RecomputeIsAutoUnlessAModeIsNamed) {
  const JobConfig plain = load_job_config_string("", "j.toml", SiteConfig{});
  EXPECT_FALSE(plain.training.recompute.has_value());
  EXPECT_EQ(recompute_setting_name(plain.training.recompute), "auto");
  EXPECT_FALSE(chooser_input(SiteConfig{}, plain, 1, 4).recompute.has_value());
  for (Recompute mode : kRecomputeModes) {
    const std::string name = recompute_name(mode);
    const JobConfig job = load_job_config_string("[training]\nrecompute = \"" + name + "\"\noverlap_comm = false\n",
                                                 "j.toml", SiteConfig{});
    ASSERT_TRUE(job.training.recompute.has_value()) << name;
    EXPECT_EQ(*job.training.recompute, mode);
    const ChooserInput in = chooser_input(SiteConfig{}, job, 1, 4);
    EXPECT_EQ(in.recompute, mode);
    EXPECT_EQ(in.overlap_comm, false);
    EXPECT_EQ(load_job_config_string("", "j.toml", SiteConfig{}, {"training.recompute=" + name}).training.recompute,
              mode);
  }
  EXPECT_FALSE(
      load_job_config_string("[training]\nrecompute = \"block\"\n", "j.toml", SiteConfig{}, {"training.recompute=auto"})
          .training.recompute.has_value());
  const std::string err =
      error_of([] { load_job_config_string("[training]\nrecompute = \"full\"\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(err.find("j.toml:2:13: training.recompute"), std::string::npos) << err;
  EXPECT_NE(err.find("\"auto\", \"none\", \"attention\", \"block\""), std::string::npos) << err;
}

// training.shard_optimizer: "auto" (unset) unless the job or an override says true or false;
// it reaches the chooser's input; anything else is an error saying what it takes.
TEST(Config, ShardOptimizerIsAutoUnlessTrueOrFalse) {
  const JobConfig plain = load_job_config_string("", "j.toml", SiteConfig{});
  EXPECT_FALSE(plain.training.shard_optimizer.has_value());
  EXPECT_EQ(shard_setting_name(plain.training.shard_optimizer), "auto");
  EXPECT_FALSE(chooser_input(SiteConfig{}, plain, 1, 4).shard_optimizer.has_value());
  for (bool shard : {false, true}) {
    const std::string value = shard ? "true" : "false";
    const JobConfig job =
        load_job_config_string("[training]\nshard_optimizer = " + value + "\n", "j.toml", SiteConfig{});
    ASSERT_TRUE(job.training.shard_optimizer.has_value()) << value;
    EXPECT_EQ(*job.training.shard_optimizer, shard);
    EXPECT_EQ(shard_setting_name(job.training.shard_optimizer), value);
    EXPECT_EQ(chooser_input(SiteConfig{}, job, 1, 4).shard_optimizer, shard);
    EXPECT_EQ(load_job_config_string("", "j.toml", SiteConfig{}, {"training.shard_optimizer=" + value})
                  .training.shard_optimizer,
              shard);
  }
  // "auto" in the file or on the command line (a bare word) undoes a setting.
  EXPECT_FALSE(load_job_config_string("[training]\nshard_optimizer = \"auto\"\n", "j.toml", SiteConfig{})
                   .training.shard_optimizer.has_value());
  EXPECT_FALSE(load_job_config_string("[training]\nshard_optimizer = true\n", "j.toml", SiteConfig{},
                                      {"training.shard_optimizer=auto"})
                   .training.shard_optimizer.has_value());
  const std::string err =
      error_of([] { load_job_config_string("[training]\nshard_optimizer = \"yes\"\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(err.find("j.toml:2:19: training.shard_optimizer must be true, false or \"auto\", got \"yes\""),
            std::string::npos)
      << err;
  const std::string number =
      error_of([] { load_job_config_string("[training]\nshard_optimizer = 1\n", "j.toml", SiteConfig{}); });
  EXPECT_NE(number.find("training.shard_optimizer must be true, false or \"auto\", got an integer"), std::string::npos)
      << number;
}

TEST(Config, OverridesAreTrimmedQuotedAndMalformedOnesNamed) {
  const JobConfig job = load_job_config_string("", "j.toml", SiteConfig{},
                                               {" training.steps = 7 ", "run.dir=\"/tmp/2024\"", "data.path=/d x"});
  EXPECT_EQ(job.training.steps, 7);
  EXPECT_EQ(job.run.dir, "/tmp/2024");
  EXPECT_EQ(job.data.path, "/d x");  // a bare word is a string
  const auto err = [](const std::string& item) {
    return error_of([&] { load_job_config_string("", "j.toml", SiteConfig{}, {item}); });
  };
  EXPECT_EQ(err("training.steps").rfind("j.toml: command-line override 'training.steps': expected section.key=value", 0),
            0u);
  EXPECT_NE(err("training..steps=3").find("empty name in key 'training..steps'"), std::string::npos);
  const std::string through = error_of([] {
    load_job_config_string("[training]\nsteps = 5\n", "j.toml", SiteConfig{}, {"training.steps.x=3"});
  });
  EXPECT_NE(through.find("'steps' is a value, not a table"), std::string::npos) << through;
  EXPECT_NE(err("training.steps=[1, 2]").find("the value must be an integer, a float, a boolean or a string"),
            std::string::npos);
  const std::string unquoted = err("run.dir=2024");
  EXPECT_NE(unquoted.find("j.toml: command-line override: run.dir must be a string, got an integer; quote it"),
            std::string::npos)
      << unquoted;
}

TEST(Config, ControlCharactersFromTheFileOrCommandLineAreShownEscaped) {
  // A TOML escape puts a NUL into the value: unescaped, it would end what() at "co".
  const std::string nul = error_of([] {
    load_job_config_string("[training]\nschedule = \"co\\u0000sine\"\n", "j.toml", SiteConfig{});
  });
  EXPECT_NE(nul.find("j.toml:2:12: training.schedule = \"co\\x00sine\" is not allowed; use one of \"cosine\""),
            std::string::npos)
      << nul;
  // A newline in an override would split the one-line message.
  const std::string newline =
      error_of([] { load_job_config_string("", "j.toml", SiteConfig{}, {"training.steps\nrun.dir"}); });
  EXPECT_EQ(newline.rfind("j.toml: command-line override 'training.steps\\x0arun.dir': expected section.key=value", 0),
            0u)
      << newline;
  EXPECT_EQ(newline.find('\n'), std::string::npos) << newline;
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
  job.training.dtype = ElementType::float32;
  EXPECT_DOUBLE_EQ(chooser_input(site, job, 1, 8).machine.peak_flops, 67e12);
}

TEST(Hostlist, ExpandsRangesKeepsPaddingAndMultipliesGroups) {
  EXPECT_EQ(expand_hostlist("nid[001-003,010],login1"),
            (std::vector<std::string>{"nid001", "nid002", "nid003", "nid010", "login1"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[8-10]"),
            (std::vector<std::string>{"r1n8", "r1n9", "r1n10", "r2n8", "r2n9", "r2n10"}));
  EXPECT_EQ(expand_hostlist("gpu7"), std::vector<std::string>{"gpu7"});
  EXPECT_NE(error_of([] { expand_hostlist("nid[3-1]"); }).find("range \"3-1\" runs backwards"), std::string::npos);
  EXPECT_NE(error_of([] { expand_hostlist("nid[1-2"); }).find("'[' without ']'"), std::string::npos);
  EXPECT_NE(error_of([] { expand_hostlist("nid[a-b]"); }).find("\"a-b\" is not a number"), std::string::npos);
  EXPECT_NE(error_of([] { expand_hostlist("a,,b"); }).find("empty name"), std::string::npos);
}

TEST(SwitchMap, BlockSizeIsExactForEvenRunsAndNeverStraddlesOtherwise) {
  EXPECT_EQ(block_size_of({0, 0, 0, 0}), 0);           // one switch
  EXPECT_EQ(block_size_of({0, 0, 0, 1, 1, 1, 2}), 3);  // even runs, shorter last
  EXPECT_EQ(block_size_of({0, 0, 0, 1, 1}), 3);
  EXPECT_EQ(block_size_of({0, 0, 1, 1, 1}), 1);        // uneven: every node its own block
  EXPECT_EQ(block_size_of({0, 0, 0, 0, 1, 1, 2, 2, 2, 2}), 2);
}

TEST(SwitchMap, HostnamesPlaceNodesOnTheListedSwitches) {
  const SiteConfig site = load_site_config_string(
      "[network]\nswitches = [[\"nid[01-04]\"], [\"nid[05-08]\", \"spare\"]]\n", "site.toml");
  ASSERT_EQ(site.switches.size(), 2u);
  EXPECT_EQ(site.switches[1], (std::vector<std::string>{"nid05", "nid06", "nid07", "nid08", "spare"}));
  // Without hostnames the nodes fill the switches in listing order.
  EXPECT_EQ(allocation_nodes_per_switch(site, 4), 0);
  EXPECT_EQ(allocation_nodes_per_switch(site, 8), 4);
  EXPECT_EQ(allocation_nodes_per_switch(site, 2, {"nid03", "nid04.cluster.example"}), 0);  // short name matches
  EXPECT_EQ(allocation_nodes_per_switch(site, 4, {"nid03", "nid04", "nid05", "nid06"}), 2);
  EXPECT_EQ(allocation_nodes_per_switch(site, 3, {"nid03", "nid05", "nid06"}), 1);
  const JobConfig job = load_job_config_string("", "j.toml", site);
  EXPECT_EQ(chooser_input(site, job, 4, 1, {"nid01", "nid02", "nid07", "nid08"}).machine.nodes_per_switch, 2);
  EXPECT_NE(error_of([&] { allocation_nodes_per_switch(site, 1, {"nid99"}); })
                .find("site.toml: host 'nid99' is under no switch in network.switches"),
            std::string::npos);
  EXPECT_NE(error_of([&] { allocation_nodes_per_switch(site, 10); }).find("lists 9 hosts, fewer than the 10 nodes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { allocation_nodes_per_switch(site, 2, {"nid01"}); }).find("1 hostnames for 2 nodes"),
            std::string::npos);
}

TEST(SwitchMap, BadSwitchListsNameThePosition) {
  const auto err = [](const std::string& text) { return error_of([&] { load_site_config_string(text, "s.toml"); }); };
  const std::string twice = err("[network]\nswitches = [[\"a[1-2]\"],\n  [\"b\", \"a2\"]]\n");
  EXPECT_NE(twice.find("s.toml:3:9: network.switches: host 'a2' is listed under switch 0 and again under switch 1"),
            std::string::npos)
      << twice;
  const std::string range = err("[network]\nswitches = [[\"n[5-1]\"]]\n");
  EXPECT_NE(range.find("s.toml:2:14: network.switches: host list \"n[5-1]\": range \"5-1\" runs backwards"),
            std::string::npos)
      << range;
  const std::string flat = err("[network]\nswitches = [\"a\", \"b\"]\n");
  EXPECT_NE(flat.find("s.toml:2:13: network.switches must be an array of arrays of strings"), std::string::npos) << flat;
  const std::string both = err("[network]\nnodes_per_switch = 4\nswitches = [[\"a\"]]\n");
  EXPECT_NE(both.find("s.toml:3:12: network.switches and network.nodes_per_switch = 4 both describe the switches"),
            std::string::npos)
      << both;
}

// ---- calibrated sites: the keys `axonn calibrate` writes, and the writer (site_writer.hpp).

// An all-reduce sweep on groups of 4 with a step between 64 and 128 KiB, in times that
// microseconds write and read back exactly.
const MeasuredSweep kIntraSweep{4, {{4096, 0.0000625}, {65536, 0.000125}, {131072, 0.0005}}};

// A site with every measured key set, on top of the laptop site.
SiteConfig calibrated_laptop() {
  SiteConfig s = load_site_config((kSource / "site_configs/laptop-cpu.toml").string());
  s.memory_gib = 5.75;
  s.gemm_tflops_float32 = 0.0312;
  s.elementwise_GBps = 4.25;
  s.attention_tflops_float32 = 0.0087;
  s.gemm = {{ElementType::float32, 256, 64, 192, 0.0211}, {ElementType::float32, 256, 32, 192, 0.0153}};
  s.intra_node_bandwidth_GBps = 1.5;
  s.intra_node_latency_us = 61.5;
  s.intra_node_fits[static_cast<size_t>(CollectiveKind::all_reduce)] =
      CollectiveFit{61.5, 1.5, 0.083, 65536, 12.5, 0.75, kIntraSweep};
  s.intra_node_overlap = {{{16384, -0.25}, {196608, 0.375}}};
  s.intra_node_filled_by_others = 0.3125;
  s.intra_node_cores_busy = 0.5625;
  s.intra_node_fits[static_cast<size_t>(CollectiveKind::all_gather)] =
      CollectiveFit{40.25, 2.125, 0.05, 0, 0, 0, std::nullopt};
  s.intra_node_fits[static_cast<size_t>(CollectiveKind::reduce_scatter)] =
      CollectiveFit{45, 1.75, std::nullopt, 0, 0, 0, std::nullopt};
  GroupFits pairs;
  pairs.ranks = 2;
  pairs.fits[static_cast<size_t>(CollectiveKind::all_reduce)] =
      CollectiveFit{120.5, 0.625, 0.25, 65536, 20, 0.5, MeasuredSweep{2, {{4096, 0.0000625}, {131072, 0.0005}}}};
  pairs.fits[static_cast<size_t>(CollectiveKind::all_gather)] =
      CollectiveFit{80, 0.875, std::nullopt, 0, 0, 0, std::nullopt};
  pairs.filled_by_others = 0.4375;
  pairs.cores_busy = 0.6875;
  pairs.overlap = {{{16384, -0.75}, {196608, -0.125}}};
  s.intra_node_groups = {pairs};
  s.calibration = {"2026-11-27T10:31:02Z", {"laptop"}, "", "0.1.0", 4, 4, "backend cpu, collectives gloo"};
  return s;
}

fs::path scratch_file(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / ("axonn_test_config_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / name) << text;
  return dir / name;
}

// Every leaf of `table` as "a.b.c" -> its node, arrays by index ("switches.0.1").
void leaves(const toml::node& node, const std::string& path, std::map<std::string, const toml::node*>& out) {
  if (const toml::table* t = node.as_table()) {
    for (const auto& [key, child] : *t) leaves(child, path + (path.empty() ? "" : ".") + std::string(key.str()), out);
  } else if (const toml::array* a = node.as_array()) {
    for (size_t i = 0; i < a->size(); ++i) leaves(*a->get(i), path + "." + std::to_string(i), out);
  } else {
    out[path] = &node;
  }
}

// Every key of example.toml (which documents every key) comes back with its value: a key the
// writer forgot, such as one added to the loader later, fails here.
TEST(SiteWriter, EveryKeyOfTheExampleComesBackWithItsValue) {
  const fs::path example = kSource / "site_configs/example.toml";
  const std::string written = format_site_toml(load_site_config(example.string()), "written by a test");
  const toml::table original = toml::parse_file(example.string());
  const toml::table back = toml::parse(written);
  std::map<std::string, const toml::node*> want, got;
  leaves(original, "", want);
  leaves(back, "", got);
  EXPECT_GT(want.size(), 15u);
  for (const auto& [key, node] : want) {
    ASSERT_TRUE(got.count(key)) << "the writer left out " << key << "\n" << written;
    if (node->is_number())
      EXPECT_EQ(node->value<double>(), got[key]->value<double>()) << key;
    else
      EXPECT_EQ(node->value<std::string>(), got[key]->value<std::string>()) << key;
  }
  EXPECT_EQ(written.rfind("# written by a test\n", 0), 0u) << written;
}

TEST(SiteWriter, CalibratedSiteLoadsBackThroughTheStrictLoader) {
  SiteConfig s = calibrated_laptop();
  s.inter_switch_overlap = OverlapCurve::flat(-0.625);  // a tier where overlap costs, one figure for every size
  const fs::path file = scratch_file("calibrated.toml", format_site_toml(s, "calibrated"));
  const SiteConfig back = load_site_config(file.string());
  // Kept from the laptop site.
  EXPECT_EQ(back.name, "laptop-cpu");
  EXPECT_EQ(back.gpus_per_node, 4);
  EXPECT_EQ(back.peak_tflops_float32, 0.04);
  EXPECT_EQ(back.inter_node_bandwidth_GBps, 0.1);
  EXPECT_EQ(back.checkpoint_dir, "checkpoints");
  EXPECT_EQ(back.signal_lead_s, 30);
  EXPECT_EQ(back.memory_headroom, 0.2);
  // Measured, exactly as written.
  EXPECT_EQ(back.memory_gib, 5.75);
  EXPECT_EQ(back.gemm_tflops_float32, 0.0312);
  EXPECT_EQ(back.gemm_tflops_bfloat16, 0);
  EXPECT_EQ(back.elementwise_GBps, 4.25);
  EXPECT_EQ(back.attention_tflops_float32, 0.0087);
  EXPECT_EQ(back.attention_tflops_bfloat16, 0);
  ASSERT_EQ(back.gemm.size(), 2u);
  EXPECT_EQ(back.gemm[1].k, 32);
  EXPECT_EQ(back.gemm[1].tflops, 0.0153);
  const auto& ag = back.intra_node_fits[static_cast<size_t>(CollectiveKind::all_gather)];
  ASSERT_TRUE(ag.has_value());
  EXPECT_EQ(ag->latency_us, 40.25);
  EXPECT_EQ(ag->bandwidth_GBps, 2.125);
  EXPECT_EQ(ag->residual, 0.05);
  EXPECT_FALSE(back.intra_node_fits[static_cast<size_t>(CollectiveKind::reduce_scatter)]->residual);
  const auto& ar = back.intra_node_fits[static_cast<size_t>(CollectiveKind::all_reduce)];
  EXPECT_EQ(ar->small_max_bytes, 65536);
  EXPECT_EQ(ar->small_latency_us, 12.5);
  EXPECT_EQ(ar->small_bandwidth_GBps, 0.75);
  EXPECT_EQ(ag->small_max_bytes, 0);
  EXPECT_EQ(ar->measured, kIntraSweep);
  EXPECT_FALSE(ag->measured);
  EXPECT_EQ(back.intra_node_overlap, s.intra_node_overlap);
  EXPECT_EQ(back.intra_node_filled_by_others, 0.3125);
  EXPECT_EQ(back.intra_node_cores_busy, 0.5625);
  ASSERT_EQ(back.intra_node_groups.size(), 1u);
  EXPECT_EQ(back.intra_node_groups[0].ranks, 2);
  EXPECT_EQ(back.intra_node_groups[0].filled_by_others, 0.4375);
  EXPECT_EQ(back.intra_node_groups[0].cores_busy, 0.6875);
  EXPECT_EQ(back.intra_node_groups[0].overlap, s.intra_node_groups[0].overlap);
  const auto& pair_ar = back.intra_node_groups[0].fits[static_cast<size_t>(CollectiveKind::all_reduce)];
  ASSERT_TRUE(pair_ar.has_value());
  EXPECT_EQ(pair_ar->latency_us, 120.5);
  EXPECT_EQ(pair_ar->residual, 0.25);
  EXPECT_EQ(pair_ar->small_latency_us, 20);
  EXPECT_EQ(pair_ar->measured, s.intra_node_groups[0].fits[static_cast<size_t>(CollectiveKind::all_reduce)]->measured);
  EXPECT_FALSE(back.intra_node_groups[0].fits[static_cast<size_t>(CollectiveKind::all_gather)]->residual);
  EXPECT_FALSE(back.intra_node_groups[0].fits[static_cast<size_t>(CollectiveKind::reduce_scatter)]);
  EXPECT_TRUE(back.inter_node_groups.empty());
  EXPECT_TRUE(back.inter_node_overlap.empty());
  EXPECT_EQ(back.inter_switch_overlap, OverlapCurve::flat(-0.625));
  EXPECT_FALSE(back.inter_node_fits[static_cast<size_t>(CollectiveKind::all_reduce)]);
  EXPECT_TRUE(back.calibration.present());
  EXPECT_EQ(back.calibration.date, "2026-11-27T10:31:02Z");
  EXPECT_EQ(back.calibration.hosts, std::vector<std::string>{"laptop"});
  EXPECT_EQ(back.calibration.ranks, 4);
  EXPECT_EQ(back.calibration.device, "backend cpu, collectives gloo");
  // Read back and written again, nothing changes.
  EXPECT_EQ(format_site_toml(back, "calibrated"), format_site_toml(s, "calibrated"));
  EXPECT_TRUE(site_differences(s, back).empty());
  fs::remove_all(file.parent_path());
}

TEST(SiteWriter, DifferencesNameEachChangedKeyOldAndNew) {
  const SiteConfig base = load_site_config((kSource / "site_configs/laptop-cpu.toml").string());
  const std::vector<std::string> lines = site_differences(base, calibrated_laptop());
  const std::string all = [&] {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }();
  EXPECT_NE(all.find("[node] memory_gib: 4 -> 5.75\n"), std::string::npos) << all;
  EXPECT_NE(all.find("[network] intra_node_latency_us: 30 -> 61.5\n"), std::string::npos) << all;
  EXPECT_NE(all.find("[compute] gemm: (absent) -> 2 shapes\n"), std::string::npos) << all;
  EXPECT_NE(all.find("[network.intra_node] all_reduce: (absent) -> { latency_us = 61.5, bandwidth_GBps = 1.5, "
                     "small_max_bytes = 65536, small_latency_us = 12.5, small_bandwidth_GBps = 0.75, "
                     "measured at 3 sizes on groups of 4 }\n"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("[calibration] date: (absent) -> \"2026-11-27T10:31:02Z\"\n"), std::string::npos) << all;
  EXPECT_NE(all.find("[network.intra_node] groups: (absent) -> 1 group size\n"), std::string::npos) << all;
  EXPECT_EQ(all.find("peak_tflops"), std::string::npos) << "unchanged keys are not listed\n" << all;
  EXPECT_EQ(site_differences(calibrated_laptop(), base).front().find("-> (absent)"), std::string::npos);
  EXPECT_NE(site_differences(calibrated_laptop(), base).back().find("-> (absent)"), std::string::npos);
}

TEST(SiteConfig, CalibratedKeysAreCheckedLikeEveryOther) {
  auto err = [](const std::string& text) { return error_of([&] { load_site_config_string(text, "s.toml"); }); };
  EXPECT_NE(err("[network.intra_node]\nall_reduce = { latency_us = 30, bandwidth_GBps = -1 }\n")
                .find("s.toml:2:50: network.intra_node.all_reduce.bandwidth_GBps = -1 is out of range"),
            std::string::npos);
  EXPECT_NE(err("[network.inter_node]\nall_gather = { bandwidth_GBps = 1 }\n")
                .find("network.inter_node.all_gather.latency_us is missing"),
            std::string::npos);
  EXPECT_NE(err("[network.intra_node]\nbroadcast = { latency_us = 3, bandwidth_GBps = 1 }\n")
                .find("unknown key 'network.intra_node.broadcast'; valid keys in [network.intra_node]: overlap, "
                      "filled_by_others, cores_busy, all_reduce, all_gather, reduce_scatter, all_to_all"),
            std::string::npos);
  EXPECT_NE(err("[network.intra_node]\nall_reduce = { latency_us = 3, bandwidth_GBps = 1, small_max_bytes = 4096 }\n")
                .find("network.intra_node.all_reduce.small_latency_us is missing; a small-message line has "
                      "small_max_bytes, small_latency_us and small_bandwidth_GBps, or none of them"),
            std::string::npos);
  // A sweep: both keys or neither, each size with bytes and us, ascending, times above 0.
  EXPECT_NE(err("[network.intra_node]\nall_reduce = { latency_us = 3, bandwidth_GBps = 1, measured = [{ bytes = 4096, "
                "us = 40 }] }\n")
                .find("network.intra_node.all_reduce.measured_ranks is missing; a measured sweep has measured_ranks"),
            std::string::npos);
  EXPECT_NE(err("[network.intra_node]\nall_reduce = { latency_us = 3, bandwidth_GBps = 1, measured_ranks = 2, "
                "measured = [{ bytes = 8192, us = 40 }, { bytes = 4096, us = 30 }] }\n")
                .find("network.intra_node.all_reduce.measured[1].bytes = 4096 is not above the size before it; list a "
                      "sweep's sizes ascending, each once"),
            std::string::npos);
  EXPECT_NE(err("[network.intra_node]\nall_reduce = { latency_us = 3, bandwidth_GBps = 1, measured_ranks = 2, "
                "measured = [{ bytes = 4096, us = 0 }] }\n")
                .find("network.intra_node.all_reduce.measured[0].us = 0 is out of range"),
            std::string::npos);
  EXPECT_NE(err("[network.intra_node]\nall_reduce = { latency_us = 3, bandwidth_GBps = 1, measured_ranks = 2, "
                "measured = [{ us = 40 }] }\n")
                .find("network.intra_node.all_reduce.measured[0].bytes is missing; a measured size has bytes"),
            std::string::npos);
  EXPECT_NE(err("[network.inter_node]\noverlap = 1.5\n").find("network.inter_node.overlap = 1.5 is out of range"),
            std::string::npos);
  EXPECT_NE(err("[network.inter_node]\noverlap = -1.5\n").find("network.inter_node.overlap = -1.5 is out of range"),
            std::string::npos);
  // Measured at sizes: each with bytes and fraction, ascending, in range.
  EXPECT_NE(err("[network.inter_node]\noverlap = [{ bytes = 65536, fraction = 0.5 }, { bytes = 4096, fraction = 0 }]\n")
                .find("network.inter_node.overlap[1].bytes = 4096 is not above the size before it; list an overlap's "
                      "sizes ascending, each once"),
            std::string::npos);
  EXPECT_NE(err("[network.inter_node]\noverlap = [{ bytes = 65536 }]\n")
                .find("network.inter_node.overlap[0].fraction is missing; a measured overlap has bytes"),
            std::string::npos);
  EXPECT_NE(err("[network.inter_node]\noverlap = [{ bytes = 65536, fraction = -2 }]\n")
                .find("network.inter_node.overlap[0].fraction = -2 is out of range"),
            std::string::npos);
  EXPECT_NE(err("[network.inter_node]\noverlap = []\n").find("network.inter_node.overlap is an empty list"),
            std::string::npos);
  EXPECT_NE(
      err("[network.inter_node]\noverlap = [0.5]\n").find("network.inter_node.overlap must be an array of tables"),
      std::string::npos);
  EXPECT_NE(err("[network.intra_node]\nfilled_by_others = -0.5\n")
                .find("network.intra_node.filled_by_others = -0.5 is out of range"),
            std::string::npos);
  EXPECT_NE(err("[network.inter_node]\ngroups = [{ ranks = 2, cores_busy = 1.25 }]\n")
                .find("cores_busy = 1.25 is out of range"),
            std::string::npos);
  EXPECT_NE(err("[network]\nintra_nodes = 3\n").find("did you mean 'network.intra_node'"), std::string::npos);
  EXPECT_NE(err("[calibration]\ndate = \"yesterday\"\n").find("calibration.date = \"yesterday\" is not a UTC time"),
            std::string::npos);
  EXPECT_NE(err("[calibration]\nranks = 4\n").find("calibration.date is missing"), std::string::npos);
  EXPECT_NE(err("[calibration]\ndate = \"2026-11-27T10:31:02Z\"\n[calibration.residual.inter_node]\nall_reduce = 0.1\n")
                .find("calibration.residual.inter_node.all_reduce is the residual of a fit that [network.inter_node] "
                      "does not have"),
            std::string::npos);
  EXPECT_NE(err("[network.intra_node]\ngroups = [{ all_reduce = { latency_us = 3, bandwidth_GBps = 1 } }]\n")
                .find("network.intra_node.groups[0].ranks is missing"),
            std::string::npos);
  EXPECT_NE(err("[network.intra_node]\ngroups = [{ ranks = 1 }]\n").find("network.intra_node.groups[0].ranks = 1 is out of range"),
            std::string::npos);
  EXPECT_NE(err("[network.intra_node]\ngroups = [{ ranks = 2 }, { ranks = 2 }]\n")
                .find("= 2 is listed twice in network.intra_node.groups"),
            std::string::npos);
  EXPECT_NE(err("[calibration]\ndate = \"2026-11-27T10:31:02Z\"\n[calibration.residual.intra_node]\n"
                "groups = [{ ranks = 4, all_reduce = 0.1 }]\n")
                .find("has residuals but [network.intra_node] groups has no entry of that size"),
            std::string::npos);
  EXPECT_NE(err("[compute]\ngemm = [{ m = 1, k = 2, n = 3 }]\n").find("compute.gemm[0].tflops is missing"),
            std::string::npos);
  EXPECT_NE(err("[compute]\ngemm = [{ m = 1, k = 2, n = 3, tflops = 1 }, { m = 1, k = 2, n = 3, tflops = 2 }]\n")
                .find("(float32) is listed twice in compute.gemm"),
            std::string::npos);
  EXPECT_NE(err("[compute]\ngemm = [{ m = 1, k = 2, n = 3, tflops = 1, dtype = \"int8\" }]\n")
                .find("compute.gemm[0].dtype = \"int8\" is not allowed"),
            std::string::npos);
  EXPECT_NE(err("[compute]\ngemm_tflops_float32 = 0\n").find("compute.gemm_tflops_float32 = 0 is out of range"),
            std::string::npos);
  // [[compute.gemm]] headers are the same array of tables.
  const SiteConfig s = load_site_config_string(
      "[[compute.gemm]]\ndtype = \"bfloat16\"\nm = 64\nk = 32\nn = 16\ntflops = 2.5\n", "s.toml");
  ASSERT_EQ(s.gemm.size(), 1u);
  EXPECT_EQ(s.gemm[0].dtype, ElementType::bfloat16);
  EXPECT_EQ(s.gemm[0].tflops, 2.5);
}

TEST(Config, ChooserInputTakesTheCalibratedFiguresOfTheJobsDtype) {
  SiteConfig site = calibrated_laptop();
  site.gemm.push_back({ElementType::bfloat16, 256, 64, 192, 7.5});
  site.gemm_tflops_bfloat16 = 6;
  site.inter_node_fits[static_cast<size_t>(CollectiveKind::all_gather)] =
      CollectiveFit{120, 0.25, 0.1, 0, 0, 0, std::nullopt};
  JobConfig job = load_job_config((kSource / "job_templates/tiny.toml").string(), site);
  const Machine m = chooser_input(site, job, 2, 4).machine;
  EXPECT_DOUBLE_EQ(m.gemm_flops, 0.0312e12);
  ASSERT_EQ(m.gemm_rates.size(), 2u);
  EXPECT_EQ(m.gemm_rates[0].shape, (GemmShape{256, 64, 192}));
  EXPECT_DOUBLE_EQ(m.gemm_rates[0].flops_per_s, 0.0211e12);
  const auto& ar = m.intra_node_measured.kinds[static_cast<size_t>(CollectiveKind::all_reduce)];
  ASSERT_TRUE(ar.has_value());
  EXPECT_DOUBLE_EQ(ar->latency_s, 61.5e-6);
  EXPECT_DOUBLE_EQ(ar->bandwidth_bytes_per_s, 1.5e9);
  EXPECT_DOUBLE_EQ(m.inter_node_measured.kinds[static_cast<size_t>(CollectiveKind::all_gather)]->bandwidth_bytes_per_s, 0.25e9);
  EXPECT_FALSE(m.inter_node_measured.kinds[static_cast<size_t>(CollectiveKind::all_reduce)]);
  EXPECT_FALSE(m.inter_switch_measured.kinds[static_cast<size_t>(CollectiveKind::all_gather)]);
  const auto& small = m.intra_node_measured.small[static_cast<size_t>(CollectiveKind::all_reduce)];
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(small->max_bytes, 65536);
  EXPECT_DOUBLE_EQ(small->link.latency_s, 12.5e-6);
  EXPECT_DOUBLE_EQ(small->link.bandwidth_bytes_per_s, 0.75e9);
  EXPECT_FALSE(m.intra_node_measured.small[static_cast<size_t>(CollectiveKind::all_gather)]);
  EXPECT_EQ(m.intra_node_measured.overlap.at(196608), 0.375);
  EXPECT_EQ(m.intra_node_measured.overlap.at(16384), -0.25);
  EXPECT_TRUE(m.inter_node_measured.overlap.empty());
  EXPECT_EQ(m.intra_node_measured.filled_by_others, 0.3125);
  ASSERT_EQ(m.intra_node_measured.groups.size(), 1u);
  EXPECT_EQ(m.intra_node_measured.groups[0].filled_by_others, 0.4375);
  EXPECT_EQ(m.inter_node_measured.filled_by_others, 0);
  EXPECT_EQ(m.intra_node_measured.cores_busy, 0.5625);
  EXPECT_EQ(m.intra_node_measured.groups[0].cores_busy, 0.6875);
  EXPECT_EQ(m.inter_node_measured.cores_busy, 0);
  job.training.dtype = ElementType::bfloat16;
  const Machine bf16 = chooser_input(site, job, 2, 4).machine;
  EXPECT_DOUBLE_EQ(bf16.gemm_flops, 6e12);
  ASSERT_EQ(bf16.gemm_rates.size(), 1u);
  EXPECT_DOUBLE_EQ(bf16.gemm_rates[0].flops_per_s, 7.5e12);
  // A site that was never calibrated leaves the chooser's measured fields unset.
  const SiteConfig laptop = load_site_config((kSource / "site_configs/laptop-cpu.toml").string());
  EXPECT_FALSE(chooser_input(laptop, job, 1, 4).machine.calibrated_compute());
}

}  // namespace
}  // namespace axonn
