// What a lost node costs a local job with `axonn run --max-restarts`, and what the memory
// copies cost a step: the same job run uninterrupted without memory copies, uninterrupted
// with them, and with them and every rank of one pretend node SIGKILLed mid-run, in turn
// round by round, side by side:
//   build/bench/bench_recovery [--rounds 3] [--steps 40] [--kill-at 25] [--interval 10]
//                              [--memory-interval 1|auto] [--ranks 8] [--nodes 2] [--hidden 128]
// The job is elastic.toml's model (4 layers, hidden 128, 8 heads, sequence 128, global batch
// 24; --hidden widens it: the state, and what a restore reads and checks, grows with its
// square) on the CPU backend, checkpointing every --interval steps and, but in the first run,
// copying the state to the nodes' memory every --memory-interval steps (in /dev/shm). A run's
// step time is its training loop's (metrics.jsonl's elapsed_s from the first step to the
// last, over the steps between; with --memory-interval auto from the step after the run's
// calibration of the interval, trainer/train/memory_interval.hpp, to the last: the copies as
// the rest of a long run makes them), so the copies' pauses and their background work on the
// shared cores are in it; the copies' cost is the ratio of the two uninterrupted runs' step
// times (goal: at most 1.02), and beside it the ratio of rank 0's CPU per step over the same
// steps (metrics.jsonl's cpu_s: every thread of the rank, so the copies' writer and sender
// too), which the ranks' turns on the shared cores leave out, though not a drift of the
// machine's own speed between runs. That drift (up to 10% here) cannot reach the third
// measure, inside the run with copies: the steps at each place after a copy against the later
// half of its interval (in_run_cost), with its 95% interval; give it a few hundred --steps and
// an --interval past them (no disk save). In the interrupted run the bench waits until rank 0
// has logged --kill-at steps, then kills the last pretend node's ranks at once and notes the
// time. The restarted run's summary.json ("recovery") gives when
// the launcher saw the failure and each phase after it (trainer/train/recovery_report.hpp);
// detect = the launcher's notice - the kill. Reported per round and as medians: the
// uninterrupted and the interrupted run's wall time and their ratio, the seconds from the kill
// to the next completed step and its phases, and the steps done again. Goals: under 30 s from
// the failure to the next step (the in-job restarts of TorchElastic and NVIDIA's resiliency
// extension take about a minute), and no step done again beyond the one whose copy was in
// flight.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "core/wall_clock.hpp"
#include "subprocess.hpp"
#include "tests/rank_processes.hpp"

namespace {

namespace fs = std::filesystem;
using namespace axonn;
using axonn::bench::median;
using axonn::bench::read_text;
using axonn::bench::run_capture;

const std::string kProgram = "bench_recovery";

struct Options {
  int rounds = 3;
  int steps = 40;
  int kill_at = 25;
  int interval = 10;
  std::string memory_interval = "1";  // or "auto"
  int ranks = 8;
  int nodes = 2;
  int hidden = 128;
};

// --memory-interval as a TOML value: 5, or "auto".
std::string toml_interval(const std::string& interval) { return interval == "auto" ? "\"auto\"" : interval; }

std::string job_toml(const Options& o, bool memory_copies) {
  return "[model]\nlayers = 4\nhidden = " + std::to_string(o.hidden) +
         "\nheads = 8\nvocab = 256\nsequence = 128\n"
         "[training]\nglobal_batch = 24\nmicro_batch = 4\nsteps = " +
         std::to_string(o.steps) +
         "\nlr = 3e-3\nwarmup_steps = 5\nseed = 1337\ndevice = \"cpu\"\n"
         "[checkpoint]\ndir = \"ckpt\"\ninterval = " +
         std::to_string(o.interval) + "\nkeep = 2\n" +
         (memory_copies ? "memory_interval = " + toml_interval(o.memory_interval) + "\n" : std::string()) +
         "[run]\ndir = \"run\"\nlog_interval = 1\n";
}

// metrics.jsonl's `key` on each line of step `first` on, in order. For uninterrupted runs (a
// restarted run's attempts each start elapsed_s at 0).
std::vector<double> logged_from(const fs::path& dir, int first, const std::string& key) {
  std::ifstream in(dir / "run" / "metrics.jsonl");
  std::vector<double> values;
  const std::regex field("\"step\": ([0-9]+),.*\"" + key + "\": ([-0-9.eE+]+)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, field) && std::stoi(m[1]) >= first) values.push_back(std::stod(m[2]));
  }
  if (values.size() < 2) {
    std::fprintf(stderr, "%s: fewer than 2 steps with %s in %s\n", kProgram.c_str(), key.c_str(),
                 (dir / "run" / "metrics.jsonl").c_str());
    std::exit(1);
  }
  return values;
}

// The training loop's seconds per step: elapsed_s from logged step `first` to the last, over
// the steps between.
double step_seconds(const fs::path& dir, int first) {
  const std::vector<double> elapsed = logged_from(dir, first, "elapsed_s");
  return (elapsed.back() - elapsed.front()) / static_cast<double>(elapsed.size() - 1);
}

// Rank 0's CPU seconds per step over the same steps: cpu_s of each line after step `first`'s
// (each is the CPU since the line before), so what the copies' threads took is in it however
// the cores were shared, and a step that waited for its turn on a core adds nothing.
double step_cpu_seconds(const fs::path& dir, int first) {
  const std::vector<double> cpu = logged_from(dir, first, "cpu_s");
  return std::accumulate(cpu.begin() + 1, cpu.end(), 0.0) / static_cast<double>(cpu.size() - 1);
}

// The copies' cost measured inside the run that makes them, where the machine's drift between
// runs cannot reach it. With a copy after step `from` and every `every` (K) steps after it, each
// step after `from` has a place j = 1..K in its interval (1: right after a copy). A copy ends
// within its interval ("auto" spaces them so) and here within its first half, so the later
// half's steps are steps with no copy beside them: the cost is the sum over j of (the mean step
// at j - the later half's mean), per K of the later half's steps. Steps up to 3 after a disk
// save (every `disk_interval`) and the first 2 (warm-up) are left out: the save's writer slows
// them wherever they fall. The interval: 95% of kResamples resamples of the run's whole
// intervals. nullopt below 4 steps between copies (no later half) or 4 intervals (no spread).
constexpr int kResamples = 2000;
struct InRunCost {
  double ratio = 0, low = 0, high = 0;
  std::vector<double> resampled;  // [kResamples] each resample's ratio, NaN where one had no later half
};

std::optional<InRunCost> in_run_cost(const fs::path& dir, int from, int every, int disk_interval) {
  if (every < 4) return std::nullopt;
  const std::vector<double> elapsed = logged_from(dir, from, "elapsed_s");  // steps from, from + 1, ...
  const double none = std::nan("");
  std::vector<std::vector<double>> intervals;  // [interval][j - 1] the step's seconds, or none
  for (size_t m = 0; (m + 1) * static_cast<size_t>(every) < elapsed.size(); ++m) {
    std::vector<double> steps;
    for (int j = 1; j <= every; ++j) {
      const size_t i = m * static_cast<size_t>(every) + static_cast<size_t>(j);
      const int step = from + static_cast<int>(i);
      const bool left_out = step <= 2 || (step - 1) % disk_interval < 3;
      steps.push_back(left_out ? none : elapsed[i] - elapsed[i - 1]);
    }
    intervals.push_back(std::move(steps));
  }
  if (intervals.size() < 4) return std::nullopt;
  auto ratio_of = [&](const std::vector<size_t>& picked) -> std::optional<double> {
    std::vector<double> sum(static_cast<size_t>(every), 0.0), count(static_cast<size_t>(every), 0.0);
    for (size_t m : picked)
      for (size_t j = 0; j < sum.size(); ++j)
        if (!std::isnan(intervals[m][j])) sum[j] += intervals[m][j], count[j] += 1;
    double later_sum = 0, later_count = 0, excess = 0;
    for (size_t j = sum.size() / 2; j < sum.size(); ++j) later_sum += sum[j], later_count += count[j];
    if (later_count == 0) return std::nullopt;
    const double later = later_sum / later_count;
    for (size_t j = 0; j < sum.size(); ++j) {
      if (count[j] == 0) return std::nullopt;
      excess += sum[j] / count[j] - later;
    }
    return 1.0 + excess / (static_cast<double>(every) * later);
  };
  std::vector<size_t> all(intervals.size());
  std::iota(all.begin(), all.end(), size_t{0});
  const std::optional<double> ratio = ratio_of(all);
  if (!ratio) return std::nullopt;
  std::mt19937 rng(1);
  std::uniform_int_distribution<size_t> pick(0, intervals.size() - 1);
  std::vector<double> resampled, found;
  for (int b = 0; b < kResamples; ++b) {
    std::vector<size_t> picked(intervals.size());
    for (size_t& m : picked) m = pick(rng);
    resampled.push_back(ratio_of(picked).value_or(none));
    if (!std::isnan(resampled.back())) found.push_back(resampled.back());
  }
  if (found.size() < kResamples / 2) return std::nullopt;
  return InRunCost{*ratio, bench::quantile(found, 0.025), bench::quantile(found, 0.975), std::move(resampled)};
}

size_t logged_steps(const fs::path& dir) {
  std::ifstream in(dir / "run" / "metrics.jsonl");
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find("\"step\": ") != std::string::npos;
  return n;
}

// A number of summary.json's "recovery" object; exits naming the key without one.
double recovery_number(const std::string& summary, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex("\"recovery\": \\{.*\"" + key + R"(\": ([-0-9.eE+]+))"))) {
    std::fprintf(stderr, "%s: no recovery.%s in summary.json:\n%s\n", kProgram.c_str(), key.c_str(), summary.c_str());
    std::exit(1);
  }
  return std::stod(m[1]);
}

struct Round {
  double plain_step_s = 0;   // the uninterrupted run without memory copies: its step time
  double copies_step_s = 0;  // the uninterrupted run with them
  double plain_cpu_s = 0;    // CPU seconds of every process of the run without copies
  double copies_cpu_s = 0;   // and with them
  double plain_step_cpu_s = 0;  // rank 0's CPU seconds per step, over the steps step_s is of
  double copies_step_cpu_s = 0;
  double whole_s = 0;        // the uninterrupted run with copies, launcher start to exit
  double interrupted_s = 0;  // the run that lost a node
  double kill_to_step_s = 0;
  std::map<std::string, double> phases;  // detect, stop, restart, startup, load, first_step
  double redone = 0;
  int copies = 0;    // the uninterrupted run's memory copies, as its log counts them
  int interval = 0;  // with --memory-interval auto: the interval the run chose
  int from = 0;      // and the step of its first copy at that interval
  std::optional<InRunCost> in_run;  // the copies' cost inside their run (in_run_cost)
};

// A number the log line matching `pattern` (one group) gives; 0 without one.
int logged_number(const std::string& output, const std::string& pattern) {
  std::smatch m;
  return std::regex_search(output, m, std::regex(pattern)) ? std::stoi(m[1]) : 0;
}

// One `axonn run` of the job in a fresh <dir>; its wall seconds. With `kill_node`, the last
// pretend node's ranks are SIGKILLed once --kill-at steps are logged, and `round` gets what
// the restarted run reports.
// CPU seconds (user and system) of the finished children so far: the jobs' ranks and launchers.
double children_cpu_s() {
  rusage usage{};
  getrusage(RUSAGE_CHILDREN, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double run_job(const fs::path& dir, const Options& o, bool memory_copies, bool kill_node, Round& round,
               double* cpu_s = nullptr) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "job.toml") << job_toml(o, memory_copies);
  const std::string command = "cd " + dir.string() + " && " + AXONN_BINARY_DIR + "/bin/axonn run -n " +
                              std::to_string(o.ranks) + " --nodes-sim " + std::to_string(o.nodes) +
                              " --max-restarts 1 job.toml 2>&1";
  const double cpu_before = children_cpu_s();
  const auto start = std::chrono::steady_clock::now();
  auto job = std::async(std::launch::async, [&] {
    int status = 0;
    std::string output = run_capture(command, status);
    return std::make_pair(status, output);
  });
  double killed_at = 0;
  if (kill_node) {
    const int per_node = o.ranks / o.nodes;
    std::vector<int> node(static_cast<size_t>(per_node));
    std::iota(node.begin(), node.end(), o.ranks - per_node);
    while (job.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready) {
      if (logged_steps(dir) < static_cast<size_t>(o.kill_at)) continue;
      const std::vector<pid_t> pids = test::rank_pids(dir, node, 0);
      if (pids.size() != node.size()) continue;
      killed_at = unix_seconds_now();
      test::kill_all(pids);
      break;
    }
  }
  const auto [status, output] = job.get();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (cpu_s != nullptr) *cpu_s = children_cpu_s() - cpu_before;
  if (status != 0 || (kill_node && killed_at == 0)) {
    std::fprintf(stderr, "%s: %s (status %d%s):\n%s\n", kProgram.c_str(), command.c_str(), status,
                 killed_at == 0 && kill_node ? ", ended before the kill" : "", output.c_str());
    std::exit(1);
  }
  if (memory_copies && !kill_node) {
    round.copies = logged_number(output, "checkpoint: ([0-9]+) memory copies paused training");
    round.interval = logged_number(output, "checkpoint: memory copies every ([0-9]+) steps from step");
    round.from = logged_number(output, "checkpoint: memory copies every [0-9]+ steps from step ([0-9]+)");
  }
  if (kill_node) {
    const std::string summary = read_text(dir / "run" / "summary.json");
    round.phases["detect"] = recovery_number(summary, "failed_unix_s") - killed_at;
    for (const char* phase : {"stop", "restart", "startup", "load", "first_step"})
      round.phases[phase] = recovery_number(summary, std::string(phase) + "_s");
    round.kill_to_step_s = round.phases["detect"] + recovery_number(summary, "total_s");
    round.redone = recovery_number(summary, "steps_redone");
  }
  return wall;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"rounds", true, "rounds, the uninterrupted and the interrupted run alternating (default 3)"},
      {"steps", true, "training steps of each run (default 40)"},
      {"kill-at", true, "kill the last pretend node once this many steps are logged (default 25)"},
      {"interval", true, "checkpoint.interval (default 10)"},
      {"memory-interval", true,
       "checkpoint.memory_interval of the runs with memory copies: a count, or auto (default 1)"},
      {"ranks", true, "ranks (default 8)"},
      {"nodes", true, "pretend nodes (default 2)"},
      {"hidden", true, "the model's hidden size, a multiple of its 8 heads (default 128)"},
      {"help", false, "this help"},
  };
  const Options o = bench::parse_bench_args(argc, argv, specs, kProgram + " [options]", [](const Args& args) {
    bench::no_positionals(args);
    Options parsed;
    parsed.rounds = bench::count_option(args, "rounds", parsed.rounds);
    parsed.steps = bench::count_option(args, "steps", parsed.steps);
    parsed.kill_at = bench::count_option(args, "kill-at", parsed.kill_at);
    parsed.interval = bench::count_option(args, "interval", parsed.interval);
    parsed.memory_interval = args.value("memory-interval").value_or(parsed.memory_interval);
    if (parsed.memory_interval != "auto")
      parsed.memory_interval = std::to_string(bench::count_option(args, "memory-interval", 1));
    parsed.ranks = bench::count_option(args, "ranks", parsed.ranks);
    parsed.nodes = bench::count_option(args, "nodes", parsed.nodes);
    parsed.hidden = bench::count_option(args, "hidden", parsed.hidden);
    if (parsed.kill_at >= parsed.steps)
      throw UsageError("--kill-at " + std::to_string(parsed.kill_at) + " must be below --steps " +
                       std::to_string(parsed.steps));
    if (parsed.nodes < 2 || parsed.ranks % parsed.nodes != 0)
      throw UsageError("--nodes " + std::to_string(parsed.nodes) + ": at least 2, dividing --ranks " +
                       std::to_string(parsed.ranks) + " (one node is lost, the others go on)");
    return parsed;
  });
  const fs::path dir = fs::temp_directory_path() / ("axonn-bench-recovery-" + std::to_string(getpid()));
  std::printf(
      "recovery: elastic.toml's model (hidden %d), %d ranks on %d pretend nodes (axonn run --max-restarts 1, CPU "
      "backend)\n",
      o.hidden, o.ranks, o.nodes);
  std::printf(
      "%d steps, checkpoint every %d, memory copies every %s but in the first run; the interrupted run loses its "
      "last node after step %d; %d rounds\n",
      o.steps, o.interval, o.memory_interval.c_str(), o.kill_at, o.rounds);
  // With "auto", the step time of the steps after the first copy at the interval the run chose
  // (the copies as the rest of a long run makes them; the calibration's copies are spaced by
  // their own length), in both runs alike.
  const bool automatic = o.memory_interval == "auto";
  if (automatic)
    std::printf("step times from the step after the first copy at the interval the run chose (\"from\") on\n");
  std::printf(
      "\nround  step s no copies  step s copies  ratio  cpu ratio  in-run   its 95%%     copies%s  uninterrupted s  "
      "interrupted s  ratio  "
      "kill->step s  detect   stop  restart  startup   load  first_step  steps redone\n",
      automatic ? "  every  from" : "");
  std::vector<Round> rounds;
  for (int r = 0; r < o.rounds; ++r) {
    Round round;
    run_job(dir / "plain", o, false, false, round, &round.plain_cpu_s);
    round.whole_s = run_job(dir / "whole", o, true, false, round, &round.copies_cpu_s);
    const int first_step = automatic ? round.from + 1 : 1;
    if (automatic && round.from == 0) {
      std::fprintf(stderr, "%s: the run with \"auto\" copies never chose an interval in %d steps: give more --steps\n",
                   kProgram.c_str(), o.steps);
      std::exit(1);
    }
    round.plain_step_s = step_seconds(dir / "plain", first_step);
    round.copies_step_s = step_seconds(dir / "whole", first_step);
    round.plain_step_cpu_s = step_cpu_seconds(dir / "plain", first_step);
    round.copies_step_cpu_s = step_cpu_seconds(dir / "whole", first_step);
    const int every = automatic ? round.interval : std::stoi(o.memory_interval);
    round.in_run = in_run_cost(dir / "whole", automatic ? round.from : every, every, o.interval);
    round.interrupted_s = run_job(dir / "interrupted", o, true, true, round);
    char in_run[32] = "      -              -";
    if (round.in_run)
      std::snprintf(in_run, sizeof in_run, "%6.3f  %5.3f-%5.3f", round.in_run->ratio, round.in_run->low,
                    round.in_run->high);
    char chosen[32] = "";
    if (automatic) std::snprintf(chosen, sizeof chosen, "  %5d  %4d", round.interval, round.from);
    std::printf(
        "%5d  %16.4f  %13.4f  %5.3f  %9.3f  %s  %6d%s  %15.2f  %13.2f  %5.2f  %12.2f  %6.3f  %5.3f  %7.3f  %7.3f  "
        "%5.3f  "
        "%10.3f  %12.0f\n",
        r + 1, round.plain_step_s, round.copies_step_s, round.copies_step_s / round.plain_step_s,
        round.copies_step_cpu_s / round.plain_step_cpu_s, in_run, round.copies, chosen, round.whole_s,
        round.interrupted_s, round.interrupted_s / round.whole_s, round.kill_to_step_s, round.phases["detect"],
        round.phases["stop"], round.phases["restart"], round.phases["startup"], round.phases["load"],
        round.phases["first_step"], round.redone);
    rounds.push_back(round);
  }
  fs::remove_all(dir);

  auto med = [&](auto field) {
    std::vector<double> v;
    for (const Round& r : rounds) v.push_back(field(r));
    return median(v);
  };
  const double whole = med([](const Round& r) { return r.whole_s; });
  const double interrupted = med([](const Round& r) { return r.interrupted_s; });
  const double to_step = med([](const Round& r) { return r.kill_to_step_s; });
  const double copy_cost = med([](const Round& r) { return r.copies_step_s / r.plain_step_s; });
  const std::string every =
      automatic ? std::to_string(std::lround(med([](const Round& r) { return r.interval; }))) : o.memory_interval;
  std::printf(
      "\nmemory copies every %s steps%s: step time %.3fx of the run without them (median of the rounds' "
      "ratios; goal <= 1.02): %s\n",
      every.c_str(), automatic ? " (auto: the median of the rounds' choices)" : "", copy_cost,
      copy_cost <= 1.02 ? "met" : "missed");
  // The same steps' CPU: with every rank computing on the same few cores, what the copies add
  // to a step's CPU is what they take from its wall time; CPU time leaves out the turns the
  // ranks get on the cores, but moves with the machine's speed as wall time does.
  const double cpu_cost = med([](const Round& r) { return r.copies_step_cpu_s / r.plain_step_cpu_s; });
  std::printf(
      "rank 0's CPU per step over the same steps: %.3fx of the run without them (median of the rounds' ratios; "
      "goal <= 1.02): %s\n",
      cpu_cost, cpu_cost <= 1.02 ? "met" : "missed");
  // The same inside the runs with copies, where no drift between runs reaches it: the mean of
  // the rounds' ratios, and its 95% interval from their resamples taken together (resample b of
  // every round: independent draws, so their mean is one draw of the rounds' mean).
  std::vector<const InRunCost*> measured;
  for (const Round& r : rounds)
    if (r.in_run) measured.push_back(&*r.in_run);
  if (!measured.empty()) {
    double mean = 0;
    for (const InRunCost* c : measured) mean += c->ratio / static_cast<double>(measured.size());
    std::vector<double> means;
    for (int b = 0; b < kResamples; ++b) {
      double sum = 0;
      for (const InRunCost* c : measured) sum += c->resampled[static_cast<size_t>(b)];
      if (!std::isnan(sum)) means.push_back(sum / static_cast<double>(measured.size()));
    }
    const double low = means.empty() ? NAN : bench::quantile(means, 0.025);
    const double high = means.empty() ? NAN : bench::quantile(means, 0.975);
    std::printf(
        "inside the runs with copies (in-run): %.3fx (the mean of %zu rounds' ratios; 95%% interval %.3f to %.3f; "
        "goal <= 1.02): %s\n",
        mean, measured.size(), low, high,
        high <= 1.02 ? "met"
        : low > 1.02 ? "missed"
                     : "not settled by these rounds");
  }
  // What the copies take of the host's cores: the run's extra CPU, per copy and rank.
  const double copies = med([](const Round& r) { return r.copies; });
  const double cpu_extra = med([](const Round& r) { return r.copies_cpu_s - r.plain_cpu_s; });
  if (copies > 0)
    std::printf(
        "their CPU: %.2f s more in the whole run (median), %.2f ms per copy and rank, taken here from the %ld "
        "cores the ranks compute on\n",
        cpu_extra, 1e3 * cpu_extra / copies / o.ranks, sysconf(_SC_NPROCESSORS_ONLN));
  std::printf(
      "medians: uninterrupted %.2f s, interrupted %.2f s: %.2fx; %.2f s from the kill to the next step "
      "(goal < 30 s): %s\n",
      whole, interrupted, interrupted / whole, to_step, to_step < 30 ? "met" : "missed");
  std::printf(
      "phases (median s): detect %.3f, stop %.3f, restart %.3f, startup %.3f, load %.3f, first_step %.3f; "
      "steps done again %.0f (since the newest step held whole in memory, or on disk)\n",
      med([](const Round& r) { return r.phases.at("detect"); }),
      med([](const Round& r) { return r.phases.at("stop"); }),
      med([](const Round& r) { return r.phases.at("restart"); }),
      med([](const Round& r) { return r.phases.at("startup"); }),
      med([](const Round& r) { return r.phases.at("load"); }),
      med([](const Round& r) { return r.phases.at("first_step"); }), med([](const Round& r) { return r.redone; }));
  return 0;
}
