// The `axonn` executable as a user runs it: output and exit codes (0 ok, 2 bad input,
// 3 no layout fits).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

namespace {

namespace fs = std::filesystem;
const std::string kAxonn = std::string(AXONN_BINARY_DIR) + "/bin/axonn";
const std::string kSource = AXONN_SOURCE_DIR;

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr
};

Result run(const std::string& args) {
  Result r;
  FILE* pipe = popen((kAxonn + " " + args + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string first_line(const std::string& output) { return output.substr(0, output.find('\n')); }

TEST(CliLayout, RanksLayoutsForTheTinyJob) {
  const Result r = run("layout --site " + kSource + "/site_configs/laptop-cpu.toml --job " + kSource +
                       "/job_templates/tiny.toml --nodes 1 --explain");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("best layout: 4x1x1x1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory per GPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("runner-ups:"), std::string::npos) << r.output;
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
  for (const char* key : {"\"best\"", "\"ranked\"", "\"rejected\"", "\"step_time_s\"", "\"collectives\""})
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

}  // namespace
