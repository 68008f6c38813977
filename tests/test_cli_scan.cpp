// `axonn layout --scan` as a user runs it: a row per GPU count with the layout `axonn layout`
// picks there, the knee and the axis whose communication grows at it, energy and cost from the
// site's [cost], the same in --json, and exit 2 (malformed counts) or 3 (nothing fits
// anywhere, each count saying why).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>

#include "process_helpers.hpp"
#include "scratch_dir.hpp"

namespace {

using axonn::test::contains;
using axonn::test::kAxonn;
using axonn::test::kSourceDir;
using axonn::test::run_command;

const std::string kDgx = kSourceDir + "/site_configs/dgx-h100.toml";
const std::string k7b = kSourceDir + "/job_templates/gpt-7b.toml";
const std::string kSmall = kSourceDir + "/job_templates/gpt-small.toml";
const std::string kTiny = kSourceDir + "/job_templates/tiny.toml";

// DGX-like nodes whose inter-node link is 5000x slower than NDR, priced at 2.5 per GPU-hour,
// with no power figure: the job slows down as soon as it leaves one node.
const std::string kSlowNetworkSite =
    "[site]\nname = \"slow-network\"\n[node]\ngpus_per_node = 8\nmemory_gib = 80\n[compute]\n"
    "peak_tflops_bfloat16 = 989\n[network]\ninter_node_bandwidth_GBps = 0.01\n[cost]\ngpu_hour_cost = 2.5\n";
// Links that cost nothing: every added GPU is worth a whole one.
const std::string kFreeNetworkSite =
    "[site]\nname = \"free-network\"\n[node]\ngpus_per_node = 8\nmemory_gib = 80\n[compute]\n"
    "peak_tflops_bfloat16 = 989\n[network]\nintra_node_bandwidth_GBps = 1e6\nintra_node_latency_us = 0\n"
    "inter_node_bandwidth_GBps = 1e6\ninter_node_latency_us = 0\n";

std::string first_line(const std::string& output) { return output.substr(0, output.find('\n')); }

class CliScan : public axonn::test::ScratchDirTest {
 protected:
  axonn::test::CommandResult layout(const std::string& site, const std::string& job, const std::string& args) const {
    return run_command(kAxonn + " layout --site " + site + " --job " + job + " " + args);
  }
  // Runs `check` (Python, the JSON object as `d`) on the JSON the scan printed; "ok" when every
  // assert holds, else the failed assertion.
  std::string check_json(const std::string& json, const std::string& check) const {
    const std::string data = write("scan.json", json);
    const std::string script =
        write("check.py", "import json, math, sys\nd = json.load(open(sys.argv[1]))\n" + check + "\nprint(\"ok\")\n");
    return run_command("/usr/bin/python3 " + script + " " + data).output;
  }
};

struct Row {
  size_t at = std::string::npos;  // where it starts in the output
  std::string layout;             // its best layout ("16x1x1x8:xyzd"); empty when there is no such row
};

Row table_row(const std::string& output, int gpus, int nodes) {
  std::smatch m;
  const std::regex row("\\n +" + std::to_string(gpus) + " +" + std::to_string(nodes) + " +([0-9x]+:[xyzd]{4}) ");
  if (!std::regex_search(output, m, row)) return {};
  return {static_cast<size_t>(m.position(0)), m[1].str()};
}

TEST_F(CliScan, EachCountsRowHasTheLayoutThatAxonnLayoutPicksThere) {
  const auto r = layout(kDgx, k7b, "--scan 128:2048");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(first_line(r.output),
            "site dgx-h100, job " + k7b +
                ": 8 GPUs per node (site dgx-h100's gpus_per_node); 1024 sequences x 2048 tokens = 2097152 tokens per "
                "step, 67000 steps (training.steps)")
      << r.output;
  EXPECT_TRUE(contains(r.output, "tokens/s/GPU  vs 128  added tokens/s/GPU")) << r.output;
  size_t previous_row = 0;
  for (int gpus = 128; gpus <= 2048; gpus *= 2) {
    const Row row = table_row(r.output, gpus, gpus / 8);
    ASSERT_FALSE(row.layout.empty()) << gpus << " GPUs has no row:\n" << r.output;
    EXPECT_GT(row.at, previous_row) << "rows out of order at " << gpus << ":\n" << r.output;
    previous_row = row.at;
    const auto single = layout(kDgx, k7b, "--nodes " + std::to_string(gpus / 8));
    EXPECT_TRUE(contains(single.output, "best layout: " + row.layout + " ")) << gpus << " GPUs:\n" << single.output;
  }
  // dgx-h100 gives the H100's 700 W and no price.
  EXPECT_TRUE(contains(r.output, "  energy kWh\n")) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "energy: to train, GPUs only (700 W each; no CPUs, network or cooling); site dgx-h100 "
                       "sets no cost.gpu_hour_cost, so no cost column\n"))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\\n(knee at [0-9]+ GPUs|no knee): "))) << r.output;
}

// The knee is where an added GPU buys less than half of a GPU at the smallest count: here the
// second node, and the axis that grows there is the one whose groups now cross nodes.
TEST_F(CliScan, KneeIsWhereTheJobLeavesItsNodeOnASlowNetwork) {
  const auto r = layout(write("slow.toml", kSlowNetworkSite), kSmall, "--scan 8:32");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "\nknee at 16 GPUs: each of the 8 GPUs added since 8 bought -")) << r.output;
  // The knee's row says so, and only it.
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\\n +16 +2 +[^\\n]*  <- knee\\n"))) << r.output;
  EXPECT_EQ(r.output.find("<- knee"), r.output.rfind("<- knee")) << r.output;
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex("tokens/s per GPU at 8 GPUs; the (x|y|z|data) axis's communication "
                                             "grows most there, [0-9.e-]+ -> [0-9.e-]+ s per step, its groups "
                                             "of [0-9]+ over (-|intra-node) -> [0-9]+ over inter-node links; "
                                             "best layouts [0-9x]+:[xyzd]+ -> [0-9x]+:[xyzd]+\\n")))
      << r.output;
  EXPECT_TRUE(contains(r.output, "  cost/Mtoken\n")) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "; cost: 2.5 per GPU-hour; site slow-network sets no cost.gpu_power_watts, so no "
                       "energy column\n"))
      << r.output;
}

TEST_F(CliScan, NoKneeWhileEveryAddedGpuPaysItsWay) {
  const auto r = layout(write("free.toml", kFreeNetworkSite), kSmall, "--scan 8:64");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "\nno knee: at every count each added GPU bought at least half (")) << r.output;
  EXPECT_FALSE(contains(r.output, "knee at")) << r.output;
  EXPECT_FALSE(contains(r.output, "<- knee")) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "site free-network sets no cost.gpu_power_watts or cost.gpu_hour_cost, so no "
                       "energy or cost column"))
      << r.output;
}

// The JSON holds what the table does, and its numbers follow from one another and the site.
TEST_F(CliScan, JsonHasTheRowsAndTheKnee) {
  const auto slow = layout(write("slow.toml", kSlowNetworkSite), kSmall, "--scan 8:32 --json");
  ASSERT_EQ(slow.code, 0) << slow.output;
  EXPECT_EQ(check_json(slow.output, R"(
rows = d["rows"]
assert [r["gpus"] for r in rows] == [8, 16, 32], rows
assert [r["nodes"] for r in rows] == [1, 2, 4], rows
assert d["gpu_hour_cost"] == 2.5 and "gpu_power_watts" not in d, d
assert d["tokens_per_step"] == 512 * 1024 and d["steps"] == 5000, d
assert "marginal_tokens_per_s_per_gpu" not in rows[0], rows[0]
for i, r in enumerate(rows):
    assert r["fits"] and r["best"] == r["layout"] + ":" + r["order"], r
    assert math.isclose(r["tokens_per_s"], d["tokens_per_step"] / r["step_time_s"]), r
    assert math.isclose(r["tokens_per_s_per_gpu"] / rows[0]["tokens_per_s_per_gpu"], r["per_gpu_vs_first"]), r
    assert math.isclose(r["train_time_s"], 5000 * r["step_time_s"]), r
    assert math.isclose(r["cost_per_million_tokens"], r["gpus"] * 2.5 / 3600 * 1e6 / r["tokens_per_s"]), r
    assert "energy_kwh" not in r, r
    assert math.isclose(sum(r["axes_comm_time_s"].values()), r["comm_time_s"]), r
    if i:
        gain = (r["tokens_per_s"] - rows[i - 1]["tokens_per_s"]) / (r["gpus"] - rows[i - 1]["gpus"])
        assert math.isclose(r["marginal_tokens_per_s_per_gpu"], gain), r
k = d["knee"]
assert (k["gpus"], k["previous_gpus"]) == (16, 8), k
assert math.isclose(k["threshold_tokens_per_s_per_gpu"], rows[0]["tokens_per_s_per_gpu"] / 2), k
assert k["best_before"] == rows[0]["best"] and k["best_at"] == rows[1]["best"], k
assert k["link_after"] == "inter-node" and k["link_before"] in ("-", "intra-node"), k
assert k["comm_after_s"] == rows[1]["axes_comm_time_s"][k["growing_axis"]], k)"),
            "ok\n");
  const auto dgx = layout(kDgx, k7b, "--scan 128,512 --json");
  ASSERT_EQ(dgx.code, 0) << dgx.output;
  EXPECT_EQ(check_json(dgx.output, R"(
assert d["gpu_power_watts"] == 700 and "gpu_hour_cost" not in d, d
for r in d["rows"]:
    assert math.isclose(r["energy_kwh"], r["gpus"] * 0.7 * r["train_time_s"] / 3600), r
    assert "cost_per_million_tokens" not in r, r)"),
            "ok\n");
  const auto free = layout(write("free.toml", kFreeNetworkSite), kSmall, "--scan 8:64 --json");
  ASSERT_EQ(free.code, 0) << free.output;
  EXPECT_EQ(check_json(free.output, "assert \"knee\" not in d and len(d[\"rows\"]) == 4, d"), "ok\n");
}

TEST_F(CliScan, MalformedCountsExitTwoNamingTheValueAndTheFix) {
  const auto expect = [this](const std::string& args, const std::string& line) {
    const auto r = layout(kDgx, k7b, args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_EQ(first_line(r.output), line) << args;
  };
  expect("--scan 64:8",
         "axonn layout: --scan '64:8': the range starts above its end (64 > 8); write it smallest first: 8:64");
  expect("--scan 0:64", "axonn layout: --scan '0:64': 0 GPUs cannot train; counts start at 1");
  expect("--scan 8:100",
         "axonn layout: --scan '8:100': 100 is not 8 doubled a whole number of times; end the range at 64 or 128, "
         "or list the counts: --scan 8,16,32,64,100");
  expect("--scan lots",
         "axonn layout: --scan 'lots': 'lots' is not a GPU count (a whole number from 1); give A:B (GPU counts "
         "doubling from A to B, e.g. 8:512) or a list in increasing order (e.g. 8,64,512)");
  expect(
      "--scan 64,8",
      "axonn layout: --scan '64,8': counts must increase, and 8 comes after 64; list them smallest first, each once");
  expect("--scan 4:64",
         "axonn layout: --scan: 4 GPUs is not a whole number of nodes of 8 GPUs (site dgx-h100's gpus_per_node); scan "
         "multiples of 8, or give --gpus-per-node G with G dividing every count");
  expect("--scan 8,12 --gpus-per-node 8",
         "axonn layout: --scan: 12 GPUs is not a whole number of nodes of 8 GPUs (--gpus-per-node); scan multiples of "
         "8, or give --gpus-per-node G with G dividing every count");
  expect("--scan 8:64 --nodes 2",
         "axonn layout: --nodes prices one GPU count and --scan many; drop --nodes, or drop --scan and run axonn "
         "layout --nodes N");
  expect("--scan 8:64 --explain",
         "axonn layout: --explain prices one GPU count and --scan many; drop --explain, or drop --scan and run axonn "
         "layout --nodes N");
  const auto whole = layout(kDgx, k7b, "--scan 4:64 --gpus-per-node 4");
  EXPECT_EQ(whole.code, 0) << whole.output;
}

// No split of 8192 or 16384 ranks divides the tiny job (global batch 12, hidden 64): each count
// says why, and the scan ends as `axonn layout` does when nothing fits.
TEST_F(CliScan, NothingFitsAtAnyCountExitsThreeSayingWhyAtEach) {
  const auto r = layout(kDgx, kTiny, "--scan 8192,16384");
  EXPECT_EQ(r.code, 3) << r.output;
  for (const char* count : {"8192", "16384"}) {
    const std::string gpus = count;
    EXPECT_TRUE(std::regex_search(
        r.output, std::regex("\\n +" + gpus + " +[0-9]+  no layout fits: no data x X x Y x Z split of " + gpus +
                             " ranks divides the job \\(e\\.g\\. " + gpus +
                             "x1x1x1: global_batch=12 is not divisible by G_data\\*G_z=" + gpus +
                             "\\); the nearest GPU count on which a layout runs: 3072 GPUs")))
        << gpus << "\n"
        << r.output;
  }
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\\n +rejected \\(first 3 of [0-9]+ size tuples\\): [0-9x]+: "
                                                     "hidden=64 is not divisible by G_x\\*G_z=")))
      << r.output;
  EXPECT_TRUE(contains(r.output,
                       "axonn layout: no layout fits this job at any GPU count of --scan 8192,16384; each "
                       "count's reason is above\n"))
      << r.output;
  EXPECT_FALSE(contains(r.output, "knee")) << r.output;

  // Memory: a 7B GPT on 4 and 8 ranks of 4 GiB.
  const auto memory = layout(kSourceDir + "/site_configs/laptop-cpu.toml", k7b, "--scan 4:8");
  EXPECT_EQ(memory.code, 3) << memory.output;
  EXPECT_TRUE(contains(memory.output, "     4      1  no layout fits: needs >= ")) << memory.output;
  EXPECT_TRUE(contains(memory.output, "     8      2  no layout fits: needs >= ")) << memory.output;
  EXPECT_TRUE(contains(memory.output, "does not fit in memory: needs ")) << memory.output;

  const auto json = layout(kDgx, kTiny, "--scan 8192,16384 --json");
  EXPECT_EQ(json.code, 3) << json.output;
  const std::string object = json.output.substr(0, json.output.rfind("axonn layout: no layout fits"));
  EXPECT_EQ(check_json(object, R"(
assert [r["fits"] for r in d["rows"]] == [False, False], d
assert all("the nearest GPU count on which a layout runs: 3072 GPUs" in r["smallest_change"] for r in d["rows"]), d
assert all(len(r["rejected"]) == 3 and r["rejected_total"] >= 3 for r in d["rows"]), d
assert "knee" not in d, d)"),
            "ok\n");
}

// A count where nothing fits among counts that do: it says why, the others are priced, exit 0.
TEST_F(CliScan, CountsThatDoNotFitSayWhyBesideThoseThatDo) {
  const auto r = layout(kDgx, kTiny, "--scan 8,16384");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(table_row(r.output, 8, 1).layout.empty()) << r.output;
  EXPECT_TRUE(contains(r.output, "  16384   2048  no layout fits: no data x X x Y x Z split of 16384 ranks"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "\nno knee: it takes two GPU counts where a layout fits\n")) << r.output;
}

// scripts/plot_scaling.py draws the scan's JSON (the README's figure is made this way).
TEST_F(CliScan, PlotScalingDrawsTheJson) {
  if (std::system("/usr/bin/python3 -c \"import matplotlib\" 2>/dev/null") != 0)
    GTEST_SKIP() << "needs Debian's python3-matplotlib for /usr/bin/python3";
  const auto scan = layout(write("slow.toml", kSlowNetworkSite), kSmall, "--scan 8:32 --json");
  ASSERT_EQ(scan.code, 0) << scan.output;
  const std::string json = write("scan.json", scan.output), png = path("scan.png");
  const auto plot = run_command("/usr/bin/python3 " + kSourceDir + "/scripts/plot_scaling.py " + json + " -o " + png);
  EXPECT_EQ(plot.code, 0) << plot.output;
  EXPECT_EQ(plot.output, "plot_scaling: wrote " + png + " (1 scan(s), 3 panels)\n");  // per GPU, total, cost
  std::ifstream file(png, std::ios::binary);
  std::string magic(8, '\0');
  file.read(magic.data(), 8);
  EXPECT_EQ(magic, "\x89PNG\r\n\x1a\n");
  const auto bad = run_command("/usr/bin/python3 " + kSourceDir + "/scripts/plot_scaling.py " + write("x.json", "{}") +
                               " -o " + path("x.png"));
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_TRUE(contains(bad.output, "x.json: not the JSON of `axonn layout --scan --json`")) << bad.output;
}

}  // namespace
