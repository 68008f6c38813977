// Time from `srun` to the first training step of the tiny job at 4 tasks, split into phases.
//   sudo build/bench/bench_launch [--reps N]
// Uses the Slurm cluster SLURM_CONF names, or starts one (scripts/slurm-cluster.sh, as the
// slurm tests do: needs root) with the built SPANK plugin, and stops it at the end.
//
// First one run trains job_templates/tiny.toml for 10 steps (checkpoint at step 10); then
// every repetition resumes that checkpoint and trains step 11 (`latest` is put back to step 10
// between repetitions, so they are identical):
//   srun -n 4 --mpi=pmix --axonn-layout=auto axonn train tiny.toml training.steps=11 ...
// The bench takes the wall clock just before it spawns srun. axonn train writes rank 0's
// phases to summary.json ("startup"): its process creation time (wall clock, from
// /proc/self/stat, 10 ms resolution) and seconds from there to PMIx init, topology (the
// PMIx fence), layout (site, job, chooser, data), communicators connected, model built,
// checkpoint loaded and first step done. Slurm launch = process creation - srun spawned.
// The same job under `axonn run -n 4` (the local launcher, a PMIx server in one process) is
// measured in the same run as the reference; the goal is < 3 s from srun to the first step.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "subprocess.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;

using axonn::bench::read_text;

const std::string kSource = AXONN_SOURCE_DIR;
const std::string kAxonn = std::string(AXONN_BINARY_DIR) + "/bin/axonn";
constexpr double kGoalS = 3.0;

// Rank 0's phases in the order axonn train reaches them; each row of the table is the time
// from the previous one.
const std::vector<std::pair<std::string, std::string>> kPhases = {
    {"pmix_init_s", "process start -> PMIx init (exec, loader, PMIx_Init)"},
    {"topology_s", "PMIx init -> topology (PMIx fence)"},
    {"layout_s", "topology -> layout (config, chooser, data)"},
    {"communicators_s", "layout -> communicators connected (Gloo)"},
    {"model_init_s", "communicators -> model built (weights, GEMM warm-up)"},
    {"checkpoint_loaded_s", "model -> checkpoint loaded (HDF5, reshard)"},
    {"first_step_s", "checkpoint -> first step done"},
};

double wall_s() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Spawns argv (searching PATH) in `dir` with output to `log`; returns the exit status and
// the wall clock just before the spawn.
int spawn_and_wait(const std::vector<std::string>& argv, const fs::path& dir, const fs::path& log, double* spawned) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);  // posix_spawn has no chdir action before glibc 2.29's _np one
  pid_t pid = 0;
  *spawned = wall_s();
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  fs::current_path(cwd);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_shell(const std::string& command) { return std::system(command.c_str()) == 0 ? 0 : 1; }

struct Sample {
  double launch_s = 0;              // launcher spawned -> rank 0 process created
  std::vector<double> phase_end_s;  // seconds after process creation, kPhases order
  double total_s() const { return launch_s + phase_end_s.back(); }
};

// One resumed run: put `latest` back to step 10, run, read summary.json.
bool measure(const std::vector<std::string>& launcher, const fs::path& work, Sample* out) {
  const fs::path ckpt = work / "ckpt";
  for (const auto& entry : fs::directory_iterator(ckpt))
    if (entry.path().filename() != "step-000000010" && entry.path().filename() != "latest")
      fs::remove_all(entry.path());
  std::ofstream(ckpt / "latest") << "step-000000010\n";
  fs::remove_all(work / "run");

  std::vector<std::string> argv = launcher;
  for (const char* a : {"train", "tiny.toml", "training.steps=11", "checkpoint.dir=ckpt", "run.dir=run"})
    argv.push_back(a);
  double spawned = 0;
  const int rc = spawn_and_wait(argv, work, work / "last.log", &spawned);
  const std::string summary = read_text(work / "run" / "summary.json");
  std::smatch start;
  if (rc != 0 || !std::regex_search(summary, start, std::regex("\"process_start_unix_s\": ([0-9.]+)"))) {
    std::fprintf(stderr, "bench_launch: run failed (exit %d); its output:\n%s\n", rc,
                 read_text(work / "last.log").c_str());
    return false;
  }
  out->launch_s = std::stod(start[1]) - spawned;
  out->phase_end_s.clear();
  for (const auto& [key, label] : kPhases) {
    std::smatch m;
    if (!std::regex_search(summary, m, std::regex("\"" + key + "\": ([0-9.eE+-]+)"))) {
      std::fprintf(stderr, "bench_launch: %s has no %s\n", (work / "run" / "summary.json").c_str(), key.c_str());
      return false;
    }
    out->phase_end_s.push_back(std::stod(m[1]));
  }
  return true;
}

using axonn::bench::median;

// Per-row medians: launch, then each phase's own duration, then the total.
std::vector<double> medians(const std::vector<Sample>& samples) {
  std::vector<double> rows;
  std::vector<double> v;
  for (const auto& s : samples) v.push_back(s.launch_s);
  rows.push_back(median(v));
  for (size_t p = 0; p < kPhases.size(); ++p) {
    v.clear();
    for (const auto& s : samples) v.push_back(s.phase_end_s[p] - (p ? s.phase_end_s[p - 1] : 0.0));
    rows.push_back(median(v));
  }
  v.clear();
  for (const auto& s : samples) v.push_back(s.total_s());
  rows.push_back(median(v));
  return rows;
}

const std::vector<axonn::OptionSpec> kOptions = {
    {"reps", true, "repetitions of the resumed step under each launcher (default 7)"},
    {"help", false, "this help"},
};

int read_reps(const axonn::Args& args) {
  axonn::bench::no_positionals(args);
  return static_cast<int>(args.integer("reps", 1, 1000).value_or(7));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = axonn::bench::parse_bench_args(
      argc, argv, kOptions, "bench_launch [options]   (see the top of bench/launch.cpp)", read_reps);
  const fs::path work = fs::path(AXONN_BINARY_DIR) / ("bench-launch-" + std::to_string(getpid()));
  fs::create_directories(work);
  fs::copy_file(kSource + "/job_templates/tiny.toml", work / "tiny.toml");

  // A cluster: the one SLURM_CONF names, else our own with the plugin.
  std::string cluster_dir;
  const char* conf = std::getenv("SLURM_CONF");
  if (conf == nullptr || *conf == '\0') {
    if (geteuid() != 0) {
      std::fprintf(stderr, "bench_launch: set SLURM_CONF to a running cluster, or run as root to start one\n");
      return 2;
    }
    cluster_dir = (work / "slurm").string();
    fs::create_directories(cluster_dir);
    std::string plugstack;
#ifdef AXONN_SPANK_PLUGIN
    plugstack = cluster_dir + "/plugstack.conf";
    std::ofstream(plugstack) << "required " << AXONN_SPANK_PLUGIN << " site_config=" << kSource
                             << "/site_configs/laptop-cpu.toml\n";
#endif
    if (run_shell(kSource + "/scripts/slurm-cluster.sh start --nodes 1 --cpus 4 --dir " + cluster_dir +
                  (plugstack.empty() ? "" : " --plugstack " + plugstack) + " > /dev/null") != 0) {
      std::fprintf(stderr, "bench_launch: the Slurm test cluster did not start (logs in %s/log)\n",
                   cluster_dir.c_str());
      return 1;
    }
    setenv("SLURM_CONF", (cluster_dir + "/slurm.conf").c_str(), 1);
  }
  const bool plugin = run_shell("srun --help 2>/dev/null | grep -q -e --axonn-layout") == 0;
  std::vector<std::string> srun = {"srun", "-n", "4", "--mpi=pmix"};
  if (plugin) srun.push_back("--axonn-layout=auto");
  srun.push_back(kAxonn);
  const std::vector<std::string> local = {kAxonn, "run", "-n", "4", "--", kAxonn};

  // The checkpoint every repetition resumes.
  double ignored = 0;
  std::vector<std::string> first = srun;
  for (const char* a : {"train", "tiny.toml", "training.steps=10", "checkpoint.dir=ckpt", "run.dir=run"})
    first.push_back(a);
  int status = spawn_and_wait(first, work, work / "first.log", &ignored);
  std::vector<Sample> slurm, reference;
  for (int r = 0; r < reps && status == 0; ++r) {
    Sample s;
    if (!measure(srun, work, &s)) status = 1;
    slurm.push_back(s);
    if (status == 0 && !measure(local, work, &s)) status = 1;
    reference.push_back(s);
  }
  if (!cluster_dir.empty()) run_shell(kSource + "/scripts/slurm-cluster.sh stop --dir " + cluster_dir + " > /dev/null");
  if (status != 0) {
    std::fprintf(stderr, "bench_launch: a run failed; outputs in %s\n", work.c_str());
    return 1;
  }
  fs::remove_all(work);

  const auto a = medians(slurm), b = medians(reference);
  std::printf("launch: %s axonn train job_templates/tiny.toml, resuming step 10 and training step 11\n",
              plugin ? "srun -n 4 --mpi=pmix --axonn-layout=auto" : "srun -n 4 --mpi=pmix (no axonn plugin)");
  std::printf("medians of %d runs each; rank 0's phases, each from the end of the previous one\n\n", reps);
  std::printf("%-56s %10s %14s\n", "phase", "srun", "axonn run -n 4");
  std::printf("%-56s %9.3fs %13.3fs\n", "launcher spawned -> rank 0 process created", a[0], b[0]);
  for (size_t p = 0; p < kPhases.size(); ++p)
    std::printf("%-56s %9.3fs %13.3fs\n", kPhases[p].second.c_str(), a[p + 1], b[p + 1]);
  std::printf("%-56s %9.3fs %13.3fs\n", "total: launcher spawned -> first step done", a.back(), b.back());
  std::printf("\nsrun to first step: %.3f s = %.2fx the %.0f s goal; %.2fx the local launcher's %.3f s\n", a.back(),
              a.back() / kGoalS, kGoalS, a.back() / b.back(), b.back());
  return 0;
}
