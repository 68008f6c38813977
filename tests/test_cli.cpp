// The `axonn` executable as a user runs it: output and exit codes (0 ok, 2 bad input,
// 3 no layout fits).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
const std::string kAxonn = std::string(AXONN_BINARY_DIR) + "/bin/axonn";
const std::string kSource = AXONN_SOURCE_DIR;

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr
};

Result run_command(const std::string& command) {
  Result r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

Result run(const std::string& args) { return run_command(kAxonn + " " + args); }

// `axonn layout` with the Slurm allocation variables unset, then `assignments` set
// ("SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=8"), whatever the environment ctest runs in.
Result run_in_allocation(const std::string& assignments, const std::string& args) {
  std::string unset = "env";
  for (const char* name :
       {"SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS", "SLURM_GPUS_ON_NODE"})
    unset += std::string(" -u ") + name;
  return run_command(unset + " " + assignments + " " + kAxonn + " " + args);
}

std::string first_line(const std::string& output) { return output.substr(0, output.find('\n')); }

// The dynamic loader reads an empty run-path entry ("a::b", or a leading or trailing ':') as
// the current folder, and would look there for every library the executable needs, wherever
// a user starts it (runner/CMakeLists.txt says how CMake once put one there).
TEST(Cli, RunPathHasNoEmptyEntry) {
  const Result r = run_command("readelf -d " + kAxonn);
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  if (!std::regex_search(r.output, m, std::regex(R"(Library (?:runpath|rpath): \[([^\]]*)\])"))) return;
  const std::string path = m[1];
  EXPECT_TRUE(path.find("::") == std::string::npos && path.front() != ':' && path.back() != ':') << path;
}

// The version calibrate records in a site's [calibration]: the CMake project's.
TEST(Cli, VersionIsTheProjectVersion) {
  const Result r = run("--version");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::regex_match(r.output, std::regex("axonn [0-9]+\\.[0-9]+\\.[0-9]+\n"))) << r.output;
  EXPECT_NE(run("--help").output.find("calibrate"), std::string::npos);
}

TEST(CliLayout, RanksLayoutsForTheTinyJob) {
  const Result r = run("layout --site " + kSource + "/site_configs/laptop-cpu.toml --job " + kSource +
                       "/job_templates/tiny.toml --nodes 1 --explain");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("best layout: 4x1x1x1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory per GPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("runner-ups:"), std::string::npos) << r.output;
}

// As the README gives it, without --site: the site `axonn train` would use, AXONN_SITE_CONFIG
// (the SPANK plugin's) else the built-in one, and the first line says which.
TEST(CliLayout, WithoutSiteUsesAxonnSiteConfigElseTheBuiltInSite) {
  const std::string args = "layout --job " + kSource + "/job_templates/tiny.toml --nodes 1 --gpus-per-node 4";
  const Result from_env =
      run_command("AXONN_SITE_CONFIG=" + kSource + "/site_configs/dgx-h100.toml " + kAxonn + " " + args);
  EXPECT_EQ(from_env.code, 0) << from_env.output;
  EXPECT_EQ(first_line(from_env.output).rfind("site dgx-h100 from AXONN_SITE_CONFIG=", 0), 0u) << from_env.output;
  EXPECT_NE(from_env.output.find("site dgx-h100, job "), std::string::npos) << from_env.output;
  const Result builtin = run_command("env -u AXONN_SITE_CONFIG " + kAxonn + " " + args);
  EXPECT_EQ(builtin.code, 0) << builtin.output;
  EXPECT_NE(first_line(builtin.output).find("neither --site nor AXONN_SITE_CONFIG names one"), std::string::npos)
      << builtin.output;
}

TEST(CliLayout, KeepsTensorGroupsInsideNodesWhenInterNodeIsSlow) {
  const Result r = run("layout --site " + kSource + "/site_configs/dgx-h100.toml --job " + kSource +
                       "/job_templates/gpt-small.toml --nodes 16 --explain");
  EXPECT_EQ(r.code, 0) << r.output;
  // The x·y·z groups fill a node (8 GPUs), so only data parallelism crosses nodes.
  EXPECT_NE(r.output.find("data groups of 16 over inter-node links"), std::string::npos) << r.output;
  for (const char* axis : {"x", "y", "z"})
    EXPECT_FALSE(
        std::regex_search(r.output, std::regex(std::string("\\n *") + axis + " groups of [0-9]+ over inter-node")))
        << axis << " groups cross nodes:\n"
        << r.output;
}

TEST(CliLayout, JsonHasBestRankedAndRejected) {
  const Result r = run("layout --site " + kSource + "/site_configs/dgx-h100.toml --job " + kSource +
                       "/job_templates/gpt-small.toml --nodes 2 --json --top 3");
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* key : {"\"best\"", "\"ranked\"", "\"rejected\"", "\"step_time_s\"", "\"collectives\"",
                          "\"recompute\" : \"none\"", "\"recompute_flops_per_rank\"",
                          // dgx-h100 measured no overlap: "auto" overlaps, and says why
                          "\"overlap_comm\" : true", "\"overlap_reason\" : \"auto: on: no link tier"})
    EXPECT_NE(r.output.find(key), std::string::npos) << key << "\n" << r.output;
}

// GPT-2 small at micro-batch 64: its activations alone (no T×T attention matrix is kept) need
// more than the laptop's 4 GiB per rank at every layout of 4 ranks.
TEST(CliLayout, NoFitExitsThreeWithTheSmallestChange) {
  const fs::path job = fs::path(AXONN_BINARY_DIR) / "test_cli_no_fit.toml";
  std::ifstream in(kSource + "/job_templates/gpt-small.toml");
  std::ofstream out(job);
  for (std::string line; std::getline(in, line);)
    out << (line == "micro_batch = 16" ? "micro_batch = 64" : line) << "\n";
  out.close();
  const Result r =
      run("layout --site " + kSource + "/site_configs/laptop-cpu.toml --job " + job.string() + " --nodes 1");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("no layout of 4 ranks fits this job: needs >= "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("or micro_batch <= "), std::string::npos) << r.output;
}

// The tiny job with the MoE keys its template documents (commented out) set as shown there.
fs::path tiny_moe_job() {
  const fs::path job = fs::path(AXONN_BINARY_DIR) / "test_cli_moe.toml";
  std::ifstream in(kSource + "/job_templates/tiny.toml");
  std::ofstream out(job);
  for (std::string line; std::getline(in, line);) {
    for (const char* key : {"experts", "top_k", "moe_every", "capacity_factor", "aux_loss_weight"})
      if (line.rfind(std::string("# ") + key + " = ", 0) == 0) line.erase(0, 2);
    out << line << "\n";
  }
  return job;
}

// The chooser searches expert parallelism for a mixture-of-experts job: it ranks layouts with
// an "eN" (N dividing E and G_data) beside those without, and shows the expert axes' columns.
TEST(CliLayout, RanksAnMoeJobAmongLayoutsWithExpertParallelism) {
  const fs::path job = tiny_moe_job();
  const Result r = run("layout --site " + kSource + "/site_configs/laptop-cpu.toml --job " + job.string() +
                       " --nodes 1 --top 100 --explain");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("[0-9]+x[0-9]+x[0-9]+x[0-9]+e[0-9]"))) << r.output;
  EXPECT_NE(r.output.find("expert ms/MiB"), std::string::npos) << r.output;
}

// A layout's expert part is checked against the job's model before any rank starts, from
// --layout and from AXONN_LAYOUT alike, naming the fix.
TEST(CliRun, ExpertParallelismIsCheckedAgainstTheModelBeforeAnyRankStarts) {
  const std::string tiny = kSource + "/job_templates/tiny.toml";
  const std::string run_4 = "env -u AXONN_LAYOUT -u AXONN_LAYOUT_ORIGIN ";
  struct Case {
    std::string command, says;
  };
  const std::vector<Case> cases = {
      {run_4 + kAxonn + " run -n 4 " + tiny + " --layout 4x1x1x1e4",
       "layout 4x1x1x1e4 (--layout) does not fit the job: e4 asks for expert parallelism 4 but the model is dense; "
       "set model.experts or drop 'e4'"},
      {run_4 + "AXONN_LAYOUT=4x1x1x1e4:yxzd " + kAxonn + " run -n 4 " + tiny,
       "layout 4x1x1x1e4 (AXONN_LAYOUT) does not fit the job: e4 asks for expert parallelism 4 but the model is "
       "dense"},
      {run_4 + kAxonn + " run -n 4 " + tiny_moe_job().string() + " model.experts=6 --layout 4x1x1x1e4",
       "layout 4x1x1x1e4 (--layout) does not fit the job: e4 asks for expert parallelism 4, which does not divide "
       "model.experts = 6; use one that divides both 6 and G_data = 4 (e2), or drop 'e4'"},
      {run_4 + kAxonn + " run -n 4 " + tiny + " --layout 4x1x1x1e3",
       "layout '4x1x1x1e3': expert parallelism 3 does not divide the data axis 4"},
  };
  for (const Case& c : cases) {
    const Result r = run_command(c.command);
    EXPECT_EQ(r.code, 2) << c.command << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.command << "\n" << r.output;
    EXPECT_EQ(r.output.find("[0] "), std::string::npos) << "a rank started: " << c.command << "\n" << r.output;
  }
}

// A training.tp_chunks that does not split the micro-batch's rows into equal chunks exits 2
// before any rank starts, naming the key, the value and the counts that would, at the layout
// given or the one the chooser picks; 0 or a word fails at load.
TEST(CliRun, TpChunksThatDoNotSplitTheMicroBatchExitTwoBeforeAnyRankStarts) {
  const std::string tiny = kSource + "/job_templates/tiny.toml";
  const std::string run_2 = "env -u AXONN_LAYOUT -u AXONN_LAYOUT_ORIGIN " + kAxonn + " run -n 2 " + tiny;
  // tiny: 12 sequences of 64 tokens, micro-batch 4 on one data rank: 256 rows.
  const std::string counts = "counts that would: 1, 2, 4, 8, 16, 32, 64, or \"auto\"";
  struct Case {
    std::string command, says;
  };
  const std::vector<Case> cases = {
      {run_2 + " --layout 1x2x1x1 training.tp_chunks=3",
       "training.tp_chunks = 3 does not split the micro-batch's 256 rows (micro-batch 4 x sequence 64 at layout "
       "1x2x1x1) into equal chunks; " + counts + " (layout from --layout)"},
      // The chooser's 2x1x1x1 (micro-batch 3 of 6 sequences per rank) takes 3 but not 5.
      {run_2 + " training.tp_chunks=5",
       "training.tp_chunks = 5 does not split the micro-batch's 192 rows (micro-batch 3 x sequence 64 at layout "
       "2x1x1x1) into equal chunks; counts that would: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, or \"auto\" (the "
       "layout the chooser picks with one chunk)"},
      {run_2 + " training.tp_chunks=0", "training.tp_chunks = 0 is out of range; allowed [1, 64]"},
      {run_2 + " training.tp_chunks='\"many\"'", "training.tp_chunks must be an integer or \"auto\", got \"many\""},
  };
  for (const Case& c : cases) {
    const Result r = run_command(c.command);
    EXPECT_EQ(r.code, 2) << c.command << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.command << "\n" << r.output;
    EXPECT_EQ(r.output.find("[0] "), std::string::npos) << "a rank started: " << c.command << "\n" << r.output;
  }
}

TEST(CliLayout, BadInputExitsTwoWithThePosition) {
  const fs::path bad = fs::path(AXONN_BINARY_DIR) / "test_cli_bad.toml";
  std::ofstream(bad) << "[model]\nlayers = 2\nhiden = 64\n";
  const Result r = run("layout --site " + kSource + "/site_configs/laptop-cpu.toml --job " + bad.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("test_cli_bad.toml:3:1: unknown key 'model.hiden' (did you mean 'model.hidden'?)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(run("layout --site x.toml --job y.toml --nodes zero").code, 2);
  EXPECT_EQ(run("layout --sight x.toml").code, 2);
  EXPECT_EQ(run("frobnicate").code, 2);
}

// The README's tiny job on 2048 DGX nodes: no split of 16384 ranks divides its batch of 12 and
// hidden 64. The answer comes at once, blames divisibility and names the count that runs.
TEST(CliLayout, TooManyGpusForTheJobBlamesDivisibilityAndNamesACountThatRuns) {
  const Result r = run("layout --site " + kSource + "/site_configs/dgx-h100.toml --job " + kSource +
                       "/job_templates/tiny.toml --nodes 2048");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("no layout of 16384 ranks fits this job: no data x X x Y x Z split of 16384 ranks divides "
                          "the job (e.g. 16384x1x1x1: global_batch=12 is not divisible by G_data*G_z=16384); the "
                          "nearest GPU count on which a layout runs: 3072 GPUs (384 nodes of 8), none above 16384\n"),
            std::string::npos)
      << r.output;
  const Result huge = run("layout --site " + kSource + "/site_configs/dgx-h100.toml --job " + kSource +
                          "/job_templates/tiny.toml --nodes 1048576 --gpus-per-node 32");
  EXPECT_EQ(huge.code, 2) << huge.output;
  EXPECT_NE(huge.output.find("33554432 ranks is more than the 16777216 the chooser handles"), std::string::npos)
      << huge.output;
}

TEST(CliLayout, ConfigThatIsADirectoryOrEmptyExitsTwoNamingIt) {
  const std::string tiny = kSource + "/job_templates/tiny.toml", site = kSource + "/site_configs/laptop-cpu.toml";
  const Result null_site = run("layout --site /dev/null --job " + tiny + " --nodes 1");
  EXPECT_EQ(null_site.code, 2) << null_site.output;
  EXPECT_EQ(first_line(null_site.output).rfind("axonn layout: /dev/null: holds no settings", 0), 0u)
      << null_site.output;
  const Result dir_job = run("layout --site " + site + " --job " + kSource + "/job_templates --nodes 1");
  EXPECT_EQ(dir_job.code, 2) << dir_job.output;
  EXPECT_EQ(first_line(dir_job.output).rfind("axonn layout: " + kSource + "/job_templates: is a directory", 0), 0u)
      << dir_job.output;
}

TEST(CliLayout, WithoutNodesOutsideAnAllocationIsAnError) {
  const Result r = run_in_allocation(
      "", "layout --site " + kSource + "/site_configs/laptop-cpu.toml --job " + kSource + "/job_templates/tiny.toml");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(first_line(r.output).rfind("axonn layout: missing --nodes N: outside a Slurm allocation", 0), 0u)
      << r.output;
}

// Inside salloc or sbatch the allocation's nodes and tasks (or GPUs) per node are priced, and
// the first line says where they came from.
TEST(CliLayout, WithoutNodesInsideAnAllocationUsesItAndSaysSo) {
  const std::string args =
      "layout --site " + kSource + "/site_configs/dgx-h100.toml --job " + kSource + "/job_templates/tiny.toml";
  const Result tasks = run_in_allocation("SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=8", args);
  EXPECT_EQ(tasks.code, 0) << tasks.output;
  EXPECT_EQ(first_line(tasks.output), "site dgx-h100, job " + kSource +
                                          "/job_templates/tiny.toml: 2 nodes x 4 GPUs = 8 ranks (the Slurm allocation: "
                                          "SLURM_JOB_NUM_NODES=2; SLURM_NTASKS=8 / 2 nodes)");
  // In the allocation `variables` the layout runs and its first line holds `priced`.
  const auto expect_priced = [&args](const std::string& variables, const std::string& priced) {
    const Result r = run_in_allocation(variables, args);
    EXPECT_EQ(r.code, 0) << variables << "\n" << r.output;
    EXPECT_NE(first_line(r.output).find(priced), std::string::npos) << variables << "\n" << r.output;
  };
  expect_priced("SLURM_NNODES=3 SLURM_NTASKS_PER_NODE=2 SLURM_NTASKS=6",
                ": 3 nodes x 2 GPUs = 6 ranks (the Slurm allocation: SLURM_NNODES=3; SLURM_NTASKS_PER_NODE=2)");
  expect_priced("SLURM_JOB_NUM_NODES=1 SLURM_GPUS_ON_NODE=4",
                ": 1 nodes x 4 GPUs = 4 ranks (the Slurm allocation: SLURM_JOB_NUM_NODES=1; SLURM_GPUS_ON_NODE=4)");
  expect_priced("SLURM_JOB_NUM_NODES=2",
                ": 2 nodes x 8 GPUs = 16 ranks (the Slurm allocation: SLURM_JOB_NUM_NODES=2; no task count, so site "
                "dgx-h100's gpus_per_node)");
  const Result explicit_count = run_in_allocation("SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=8", args + " --nodes 1");
  EXPECT_EQ(first_line(explicit_count.output),
            "site dgx-h100, job " + kSource + "/job_templates/tiny.toml: 1 nodes x 8 GPUs = 8 ranks")
      << explicit_count.output;
  const Result uneven = run_in_allocation("SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=5", args);
  EXPECT_EQ(uneven.code, 2) << uneven.output;
  EXPECT_NE(uneven.output.find("SLURM_NTASKS=5 tasks do not split evenly over SLURM_JOB_NUM_NODES=2 nodes"),
            std::string::npos)
      << uneven.output;
  const Result bad = run_in_allocation("SLURM_JOB_NUM_NODES=two", args);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("SLURM_JOB_NUM_NODES='two' is not a count"), std::string::npos) << bad.output;
}

// --explain says what the collectives move per element, as docs/parallel-plan.md's table does.
TEST(CliLayout, ExplainSaysTheBytesPerElementOfTheJobsDtype) {
  const std::string args = "layout --site " + kSource + "/site_configs/dgx-h100.toml --job " + kSource +
                           "/job_templates/gpt-small.toml --nodes 1 --explain";
  const Result bf16 = run(args);
  EXPECT_EQ(bf16.code, 0) << bf16.output;
  EXPECT_NE(bf16.output.find("\n  bytes per element: weights, activations and updated weights 2 bytes (bfloat16), "
                             "gradients, statistics and updated small tensors 4 bytes (float32)\n"),
            std::string::npos)
      << bf16.output;
  const Result f32 = run("layout --site " + kSource + "/site_configs/dgx-h100.toml --job " + kSource +
                         "/job_templates/tiny.toml --nodes 1 --explain");
  EXPECT_EQ(f32.code, 0) << f32.output;
  EXPECT_NE(f32.output.find("\n  bytes per element: weights, activations, gradients, statistics, updated weights "
                            "and updated small tensors 4 bytes (float32)\n"),
            std::string::npos)
      << f32.output;
}

}  // namespace
