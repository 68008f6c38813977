// `axonn train` under a real Slurm with the SPANK plugin, as users run it: srun with
// --axonn-layout, and the job templates (job_templates/*.sbatch) submitted with sbatch,
// preempted with the signal their --signal line sends, requeued, resumed at other task counts
// and node counts. Each test starts munged + slurmctld + two slurmds (pretend nodes n0 and n1,
// 4 CPUs each, so `-N 2 -n 8` puts 4 tasks on each) with a plugstack.conf that names the
// built plugin. Every resumed run must end where an uninterrupted one does: the same losses
// (within float32 reordering, as in test_train), the same data cursor, the same weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <thread>

#include "rank_processes.hpp"
#include "train_helpers.hpp"

namespace axonn::test {
namespace {

namespace fs = std::filesystem;

// Losses: float32 sums in other orders drift apart over steps (measured up to 2.1e-5, i.e.
// 5e-6 relative, at step 12 of 4-then-8 ranks against 1); 1e-4 keeps a 5x margin while the
// data cursor, checked exactly, catches any skipped or repeated sample. Weights drift more over 40 AdamW steps than
// over test_train's 5: Adam divides each gradient by its own running norm, so elements whose gradients are near zero
// turn float32 reordering into visible steps (measured up to ~2e-4 at 4, 3 and 2 ranks
// against 1). A lost optimizer state or a skipped or repeated batch moves weights by about
// lr = 3e-3 per step, well above this bound.
constexpr double kLossTolerance = 1e-4;
constexpr float kWeightTolerance = 1e-3f;
constexpr int kSteps = 40;  // ~20 ms a step at 4 ranks: the preemption signal (~0.1 s) lands mid-run

const std::string kTemplates = kSourceDir + "/job_templates";
const std::string kLaptopSite = kSourceDir + "/site_configs/laptop-cpu.toml";

// A job whose global batch (24) every data x z of 2, 3, 4 and 8 ranks divides; relative
// checkpoint and run dirs, so each copy of it writes beside itself.
std::string test_job(int steps) {
  return "[model]\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 256\nsequence = 64\n"
         "[training]\nglobal_batch = 24\nmicro_batch = 4\nsteps = " +
         std::to_string(steps) + "\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = " + std::to_string(std::min(steps, 5)) +
         "\nweight_decay = 0.1\ngrad_clip = 1.0\nseed = 7\n"
         "[checkpoint]\ndir = \"ckpt\"\ninterval = 20\nkeep = 5\n[run]\ndir = \"run\"\nlog_interval = 10\n";
}

int count_of(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%09lld", static_cast<long long>(step));
  return name;
}

// `got` holds steps first..N of a run; they and its final weights must equal `want`'s.
void expect_continues(const TrainedRun& got, const TrainedRun& want, int64_t first, const std::string& what) {
  ASSERT_EQ(got.steps.size(), want.steps.size() - static_cast<size_t>(first - 1)) << what;
  for (size_t i = 0; i < got.steps.size(); ++i) {
    const StepLine& w = want.steps[static_cast<size_t>(first - 1) + i];
    EXPECT_EQ(got.steps[i].step, w.step) << what;
    EXPECT_NEAR(got.steps[i].loss, w.loss, kLossTolerance) << what << " step " << w.step;
    EXPECT_EQ(got.steps[i].data_cursor, w.data_cursor) << what << " step " << w.step;
  }
  expect_same_tensors(got.tensors, want.tensors, kWeightTolerance, what);
}

class SlurmTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the slurm tests start munged and slurmd, which needs root";
    dir_ = fs::path(AXONN_BINARY_DIR) / ("slurm-train-test-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_plugstack(kLaptopSite);
    const auto r = run_command(kSourceDir + "/scripts/slurm-cluster.sh start --nodes 2 --cpus 4 --dir " +
                                   dir_.string() + " --plugstack " + plugstack(),
                               60);
    ASSERT_EQ(r.code, 0) << r.output;
    setenv("SLURM_CONF", (dir_ / "slurm.conf").c_str(), 1);
    // What the templates run; sbatch passes this environment on to the job.
    setenv("AXONN", kAxonn.c_str(), 1);
    // The pretend nodes' host names (n0, n1) do not resolve: Gloo binds to loopback.
    setenv("AXONN_GLOO_HOSTNAME", "127.0.0.1", 1);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    run_command(kSourceDir + "/scripts/slurm-cluster.sh stop --dir " + dir_.string());
    if (!HasFailure()) fs::remove_all(dir_);
  }

  std::string plugstack() const { return (dir_ / "plugstack.conf").string(); }
  // srun and slurmstepd read plugstack.conf afresh for every step.
  void write_plugstack(const std::string& site) {
    write_file(plugstack(), "required " + std::string(AXONN_SPANK_PLUGIN) + " site_config=" + site + "\n");
  }

  // A folder holding the test job with `steps` steps, for srun or sbatch to run in.
  fs::path job_dir(const std::string& name, int steps = kSteps) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    write_file(d / "job.toml", test_job(steps));
    return d;
  }

  // The uninterrupted run every resumed one is compared with: one rank, local launcher.
  TrainedRun reference(int steps = kSteps) {
    const fs::path d = job_dir("reference", steps);
    const auto r = run_command("cd " + d.string() + " && " + kAxonn + " run -n 1 job.toml", 120);
    EXPECT_EQ(r.code, 0) << r.output;
    TrainedRun run = read_run(d);
    EXPECT_EQ(run.steps.size(), static_cast<size_t>(steps)) << r.output;
    return run;
  }

  // sbatch in `workdir` (the job's submit directory); returns the job id.
  std::string submit(const fs::path& workdir, const std::string& args) {
    const auto r = run_command("cd " + workdir.string() + " && sbatch --parsable " + args, 30);
    EXPECT_EQ(r.code, 0) << r.output;
    return r.output.substr(0, r.output.find_first_not_of("0123456789"));
  }

  // Polls `scontrol show job -o` every 0.1 s (sbatch --wait polls every 2-10 s) until the
  // record contains `want`; returns the last record.
  std::string wait_for_job(const std::string& id, const std::string& want, int timeout_s = 90) {
    std::string record;
    for (int i = 0; i < timeout_s * 10; ++i) {
      record = run_command("scontrol show job -o " + id, 10).output;
      if (contains(record, want)) return record;
      if (contains(record, "JobState=FAILED") || contains(record, "JobState=CANCELLED")) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " did not reach " << want << "; last record:\n" << record;
    return record;
  }

  // Makes a requeued (pending, held) job eligible now instead of after Slurm's ~120 s hold.
  // That hold is what keeps a user's requeued job clear of a race this shortcut opens: slurmd
  // refuses a job's launch credential made in the same second (its resolution) as the
  // revocation of that job's previous run ("Job credential revoked", the job then FAILED with
  // exit 1 and no output), which a loaded machine hits. Two seconds after the job went pending
  // the new credential is made in a later second.
  void release_requeued(const std::string& id) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    ASSERT_EQ(run_command("scontrol update jobid=" + id + " StartTime=now", 10).code, 0);
  }

  // Waits until <dir>/run/metrics.jsonl holds at least `n` steps.
  void wait_for_steps(const fs::path& dir, size_t n, int timeout_s = 60) {
    for (int i = 0; i < timeout_s * 100; ++i) {
      if (read_metrics(dir / "run").size() >= n) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << dir << ": fewer than " << n << " steps after " << timeout_s << " s";
  }

  // A copy of `from`'s checkpoint step `step` as the only (and `latest`) one in a new job folder.
  fs::path copy_checkpoint(const fs::path& from, int64_t step, const std::string& name) {
    const fs::path d = job_dir(name);
    fs::create_directories(d / "ckpt");
    fs::copy(from / "ckpt" / step_dir_name(step), d / "ckpt" / step_dir_name(step), fs::copy_options::recursive);
    write_file(d / "ckpt" / "latest", step_dir_name(step) + "\n");
    return d;
  }

  // `axonn layout`'s best layout (with its order) for the job on `nodes` x `per_node` ranks.
  std::string best_layout(const std::string& site, const std::string& job, int nodes, int per_node) {
    const auto r = run_command(kAxonn + " layout --site " + site + " --job " + job + " --nodes " +
                               std::to_string(nodes) + " --gpus-per-node " + std::to_string(per_node));
    EXPECT_EQ(r.code, 0) << r.output;
    const size_t at = r.output.find("best layout: ");
    if (at == std::string::npos) return "(none)";
    return r.output.substr(at + 13, r.output.find(' ', at + 13) - at - 13);
  }

  // Restarts the test cluster with `nodes` pretend nodes (n0, n1, ...).
  void start_nodes(int nodes) {
    const auto r = run_command(kSourceDir + "/scripts/slurm-cluster.sh start --nodes " + std::to_string(nodes) +
                                   " --cpus 4 --dir " + dir_.string() + " --plugstack " + plugstack(),
                               60);
    ASSERT_EQ(r.code, 0) << r.output;
  }

  // A node lost, as when the machine goes: its slurmd and everything it started (its step
  // daemons, its tasks) SIGKILLed, every process in its UTS namespace (slurm-cluster.sh gives
  // each slurmd its own).
  void lose_node(const std::string& node) {
    const std::string slurmd = read_text(dir_ / "run" / ("slurmd-" + node + ".pid"));
    ASSERT_FALSE(slurmd.empty());
    const fs::path uts = fs::read_symlink("/proc/" + std::to_string(std::stoi(slurmd)) + "/ns/uts");
    std::vector<pid_t> processes;
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string name = entry.path().filename();
      std::error_code ec;
      if (name.find_first_not_of("0123456789") == std::string::npos &&
          fs::read_symlink(entry.path() / "ns/uts", ec) == uts)
        processes.push_back(std::stoi(name));
    }
    ASSERT_GE(processes.size(), 3u) << "slurmd, a step daemon and the tasks";
    kill_all(processes);
  }

  // The job both node-loss tests run: elastic.sbatch on 3 nodes of 2 tasks, n2 a spare, a
  // memory copy every step (in d/shm), rank 0 slowed so the loss lands mid-run; returns its id
  // once 22 steps are logged.
  std::string submit_elastic_with_memory_copies(const fs::path& d) {
    start_nodes(3);
    setenv("AXONN_TEST_SLOW_RANK", "0:40", 1);
    const std::string id = submit(d, "--nodes=3 --ntasks-per-node=2 -o job.out " + kTemplates +
                                         "/elastic.sbatch job.toml run.max_restarts=1 run.spare_nodes=1 "
                                         "checkpoint.memory_interval=1 checkpoint.memory_dir=" +
                                         (d / "shm").string());
    unsetenv("AXONN_TEST_SLOW_RANK");
    wait_for_steps(d, 22);
    return id;
  }

  // Every step of the run in `d` (the last attempt's, where a step was done twice) read the
  // data the uninterrupted run `want` read.
  static void expect_cursors_of(const fs::path& d, const TrainedRun& want, const std::string& log) {
    TrainedRun got = read_run(d);
    got.steps = last_of_each_step(got.steps);
    ASSERT_EQ(got.steps.size(), want.steps.size()) << log;
    for (size_t i = 0; i < got.steps.size(); ++i) EXPECT_EQ(got.steps[i].data_cursor, want.steps[i].data_cursor);
  }

  // A lost node's slurmd started again (the machine back, as after a reboot): it registers
  // with slurmctld anew, knowing no job.
  void bring_back(const std::string& node) {
    const fs::path conf = dir_ / "slurm.conf";
    const auto r = run_command("SLURM_CONF=" + conf.string() + " unshare --uts sh -c \"hostname " + node +
                                   " && exec slurmd -f '" + conf.string() + "' -N " + node + "\"",
                               30);
    ASSERT_EQ(r.code, 0) << r.output;
  }

  // <dir>/job.out once it contains `line` (a job with a lost node stays COMPLETING until
  // Slurm gives up on the node, so the log, not the job's state, says when its script ended).
  std::string wait_for_log(const fs::path& dir, const std::string& line, int timeout_s = 120) {
    std::string log;
    for (int i = 0; i < timeout_s * 10 && !contains(log, line); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      log = read_text(dir / "job.out");
    }
    return log;
  }

  fs::path dir_;
};

// Slurm end to end, 1: srun starts the trainer with the layout the plugin chose, and says so.
TEST_F(SlurmTrain, SrunAutoTrainsTheTinyJobWithThePluginsLayout) {
  const std::string tiny = kTemplates + "/tiny.toml";
  const std::string best = best_layout(kLaptopSite, tiny, 1, 4);
  const fs::path d = dir_ / "tiny";
  fs::create_directories(d);
  const std::string train = kAxonn + " train " + tiny + " training.steps=6 checkpoint.dir=" + (d / "ckpt").string() +
                            " run.dir=" + (d / "run").string();
  const auto r = run_command("srun -n 4 --mpi=pmix --axonn-layout=auto " + train, 90);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "srun: axonn: --axonn-layout=auto chose " + best +
                                   " for 4 tasks on 1 node (site laptop-cpu, job " + tiny + ": predicted step"),
            1)
      << "axonn layout chose " << best << "\n"
      << r.output;
  const std::string sizes = best.substr(0, best.find(':'));
  EXPECT_TRUE(contains(r.output, "[info] layout " + sizes + " (data x X x Y x Z, rank order fastest first " +
                                     best.substr(best.find(':') + 1) +
                                     ") from axonn SPANK plugin: --axonn-layout=auto chose " + best + " for 4 tasks"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "  #      layout order    step ms")) << "the ranked table\n" << r.output;
  EXPECT_TRUE(contains(r.output, "[info] layout links: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "(priced as 1 node(s) x 4 ranks)")) << r.output;
  EXPECT_TRUE(contains(r.output, "[info] axonn train " + tiny + ": 4 ranks on 1 node(s)")) << r.output;
  const auto steps = read_metrics(d / "run");
  ASSERT_EQ(steps.size(), 6u) << r.output;
  EXPECT_LT(steps.back().loss, steps.front().loss) << r.output;
  const std::string summary = read_text(d / "run" / "summary.json");
  EXPECT_TRUE(contains(summary, "\"layout\": \"" + best + "\"")) << summary;
  EXPECT_TRUE(std::regex_search(summary, std::regex("\"first_step_s\": [0-9.]+"))) << summary;

  // A layout of the wrong size fails srun at once, before any task starts.
  const auto bad = run_command("srun -n 4 --mpi=pmix --axonn-layout=3x1x1x1 " + train, 30);
  EXPECT_NE(bad.code, 0) << bad.output;
  EXPECT_TRUE(contains(bad.output,
                       "axonn: --axonn-layout=3x1x1x1 has 3 ranks (data 3 x X 1 x Y 1 x Z 1) but the step "
                       "has 4 tasks; use --axonn-layout=4x1x1x1 or --axonn-layout=auto"))
      << bad.output;
  EXPECT_FALSE(contains(bad.output, "axonn train")) << "no task may start\n" << bad.output;
  EXPECT_EQ(read_metrics(d / "run").size(), 6u) << "the failed step must not train";
}

// Slurm end to end, 2: the preemptible template at 4 tasks gets its preemption signal (what
// --signal=B:USR1@LEAD sends), checkpoints, requeues itself and resumes to the end; the
// checkpoint it wrote when preempted also resumes in new jobs at 2 and at 3 tasks. All three
// end where the uninterrupted run does.
TEST_F(SlurmTrain, PreemptibleTemplateRequeuesAndResumesAtFourTwoAndThreeTasks) {
  const TrainedRun want = reference();
  const fs::path a = job_dir("preempted");
  const std::string id = submit(a, "-o job.out " + kTemplates + "/preemptible.sbatch job.toml");
  wait_for_steps(a, 2);
  ASSERT_EQ(run_command("scancel --signal=USR1 --batch " + id, 10).code, 0);
  // Requeued: pending again, one restart, held ~120 s by Slurm unless made eligible now.
  wait_for_job(id, "Restarts=1");
  wait_for_job(id, "JobState=PENDING");
  const auto preempted = read_metrics(a / "run");
  const auto k = static_cast<int64_t>(preempted.size());
  ASSERT_GE(k, 2);
  ASSERT_LT(k, kSteps) << "the signal came after the last step; nothing was tested";
  EXPECT_EQ(read_text(a / "ckpt" / "latest"), step_dir_name(k) + "\n");
  const fs::path b = copy_checkpoint(a, k, "at-2-tasks");
  const fs::path c = copy_checkpoint(a, k, "at-3-tasks");
  release_requeued(id);
  wait_for_job(id, "JobState=COMPLETED");

  const std::string log = read_text(a / "job.out");
  EXPECT_TRUE(contains(log, "preemptible.sbatch: SIGUSR1 at ")) << log;
  EXPECT_TRUE(contains(log, "[warning] train: stop requested (preemption signal); saving step " + std::to_string(k)))
      << log;
  EXPECT_TRUE(contains(log, "Exited with exit code 75")) << log;
  EXPECT_TRUE(contains(log, "preemptible.sbatch: checkpoint committed; requeueing job " + id + " (run 1 ends here)"))
      << log;
  EXPECT_TRUE(contains(log, "preemptible.sbatch: job " + id + " run 2 on 1 node(s)")) << log;
  EXPECT_TRUE(contains(log, "[info] checkpoint: resumed from " + (a / "ckpt" / step_dir_name(k)).string() + " (step " +
                                std::to_string(k) + ", data cursor " + std::to_string(24 * k)))
      << log;
  EXPECT_TRUE(contains(log, "preemptible.sbatch: training done")) << log;
  // The requeued run appended to the same metrics: steps 1..N, once each.
  expect_continues(read_run(a), want, 1, "preempted at 4 tasks, requeued at 4");

  // The same checkpoint in new jobs at 2 and 3 tasks, side by side on the two nodes.
  const std::string at2 = submit(b, "-n 2 -o job.out " + kTemplates + "/preemptible.sbatch job.toml");
  const std::string at3 = submit(c, "-n 3 -o job.out " + kTemplates + "/preemptible.sbatch job.toml");
  wait_for_job(at2, "JobState=COMPLETED");
  wait_for_job(at3, "JobState=COMPLETED");
  for (const auto& [dir, ranks] : {std::pair{b, 2}, std::pair{c, 3}}) {
    const std::string out = read_text(dir / "job.out");
    EXPECT_TRUE(contains(out, ": " + std::to_string(ranks) + " ranks on 1 node(s)")) << out;
    EXPECT_TRUE(contains(
        out, "(step " + std::to_string(k) + ", data cursor " + std::to_string(24 * k) + ", written at layout "))
        << out;
    expect_continues(read_run(dir), want, k + 1, "resumed at " + std::to_string(ranks) + " tasks");
  }
}

// A failure inside the allocation: every task of node n1 SIGKILLed mid-run (the tasks, not
// the node: both nodes still answer). The template starts the next step inside the same job
// (run.max_restarts) on both nodes, resuming from the newest checkpoint, and the run ends
// where an uninterrupted one does; the restarted run's rank 0 reports the recovery.
TEST_F(SlurmTrain, ElasticTemplateRestartsInsideTheAllocationAfterANodesTasksAreKilled) {
  const TrainedRun want = reference();
  const fs::path d = job_dir("restarted");
  setenv("AXONN_TEST_SLOW_RANK", "0:40", 1);  // sbatch passes it on: the kill lands mid-run
  const std::string id = submit(
      d, "--nodes=2 --ntasks-per-node=2 -o job.out " + kTemplates + "/elastic.sbatch job.toml run.max_restarts=1");
  unsetenv("AXONN_TEST_SLOW_RANK");
  ASSERT_TRUE(kill_ranks(d, {2, 3}, 0, 22)) << "node n1's tasks (ranks 2 and 3) never ran";  // past step 20's save
  wait_for_job(id, "JobState=COMPLETED", 120);

  const std::string log = read_text(d / "job.out");
  EXPECT_TRUE(
      std::regex_search(log, std::regex("elastic.sbatch: restart 1 of 1: axonn train failed with exit code "
                                        "\\d+; 2 of 2 node\\(s\\) answer; the next step runs on n0 n1, 4 tasks")))
      << log;
  EXPECT_TRUE(contains(log, "[info] recovery: restart 1: ")) << log;
  EXPECT_TRUE(contains(log, "elastic.sbatch: training done")) << log;
  TrainedRun got = read_run(d);
  got.steps = last_of_each_step(got.steps);
  expect_continues(got, want, 1, "restarted inside the allocation");
}

// A node lost: slurmd of n1 and everything it started (its step daemons, its tasks) SIGKILLed
// mid-run, as when the machine goes. On 3 nodes with run.spare_nodes = 1 the run trains on n0
// and n1 while n2 waits; the template finds that n1 no longer answers and starts the next step
// on n0 and the spare n2, inside the same job (--no-kill keeps the allocation). With a memory
// copy every step, n0 holds n1's shards as well as its own: the run goes on from the newest
// step held whole there, past the step-20 disk checkpoint, which the spare fetches from n0.
TEST_F(SlurmTrain, ElasticTemplateGoesOnWithoutALostNode) {
  const TrainedRun want = reference();
  const fs::path d = job_dir("node-lost");
  submit_elastic_with_memory_copies(d);
  lose_node("n1");
  // The job stays COMPLETING until Slurm has given up on n1 (SlurmdTimeout): the log says
  // when the run is done.
  const std::string log = wait_for_log(d, "elastic.sbatch: training done");
  EXPECT_TRUE(contains(log, "elastic.sbatch: n0 n1 train; n2 wait as spare(s) (run.spare_nodes)")) << log;
  EXPECT_TRUE(contains(log, "elastic.sbatch: n1 does not answer: ")) << log;
  EXPECT_TRUE(contains(log, "2 of 3 node(s) answer (lost: n1); the next step runs on n0 n2, 4 tasks")) << log;
  // From when a survivor noticed the lost node, not from the failed step's end: srun waited
  // for n1's tasks after n0's had exited.
  EXPECT_TRUE(std::regex_search(log, std::regex("\\[info\\] recovery: restart 1: [0-9.]+ s from the failure "
                                                "\\(noticed by rank [01]\\) to the first step")))
      << log;
  std::smatch loaded;
  ASSERT_TRUE(std::regex_search(log, loaded, std::regex("checkpoint: loaded step-0*(\\d+) from the nodes' memory")))
      << log;
  EXPECT_GE(std::stoi(loaded[1]), 21) << log;
  EXPECT_TRUE(contains(log, "elastic.sbatch: training done")) << log;
  expect_cursors_of(d, want, log);
}

// A node lost and back before the restart (its machine rebooted: slurmd starts again, its
// memory empty): it answers the probe, so the next step runs on the same nodes, the spare still
// waiting, from the step n0's memory holds whole (its own shards and n1's), n1's ranks taking
// their pieces from n0. Exact: the data cursor of every step equals an uninterrupted run's.
TEST_F(SlurmTrain, ElasticTemplateTrainsOnALostNodeThatComesBackBeforeTheRestart) {
  const TrainedRun want = reference();
  const fs::path d = job_dir("node-back");
  const std::string id = submit_elastic_with_memory_copies(d);
  lose_node("n1");
  // Its memory is gone with it; srun ends the failed step some 17 s later (--wait, KillWait).
  for (const auto& job_copies : fs::directory_iterator(d / "shm")) fs::remove_all(job_copies.path() / "n1");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  bring_back("n1");
  const std::string log = wait_for_log(d, "elastic.sbatch: training done");
  EXPECT_TRUE(contains(log, "3 of 3 node(s) answer; the next step runs on n0 n1, 4 tasks")) << log;
  std::smatch loaded;
  ASSERT_TRUE(std::regex_search(
      log, loaded, std::regex("checkpoint: loaded step-0*(\\d+) from the nodes' memory \\(([0-9.]+) MiB moved")))
      << log;
  EXPECT_GE(std::stoi(loaded[1]), 21) << log;
  EXPECT_GT(std::stod(loaded[2]), 0.0) << log;  // n1's ranks took their pieces from n0
  EXPECT_TRUE(contains(wait_for_job(id, "JobState=COMPLETED"), "JobState=COMPLETED")) << log;
  expect_cursors_of(d, want, log);
}

// A node lost, and no layout fits the nodes left: on 3 nodes of one task, a job whose global
// batch (3) and heads (3) no 2-rank layout divides. The restart's step is refused by the
// plugin; the job ends with exit 3, as for any job no layout fits, naming the newest committed
// checkpoint to resume at another size.
TEST_F(SlurmTrain, ElasticTemplateEndsNamingTheCheckpointWhenNoLayoutFitsTheNodesLeft) {
  start_nodes(3);
  const fs::path d = job_dir("no-layout");
  write_file(d / "job.toml", with_replaced(test_job(kSteps), {{"hidden = 64", "hidden = 15"},
                                                              {"heads = 4", "heads = 3"},
                                                              {"global_batch = 24", "global_batch = 3"},
                                                              {"micro_batch = 4", "micro_batch = 1"}}));
  setenv("AXONN_TEST_SLOW_RANK", "0:40", 1);
  const std::string id = submit(
      d, "--nodes=3 --ntasks-per-node=1 -o job.out " + kTemplates + "/elastic.sbatch job.toml run.max_restarts=1");
  unsetenv("AXONN_TEST_SLOW_RANK");
  wait_for_steps(d, 22);  // past the step-20 checkpoint
  lose_node("n2");
  const std::string log = wait_for_log(d, "elastic.sbatch: no restart: ");
  EXPECT_TRUE(contains(log, "2 of 3 node(s) answer (lost: n2); the next step runs on n0 n1, 2 tasks")) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex("elastic.sbatch: no restart: no layout runs the job on the 2 tasks "
                                                "left \\(the axonn SPANK plugin refused the step: .+\\); the newest "
                                                "committed checkpoint is step 20 in [^ ]*/no-layout/ckpt; resume it at "
                                                "a size a layout fits")))
      << log;
  EXPECT_EQ(read_text(d / "ckpt" / "latest"), step_dir_name(20) + "\n");
  EXPECT_FALSE(contains(log, "requeueing")) << log;
  // The batch script's exit code is the job's once Slurm has given up on n2.
  const std::string record = wait_for_job(id, "JobState=FAILED", 120);
  EXPECT_TRUE(contains(record, "ExitCode=3:0")) << record;
}

// scancel ends a job for good: the trainer still saves on the SIGTERM scancel sends (within
// KillWait), but the template must not requeue a job its user cancelled.
TEST_F(SlurmTrain, PreemptibleTemplateSavesButStaysCancelledAfterScancel) {
  const fs::path d = job_dir("cancelled");
  const std::string id = submit(d, "-o job.out " + kTemplates + "/preemptible.sbatch job.toml");
  wait_for_steps(d, 2);
  ASSERT_EQ(run_command("scancel " + id, 10).code, 0);
  const std::string record = wait_for_job(id, "JobState=CANCELLED");
  EXPECT_TRUE(contains(record, "Restarts=0")) << record;
  const auto k = static_cast<int64_t>(read_metrics(d / "run").size());
  ASSERT_LT(k, kSteps) << "scancel came after the last step; nothing was tested";
  // The job's processes are gone once no step is left; the log is complete then.
  for (int i = 0; i < 100 && contains(run_command("squeue -h -j " + id, 10).output, id); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string log = read_text(d / "job.out");
  EXPECT_TRUE(contains(log, "[info] checkpoint: step " + std::to_string(k) + " committed")) << log;
  EXPECT_EQ(read_text(d / "ckpt" / "latest"), step_dir_name(k) + "\n") << log;
  EXPECT_TRUE(contains(log, "preemptible.sbatch: job " + id +
                                " is ending (JobState=COMPLETING: cancelled or out of "
                                "time): not requeueing"))
      << log;
  EXPECT_FALSE(contains(log, "requeueing job")) << log;
  std::this_thread::sleep_for(std::chrono::seconds(1));  // a wrongful requeue would show by now
  EXPECT_TRUE(contains(run_command("scontrol show job -o " + id, 10).output, "JobState=CANCELLED"));
}

// The template forwards the job's run.preempt_signal, whatever --signal sends the batch
// script: a USR2 job is preempted by the USR1 of `--signal=B:USR1@LEAD`, saves and requeues.
// And a trainer that would stop on another signal than the template forwards (here the
// plugin's site config asks for HUP, which the batch script cannot see) refuses to start.
TEST_F(SlurmTrain, PreemptibleTemplateForwardsTheJobsPreemptSignalAndNeverDisagreesWithIt) {
  const fs::path a = job_dir("usr2");
  write_file(a / "job.toml", test_job(kSteps) + "preempt_signal = \"USR2\"\n");
  const std::string id = submit(a, "-o job.out " + kTemplates + "/preemptible.sbatch job.toml");
  wait_for_steps(a, 2);
  ASSERT_EQ(run_command("scancel --signal=USR1 --batch " + id, 10).code, 0);
  wait_for_job(id, "Restarts=1");
  ASSERT_EQ(run_command("scancel " + id, 10).code, 0);
  const auto k = static_cast<int64_t>(read_metrics(a / "run").size());
  ASSERT_LT(k, kSteps) << "the signal came after the last step; nothing was tested";
  const std::string log = read_text(a / "job.out");
  EXPECT_TRUE(contains(log, "preemptible.sbatch: SIGUSR1 at ")) << log;
  EXPECT_TRUE(contains(log, "asking the trainer to checkpoint and stop (SIGUSR2, the job's run.preempt_signal)"))
      << log;
  EXPECT_TRUE(contains(log, "[info] stop signals: SIGUSR2 (run.preempt_signal), SIGTERM, SIGINT")) << log;
  EXPECT_TRUE(contains(log, "[warning] train: stop requested (preemption signal); saving step " + std::to_string(k)))
      << log;
  EXPECT_TRUE(contains(log, "preemptible.sbatch: checkpoint committed; requeueing job " + id)) << log;
  EXPECT_EQ(read_text(a / "ckpt" / "latest"), step_dir_name(k) + "\n");

  const fs::path site = dir_ / "hup-site.toml";
  write_file(site, read_text(kLaptopSite) + "preempt_signal = \"HUP\"\n");  // [policy] is its last table
  write_plugstack(site.string());
  const fs::path b = job_dir("site-hup");
  const std::string refused = submit(b, "-o job.out " + kTemplates + "/preemptible.sbatch job.toml");
  wait_for_job(refused, "JobState=FAILED");
  const std::string out = read_text(b / "job.out");
  EXPECT_TRUE(contains(out,
                       "AXONN_PREEMPT_SIGNAL=USR1 (the signal this job's wrapper or sbatch template forwards) "
                       "is not the job's run.preempt_signal \"HUP\""))
      << out;
  EXPECT_TRUE(contains(out, "preemptible.sbatch: axonn train failed with exit code 2; not requeueing")) << out;
  EXPECT_FALSE(fs::exists(b / "run" / "metrics.jsonl")) << out;
}

// Slurm end to end, 3 (the templates with axonn train): the single-node template finds the job TOML beside
// itself and lets the plugin choose; an #SBATCH --axonn-layout line reaches its srun instead,
// and one the plugin refuses is reported as a refusal.
TEST_F(SlurmTrain, SingleNodeTemplateAndAnSbatchLayoutLine) {
  const fs::path d = dir_ / "single";
  fs::create_directories(d);
  const std::string plain =
      submit(d, "-o plain.out " + kTemplates + "/single-node.sbatch training.steps=3 training.warmup_steps=1");
  wait_for_job(plain, "JobState=COMPLETED");
  const std::string out = read_text(d / "plain.out");
  EXPECT_TRUE(contains(out, " train " + kTemplates + "/single-node.toml training.steps=3")) << out;
  EXPECT_TRUE(contains(out, "srun: axonn: --axonn-layout=auto chose ")) << out;
  EXPECT_TRUE(contains(out, "single-node.sbatch: training done")) << out;
  EXPECT_EQ(read_metrics(d / "runs" / "single-node").size(), 3u) << "run.dir resolves against the submit dir\n" << out;
  EXPECT_TRUE(fs::exists(d / "checkpoints" / "single-node" / "latest")) << out;

  // The same template with an #SBATCH --axonn-layout line, given the test job as its argument.
  const fs::path e = job_dir("explicit", 3);
  const auto with_layout_line = [&](const std::string& name, const std::string& layout) {
    std::string script = read_text(kTemplates + "/single-node.sbatch");
    script.insert(script.find('\n') + 1, "#SBATCH --axonn-layout=" + layout + "\n");
    write_file(e / name, script);
  };
  with_layout_line("explicit.sbatch", "2x1x1x2");
  const std::string explicit_id = submit(e, "-o job.out explicit.sbatch job.toml");
  wait_for_job(explicit_id, "JobState=COMPLETED");
  const std::string log = read_text(e / "job.out");
  EXPECT_TRUE(contains(log,
                       "[info] layout 2x1x1x2 (data x X x Y x Z, rank order fastest first xyzd) from axonn SPANK "
                       "plugin: --axonn-layout=2x1x1x2 gives 2x1x1x2:xyzd for 4 tasks on 1 node"))
      << log;
  EXPECT_FALSE(contains(log, "--axonn-layout=auto")) << "the template must not override sbatch's layout\n" << log;
  EXPECT_EQ(read_metrics(e / "run").size(), 3u) << log;

  // A layout line the step cannot run: the plugin refuses the step and the template says so,
  // not that axonn train failed (it never started).
  with_layout_line("refused.sbatch", "3x1x1x1");
  const std::string refused_id = submit(e, "-o refused.out refused.sbatch job.toml");
  wait_for_job(refused_id, "JobState=FAILED");
  const std::string refused = read_text(e / "refused.out");
  EXPECT_TRUE(contains(refused,
                       "single-node.sbatch: the axonn SPANK plugin refused the step, so axonn train never started "
                       "(srun exit 1): --axonn-layout=3x1x1x1 has 3 ranks"))
      << refused;
  EXPECT_FALSE(contains(refused, "axonn train failed")) << refused;
}

// Slurm end to end, 4 (several nodes): two pretend nodes and a site whose inter-node links are 2000x slower than
// its intra-node ones: the chooser keeps every tensor-parallel axis inside a node, the
// trainer says so, and the multi-node template resumes the run at the same layout.
TEST_F(SlurmTrain, TwoNodesKeepTheTensorParallelAxesInsideANode) {
  const fs::path site = dir_ / "two-tier.toml";
  write_file(site,
             "[site]\nname = \"two-tier\"\n[node]\ngpus_per_node = 4\nmemory_gib = 4\n"
             "[compute]\npeak_tflops_float32 = 0.04\npeak_tflops_bfloat16 = 0.04\nefficiency = 0.5\n"
             "[network]\nintra_node_bandwidth_GBps = 2\nintra_node_latency_us = 30\n"
             "inter_node_bandwidth_GBps = 0.001\ninter_node_latency_us = 5000\n");
  write_plugstack(site.string());
  const fs::path d = job_dir("two-nodes", 8);
  const std::string best = best_layout(site.string(), (d / "job.toml").string(), 2, 4);
  const auto r = run_command("cd " + d.string() + " && srun -N 2 -n 8 --mpi=pmix --axonn-layout=auto " + kAxonn +
                                 " train job.toml training.steps=6",
                             120);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(
      contains(r.output, "srun: axonn: --axonn-layout=auto chose " + best + " for 8 tasks on 2 nodes (site two-tier"))
      << "axonn layout chose " << best << "\n"
      << r.output;
  EXPECT_TRUE(contains(r.output, "[info] axonn train job.toml: 8 ranks on 2 node(s), site two-tier")) << r.output;

  // "layout links: x groups of 2 over intra-node links, ..., data groups of 2 over inter-node links"
  const size_t at = r.output.find("[info] layout links: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string links = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_TRUE(contains(links, "(priced as 2 node(s) x 4 ranks)")) << links;
  const std::regex axis_re("(x|y|z|data) groups of (\\d+) over ([a-z-]+) links");
  int tensor_axes = 0;
  for (std::sregex_iterator it(links.begin(), links.end(), axis_re), end; it != end; ++it) {
    const std::string axis = (*it)[1], tier = (*it)[3];
    if (axis == "data") {
      EXPECT_EQ(tier, "inter-node") << links;
    } else {
      ++tensor_axes;
      EXPECT_EQ(tier, "intra-node") << "tensor-parallel axis " << axis << " crosses nodes: " << links;
    }
  }
  EXPECT_GE(tensor_axes, 1) << "with inter-node links this slow the chooser should use tensor parallelism: " << links;
  EXPECT_EQ(read_metrics(d / "run").size(), 6u);

  // The multi-node template continues the run from step 6 on both nodes.
  const std::string id = submit(d, "-o job.out " + kTemplates + "/multi-node.sbatch job.toml");
  wait_for_job(id, "JobState=COMPLETED");
  const std::string log = read_text(d / "job.out");
  EXPECT_TRUE(contains(log, "multi-node.sbatch: job " + id + " on n[0-1], 8 tasks")) << log;
  EXPECT_TRUE(contains(log, "--axonn-layout=auto chose " + best + " for 8 tasks on 2 nodes")) << log;
  EXPECT_TRUE(contains(log, "(step 6, data cursor 144, written at layout " + best + ")")) << log;
  EXPECT_TRUE(contains(log, "multi-node.sbatch: training done")) << log;
  EXPECT_EQ(read_metrics(d / "run").size(), 8u) << log;
}

// Slurm end to end, 4 (elastic): `--nodes=1-2` starts on the one node that is up, is preempted
// the way a scheduler with GraceTime does it (SIGTERM to the tasks, not to the batch script),
// and its requeued run gets both nodes: it resumes at 8 ranks and ends where the
// uninterrupted run does.
TEST_F(SlurmTrain, ElasticTemplateResumesAtTheSizeItGets) {
  const TrainedRun want = reference();
  ASSERT_EQ(run_command("scontrol update nodename=n1 state=drain reason=elastic-test", 10).code, 0);
  const fs::path d = job_dir("elastic");
  const std::string id = submit(d, "-o job.out " + kTemplates + "/elastic.sbatch job.toml");
  wait_for_steps(d, 2);
  ASSERT_EQ(run_command("scancel --signal=TERM " + id, 10).code, 0);
  wait_for_job(id, "Restarts=1");
  wait_for_job(id, "JobState=PENDING");
  const auto k = static_cast<int64_t>(read_metrics(d / "run").size());
  ASSERT_LT(k, kSteps) << "the signal came after the last step; nothing was tested";
  ASSERT_EQ(run_command("scontrol update nodename=n1 state=resume", 10).code, 0);
  release_requeued(id);
  wait_for_job(id, "JobState=COMPLETED");

  const std::string log = read_text(d / "job.out");
  EXPECT_TRUE(contains(log, "elastic.sbatch: job " + id + " run 1 on 1 node(s) (n0), 4 tasks")) << log;
  EXPECT_FALSE(contains(log, "elastic.sbatch: SIGTERM")) << "the tasks get the TERM, not the batch script\n" << log;
  EXPECT_TRUE(contains(log, "elastic.sbatch: checkpoint committed; requeueing job " + id)) << log;
  EXPECT_TRUE(contains(log, "[info] axonn train job.toml: 4 ranks on 1 node(s)")) << log;
  EXPECT_TRUE(contains(log, "elastic.sbatch: job " + id + " run 2 on 2 node(s) (n[0-1]), 8 tasks")) << log;
  EXPECT_TRUE(contains(log, "[info] axonn train job.toml: 8 ranks on 2 node(s)")) << log;
  EXPECT_TRUE(contains(log, "(step " + std::to_string(k) + ", data cursor " + std::to_string(24 * k))) << log;
  EXPECT_TRUE(contains(log, "elastic.sbatch: training done")) << log;
  expect_continues(read_run(d), want, 1, "elastic: 4 ranks, then 8");
}

}  // namespace
}  // namespace axonn::test
