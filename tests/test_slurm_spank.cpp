// The SPANK plugin under a real Slurm: each test starts slurmctld + slurmd + munge
// (scripts/slurm-cluster.sh) with a plugstack.conf that names the built spank_axonn.so as
// `required`, then runs srun and sbatch as a user would. srun and slurmstepd read
// plugstack.conf afresh for every step, so a test may rewrite it between commands.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "process_helpers.hpp"

namespace axonn::test {
namespace {

const std::string kSite = kSourceDir + "/site_configs/laptop-cpu.toml";
const std::string kTinyJob = kSourceDir + "/job_templates/tiny.toml";

int count_of(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

class SlurmSpank : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the slurm tests start munged and slurmd, which needs root";
    dir_ = std::string(AXONN_BINARY_DIR) + "/slurm-spank-test-" + std::to_string(getpid());
    ASSERT_EQ(run_command("mkdir -p " + dir_).code, 0);
    write_plugstack("site_config=" + kSite);
    // Prints what one task sees; its arguments only matter to the plugin (a job TOML).
    write_file(show_env_,
               "#!/bin/sh\necho \"task $SLURM_PROCID layout=${AXONN_LAYOUT:-unset} site=${AXONN_SITE_CONFIG:-unset}"
               " handoff=${SLURM_AXONN_SPANK_LAYOUT:-none} origin=${AXONN_LAYOUT_ORIGIN:-unset}\"\n");
    chmod(show_env_.c_str(), 0755);
    const auto r = run_command(
        kSourceDir + "/scripts/slurm-cluster.sh start --nodes 2 --dir " + dir_ + " --plugstack " + plugstack_, 60);
    ASSERT_EQ(r.code, 0) << r.output;
    setenv("SLURM_CONF", (dir_ + "/slurm.conf").c_str(), 1);
  }
  void TearDown() override {
    if (!dir_.empty()) run_command(kSourceDir + "/scripts/slurm-cluster.sh stop --dir " + dir_ + " && rm -rf " + dir_);
  }

  static void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  static std::string read_file(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void write_plugstack(const std::string& args) {
    write_file(plugstack_, "required " + std::string(AXONN_SPANK_PLUGIN) + " " + args + "\n");
  }

  // Submits `script` with sbatch and waits until the job has ended (polling every 0.1 s, as
  // sbatch --wait polls slowly); returns the job's output file.
  std::string run_batch(const std::string& script) {
    write_file(dir_ + "/job.sbatch", script);
    const auto submit = run_command("sbatch --parsable -o " + dir_ + "/job.out " + dir_ + "/job.sbatch", 30);
    EXPECT_EQ(submit.code, 0) << submit.output;
    const std::string id = submit.output.substr(0, submit.output.find_first_not_of("0123456789"));
    for (int i = 0; i < 600; ++i) {
      const auto state = run_command("scontrol show job -o " + id, 10);
      if (contains(state.output, "JobState=COMPLETED") || contains(state.output, "JobState=FAILED") ||
          contains(state.output, "JobState=CANCELLED"))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return run_command("cat " + dir_ + "/job.out", 10).output;
  }

  std::string dir_;
  std::string plugstack_ =
      std::string(AXONN_BINARY_DIR) + "/slurm-spank-test-" + std::to_string(getpid()) + "/plugstack.conf";
  std::string show_env_ =
      std::string(AXONN_BINARY_DIR) + "/slurm-spank-test-" + std::to_string(getpid()) + "/show-env.sh";
};

// srun's exit codes when the plugin refuses a step (Slurm's, documented in the README): 1
// when srun's local_user_init fails, 255 when the option's own check does.
TEST_F(SlurmSpank, WrongProductFailsSrunBeforeAnyTaskStarts) {
  const auto r = run_command("srun -n 4 --axonn-layout=3x1x1x1 echo TASK-RAN", 30);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn: --axonn-layout=3x1x1x1 has 3 ranks")) << r.output;
  EXPECT_TRUE(contains(r.output, "the step has 4 tasks")) << r.output;
  EXPECT_TRUE(contains(r.output, "use --axonn-layout=4x1x1x1 or --axonn-layout=auto")) << r.output;
  EXPECT_FALSE(contains(r.output, "TASK-RAN")) << r.output;
}

TEST_F(SlurmSpank, MalformedValueFailsSrunAndSbatch) {
  const auto r = run_command("srun -n 1 --axonn-layout=2x2 echo TASK-RAN", 30);
  EXPECT_EQ(r.code, 255) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn: --axonn-layout '2x2' has 2 sizes, not four")) << r.output;
  EXPECT_FALSE(contains(r.output, "TASK-RAN")) << r.output;
  const auto s = run_command("sbatch --axonn-layout=everything --wrap true", 30);
  EXPECT_NE(s.code, 0) << s.output;
  EXPECT_TRUE(contains(s.output, "--axonn-layout=everything is not a mode or a layout")) << s.output;
  EXPECT_EQ(run_command("squeue -h", 10).output, "");  // nothing was submitted
}

TEST_F(SlurmSpank, ExplicitLayoutReachesEveryTask) {
  const auto r = run_command("srun -n 4 --mpi=pmix --axonn-layout=1x2x2x1 " + kAxonn + " selftest", 90);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "layout 1x2x2x1:xyzd"), 4) << r.output;
  EXPECT_TRUE(contains(r.output, "selftest: 196 passed, 0 failed")) << r.output;
  EXPECT_EQ(count_of(r.output, "srun: axonn: --axonn-layout=1x2x2x1 gives 1x2x2x1:xyzd for 4 tasks on 1 node"), 1)
      << r.output;

  const auto env = run_command("srun -n 2 --axonn-layout=2x1x1x1:dxyz " + show_env_, 30);
  ASSERT_EQ(env.code, 0) << env.output;
  EXPECT_EQ(
      count_of(env.output, "layout=2x1x1x1:dxyz site=" + kSite +
                               " handoff=none origin=axonn SPANK plugin: "
                               "--axonn-layout=2x1x1x1:dxyz gives 2x1x1x1:dxyz for 2 tasks on 1 node (site laptop-cpu"),
      2)
      << env.output;
}

TEST_F(SlurmSpank, AutoWithoutJobTomlIsDataParallelAcrossNodes) {
  // -N 2 -n 4 on these 8-CPU nodes places 3 tasks on n0 and 1 on n1 (SLURM_TASKS_PER_NODE=3,1):
  // the plugin sees the uneven split, which Slurm's task and node counts alone would hide.
  // The pretend nodes' host names do not resolve: Gloo binds to loopback.
  const auto r = run_command(
      "AXONN_GLOO_HOSTNAME=127.0.0.1 srun -N 2 -n 4 --mpi=pmix --axonn-layout=auto " + kAxonn + " selftest", 90);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "layout 4x1x1x1:xyzd"), 4) << r.output;
  EXPECT_TRUE(contains(r.output, "selftest: 196 passed, 0 failed")) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "srun: axonn: --axonn-layout=auto chose 4x1x1x1:xyzd for 4 tasks on 2 nodes (uneven "
                       "tasks per node, priced as 1 per node) (site laptop-cpu; no job TOML on the command line"))
      << r.output;
}

TEST_F(SlurmSpank, AutoPricesTheJobTomlLikeAxonnLayout) {
  const auto cli =
      run_command(kAxonn + " layout --site " + kSite + " --job " + kTinyJob + " --nodes 2 --gpus-per-node 2");
  ASSERT_EQ(cli.code, 0) << cli.output;
  const size_t at = cli.output.find("best layout: ");
  ASSERT_NE(at, std::string::npos) << cli.output;
  const std::string best = cli.output.substr(at + 13, cli.output.find(' ', at + 13) - at - 13);

  const auto r = run_command("srun -N 2 --ntasks-per-node 2 --axonn-layout=auto " + show_env_ + " " + kTinyJob, 30);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "layout=" + best + " "), 4) << "axonn layout chose " << best << "\n" << r.output;
  EXPECT_TRUE(contains(r.output, "srun: axonn: --axonn-layout=auto chose " + best +
                                     " for 4 tasks on 2 nodes (site "
                                     "laptop-cpu, job " +
                                     kTinyJob + ": predicted step"))
      << r.output;
}

TEST_F(SlurmSpank, AutoPlacesTheAllocationsNodesOnTheSitesSwitches) {
  // A site whose switch map names other hosts than n0 and n1: the chooser sees the step's node
  // names (srun's SLURM_NODELIST), so pricing fails and names the host, as the trainer would.
  const std::string site = dir_ + "/switched.toml";
  write_file(site,
             "[site]\nname = \"switched\"\n[node]\ngpus_per_node = 2\n[network]\nswitches = [[\"x0\", \"x1\"]]\n");
  write_plugstack("site_config=" + site);
  const auto r = run_command("srun -N 2 --ntasks-per-node 2 --axonn-layout=auto echo TASK-RAN " + kTinyJob, 30);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, site + ": host 'n0' is under no switch in network.switches")) << r.output;
  EXPECT_FALSE(contains(r.output, "TASK-RAN")) << r.output;
  // Named right, the step prices.
  write_file(site,
             "[site]\nname = \"switched\"\n[node]\ngpus_per_node = 2\n[network]\nswitches = [[\"n1\"], [\"n0\"]]\n");
  const auto ok = run_command("srun -N 2 --ntasks-per-node 2 --axonn-layout=auto " + show_env_ + " " + kTinyJob, 30);
  ASSERT_EQ(ok.code, 0) << ok.output;
  EXPECT_TRUE(contains(ok.output, "srun: axonn: --axonn-layout=auto chose ")) << ok.output;
}

TEST_F(SlurmSpank, UsersOwnAxonnLayoutIsNeverOverridden) {
  const auto r = run_command("AXONN_LAYOUT=1x2x2x1 srun -n 4 --axonn-layout=auto " + show_env_, 30);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "layout=1x2x2x1 site=" + kSite +
                                   " handoff=none origin=AXONN_LAYOUT=1x2x2x1 from the "
                                   "user's environment, kept by the axonn SPANK plugin"),
            4)
      << r.output;
  EXPECT_TRUE(contains(r.output,
                       "srun: axonn: warning: AXONN_LAYOUT=1x2x2x1 (from your environment) is what the tasks "
                       "get"))
      << r.output;
  // Set but empty counts as unset, as in axonn train and axonn selftest.
  const auto empty = run_command("AXONN_LAYOUT= srun -n 2 --axonn-layout=auto " + show_env_, 30);
  ASSERT_EQ(empty.code, 0) << empty.output;
  EXPECT_EQ(count_of(empty.output, "layout=2x1x1x1:xyzd site=" + kSite + " handoff=none origin=axonn SPANK plugin: "),
            2)
      << empty.output;
  // A user's layout that cannot run fails just as early as the option would.
  const auto bad = run_command("AXONN_LAYOUT=2x2x1x1 srun -n 2 --axonn-layout=auto echo TASK-RAN", 30);
  EXPECT_NE(bad.code, 0) << bad.output;
  EXPECT_TRUE(contains(bad.output, "AXONN_LAYOUT=2x2x1x1 (from your environment) has 4 ranks")) << bad.output;
  EXPECT_FALSE(contains(bad.output, "TASK-RAN")) << bad.output;
}

TEST_F(SlurmSpank, ValidateChecksAxonnLayout) {
  const auto ok = run_command("AXONN_LAYOUT=2x2x1x1 srun -n 4 --axonn-layout=validate " + show_env_, 30);
  ASSERT_EQ(ok.code, 0) << ok.output;
  EXPECT_EQ(count_of(ok.output, "layout=2x2x1x1 site=" + kSite +
                                    " handoff=none origin=axonn SPANK plugin: "
                                    "--axonn-layout=validate checked AXONN_LAYOUT=2x2x1x1:xyzd for 4 tasks"),
            4)
      << ok.output;
  const auto wrong = run_command("AXONN_LAYOUT=2x1x1x1 srun -n 4 --axonn-layout=validate echo TASK-RAN", 30);
  EXPECT_NE(wrong.code, 0) << wrong.output;
  EXPECT_TRUE(contains(wrong.output, "AXONN_LAYOUT=2x1x1x1 has 2 ranks")) << wrong.output;
  EXPECT_TRUE(contains(wrong.output, "the step has 4 tasks; set AXONN_LAYOUT=4x1x1x1")) << wrong.output;
  const auto unset = run_command("unset AXONN_LAYOUT; srun -n 4 --axonn-layout=validate echo TASK-RAN", 30);
  EXPECT_NE(unset.code, 0) << unset.output;
  EXPECT_TRUE(contains(unset.output, "AXONN_LAYOUT, which is not set in your environment")) << unset.output;
}

TEST_F(SlurmSpank, SbatchOptionReachesTheInnerSrun) {
  const std::string out = run_batch(
      "#!/bin/sh\n#SBATCH -n 4\n#SBATCH --axonn-layout=2x2x1x1\n"
      "echo \"batch script sees ${AXONN_LAYOUT:-no layout}\"\n"
      "srun " +
      show_env_ +
      "\n"
      "srun -n 2 echo TASK-RAN\n"
      "echo \"second srun exit $?\"\n");
  EXPECT_TRUE(contains(out, "batch script sees no layout")) << out;
  EXPECT_EQ(count_of(out, "layout=2x2x1x1:xyzd site=" + kSite), 4) << out;
  // The inner srun checks sbatch's value against its own step.
  EXPECT_TRUE(contains(out,
                       "axonn: --axonn-layout=2x2x1x1 has 4 ranks (data 2 x X 2 x Y 1 x Z 1) but the step has 2 "
                       "tasks; use --axonn-layout=1x2x1x1"))
      << out;
  EXPECT_FALSE(contains(out, "TASK-RAN")) << out;
  EXPECT_TRUE(contains(out, "second srun exit 1")) << out;
}

TEST_F(SlurmSpank, ExportNoneStillReachesTheTasks) {
  // srun --export=NONE passes only SLURM_* variables on: the handoff is named so.
  const auto r = run_command("srun -n 2 --export=NONE --axonn-layout=auto " + show_env_, 30);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "layout=2x1x1x1:xyzd site=" + kSite + " handoff=none"), 2) << r.output;
}

TEST_F(SlurmSpank, ForbiddenModeFailsWithWhatIsAllowed) {
  write_plugstack("site_config=" + kSite + " allowed=auto,explicit");
  const auto r = run_command("AXONN_LAYOUT=1x1x1x1 srun -n 1 --axonn-layout=validate echo TASK-RAN", 30);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "axonn: --axonn-layout=validate: mode validate is not allowed on this site (allowed: "
                       "auto, explicit)"))
      << r.output;
  EXPECT_FALSE(contains(r.output, "TASK-RAN")) << r.output;
  const auto s = run_command("sbatch --axonn-layout=validate --wrap true", 30);
  EXPECT_NE(s.code, 0) << s.output;
  EXPECT_TRUE(contains(s.output, "mode validate is not allowed on this site")) << s.output;
  EXPECT_EQ(run_command("srun -n 1 --axonn-layout=1x1x1x1 true", 30).code, 0);
}

TEST_F(SlurmSpank, SiteDefaultAutoAndOptingOut) {
  write_plugstack("site_config=" + kSite + " default=auto");
  const auto r = run_command("srun -n 2 " + show_env_, 30);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "layout=2x1x1x1:xyzd"), 2) << r.output;
  EXPECT_TRUE(contains(r.output, "srun: axonn: --axonn-layout=auto chose 2x1x1x1:xyzd")) << r.output;
  const auto off = run_command("srun -n 2 --axonn-layout=off " + show_env_, 30);
  ASSERT_EQ(off.code, 0) << off.output;
  EXPECT_EQ(count_of(off.output, "layout=unset site=unset handoff=none origin=unset"), 2) << off.output;
  // The site's default never stops a step that did not ask for a layout.
  const auto broken = run_command("srun -n 2 " + show_env_ + " " + dir_ + "/missing.toml", 30);
  ASSERT_EQ(broken.code, 0) << broken.output;
  EXPECT_TRUE(contains(broken.output, "warning: the site's default --axonn-layout=auto was skipped")) << broken.output;
  EXPECT_EQ(count_of(broken.output, "layout=unset"), 2) << broken.output;
}

TEST_F(SlurmSpank, BadPlugstackArgumentsFailEveryStep) {
  write_plugstack("site_config=" + kSite + " bogus=1");
  const auto r = run_command("srun -n 1 echo TASK-RAN", 30);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(
      contains(r.output, "axonn: plugstack.conf: the axonn plugin's argument 'bogus=1' is not a known key=value"))
      << r.output;
  EXPECT_FALSE(contains(r.output, "TASK-RAN")) << r.output;
}

TEST_F(SlurmSpank, AutoWithABrokenJobTomlNamesTheFile) {
  write_file(dir_ + "/broken.toml", "[model]\nlayers = \"two\"\n");
  const auto r = run_command("srun -n 2 --axonn-layout=auto echo TASK-RAN " + dir_ + "/broken.toml", 30);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(
      contains(r.output, "--axonn-layout=auto prices the first .toml on the step's command line as the job, and " +
                             dir_ + "/broken.toml does not load: " + dir_ + "/broken.toml:2:"))
      << r.output;
  EXPECT_FALSE(contains(r.output, "TASK-RAN")) << r.output;
}

// An `axonn train` step whose job TOML does not load is refused in srun, in every mode: one
// error line (not one per task), the fix, srun's exit 1, no task started, and the reason in
// the file AXONN_REFUSAL_FILE names (the templates read it). Another program's .toml, or a
// job file srun cannot see here (a node-local copy), still only warns.
TEST_F(SlurmSpank, AnAxonnTrainStepWhoseJobDoesNotLoadIsRefusedOnceInEveryMode) {
  write_file(dir_ + "/job.toml", read_file(kTinyJob));
  const std::string refusal = dir_ + "/refusal.txt";
  for (const std::string option : {"--axonn-layout=4x1x1x1", "--axonn-layout=auto"}) {
    SCOPED_TRACE(option);
    write_file(refusal, "");
    const auto r = run_command("AXONN_REFUSAL_FILE=" + refusal + " srun -n 4 --mpi=pmix " + option + " " + kAxonn +
                                   " train " + dir_ + "/job.toml training.stepz=5",
                               60);
    EXPECT_EQ(r.code, 1) << r.output;
    const std::string why = "the step was not started: axonn train's job " + dir_ + "/job.toml does not load: ";
    EXPECT_EQ(count_of(r.output, why), 1) << r.output;
    EXPECT_EQ(count_of(r.output, "stepz"), 1) << "the error is printed once, by srun\n" << r.output;
    EXPECT_TRUE(contains(r.output, "every task would stop on it. Fix what the message names")) << r.output;
    EXPECT_FALSE(contains(r.output, "give the layout yourself")) << r.output;
    EXPECT_FALSE(contains(r.output, "[info]")) << "no task started\n" << r.output;
    EXPECT_TRUE(contains(read_file(refusal), why)) << read_file(refusal);
  }
  // Not axonn train: the .toml may be another program's.
  const auto other = run_command("srun -n 2 --axonn-layout=2x1x1x1 " + show_env_ + " " + dir_ + "/job.toml x.y=1", 30);
  EXPECT_EQ(other.code, 0) << other.output;
  EXPECT_TRUE(contains(other.output, "is not a job TOML the plugin can read")) << other.output;
  EXPECT_EQ(count_of(other.output, " layout=2x1x1x1:xyzd site="), 2) << other.output;
  // A job file srun cannot see: the tasks may (a node-local copy); they report it themselves.
  const auto missing = run_command("srun -n 1 --mpi=pmix --axonn-layout=1x1x1x1 " + kAxonn + " train " + dir_ +
                                       "/elsewhere.toml",
                                   60);
  EXPECT_EQ(missing.code, 2) << "the task's own exit code\n" << missing.output;
  EXPECT_TRUE(contains(missing.output, "is not a job TOML the plugin can read")) << missing.output;
}

}  // namespace
}  // namespace axonn::test
