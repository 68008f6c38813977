// axonn run --max-restarts: a rank or a pretend node killed mid-run, the job restarted inside
// the launcher from the newest checkpoint, on every rank or on the pretend nodes left, and
// the run that follows compared with one that was never interrupted (resumed at the new size
// from the same step). The kills are real `kill -9`s of the ranks' processes, found by their
// working directory (the test's) and their PMIx rank.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <numeric>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/step_dir.hpp"
#include "process_helpers.hpp"
#include "rank_processes.hpp"
#include "train_helpers.hpp"

namespace axonn::test {
namespace {

// The step the restarted run resumed from, from its "recovery:" line; -1 without one.
int resumed_step(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("recovery: restart 1: .* resumed from step (\\d+)"))) return -1;
  return std::stoi(m[1]);
}

class Recovery : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir("recovery");
    // Rank 0 sleeps 40 ms per step (a test-only slowdown that changes no number), so a kill
    // lands mid-run rather than after the tiny job's last step.
    setenv("AXONN_TEST_SLOW_RANK", "0:40", 1);
  }
  void TearDown() override {
    unsetenv("AXONN_TEST_SLOW_RANK");
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // `axonn run -n RANKS --nodes-sim NODES --max-restarts R` of `job` in dir_/name (AXONN_LAYOUT
  // = layout unless empty; no --max-restarts when R < 0), in the background.
  std::future<CommandResult> start(const std::string& name, const std::string& job, int ranks, int nodes_sim,
                                   const std::string& layout, int max_restarts, const std::string& train_options = "") {
    const auto dir = dir_ / name;
    std::filesystem::create_directories(dir);
    write_file(dir / "job.toml", job);
    const std::string restarts = max_restarts < 0 ? "" : "--max-restarts " + std::to_string(max_restarts);
    return std::async(std::launch::async,
                      [=] { return run_train(dir, ranks, layout, train_options, nodes_sim, 240, restarts); });
  }

  std::filesystem::path dir_;
};

TEST_F(Recovery, AKilledRankRestartsEveryRankAndTheRunEndsLikeAnUninterruptedOne) {
  auto job = start("killed", tiny_job(30, 4), 4, 1, "2x2x1x1", 2);
  wait_for_committed(dir_ / "killed", 4);
  kill_ranks(dir_ / "killed", {2}, 0, 6);
  const CommandResult r = job.get();
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn run: rank 2 was killed by signal 9")) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn run: restart 1 of 2: restarting all 4 ranks, ")) << r.output;
  const int resumed = resumed_step(r.output);
  ASSERT_GE(resumed, 4) << r.output;
  TrainedRun recovered = read_run(dir_ / "killed");
  recovered.steps = last_of_each_step(recovered.steps);
  EXPECT_TRUE(contains(recovered.summary, "\"recovery\": {\"restart\": 1, \"total_s\": ")) << recovered.summary;

  const TrainedRun uninterrupted = train_in(dir_ / "uninterrupted", tiny_job(30, 4), 4, "2x2x1x1");
  expect_same_run(recovered, uninterrupted, 0, 0, "restarted after a kill");
}

// Every rank of pretend node 1 killed at once, as when a node vanishes: the job goes on with
// the 4 ranks of node 0, at the layout the chooser picks for them, from the newest checkpoint;
// the same as an uninterrupted 8-rank run's checkpoint of that step resumed on 4 ranks.
TEST_F(Recovery, APretendNodeKilledGoesOnWithTheNodesLeftLikeAResumeAtThatSize) {
  const std::string job = tiny_job(30, 4);
  auto run = start("node", job, 8, 2, "", 1);
  wait_for_committed(dir_ / "node", 4);
  kill_ranks(dir_ / "node", {4, 5, 6, 7}, 0, 6);
  const CommandResult r = run.get();
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "-n1 (ranks 4-7) was lost: restarting 4 ranks on 1 pretend node, ")) << r.output;
  const int resumed = resumed_step(r.output);
  ASSERT_GE(resumed, 4) << r.output;
  TrainedRun recovered = read_run(dir_ / "node");
  recovered.steps = last_of_each_step(recovered.steps);

  // The uninterrupted run keeps every checkpoint, so the resumed step is there to copy.
  const TrainedRun whole = train_in(dir_ / "whole", job, 8, "", "checkpoint.keep=100", 2);
  const auto resumed_dir = copy_checkpoint_step(dir_ / "whole", resumed, dir_ / "resumed");
  TrainedRun reference = train_in(resumed_dir, job, 4, "");
  std::vector<StepLine> steps(whole.steps.begin(), whole.steps.begin() + resumed);
  steps.insert(steps.end(), reference.steps.begin(), reference.steps.end());
  reference.steps = steps;
  expect_same_run(recovered, reference, 0, 0, "a pretend node lost");
}

// The tiny job with memory copies (checkpoint.memory_interval = `interval`, a TOML value) in
// `memory_dir` and no disk save before its end.
std::string memory_copy_job(const std::filesystem::path& memory_dir, int steps = 30,
                            const std::string& interval = "1") {
  std::string job = tiny_job(steps, 100);
  job.insert(job.find("[run]"), "memory_interval = " + interval + "\nmemory_dir = \"" + memory_dir.string() + "\"\n");
  return job;
}

// A tmpfs of `size` (e.g. "64k") mounted at `dir` while it lives; mounted() is false where
// mounting is not allowed (not root).
class SmallTmpfs {
 public:
  SmallTmpfs(std::filesystem::path dir, const std::string& size) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
    mounted_ = run_command("mount -t tmpfs -o size=" + size + " tmpfs " + dir_.string()).code == 0;
  }
  ~SmallTmpfs() {
    if (mounted_) run_command("umount " + dir_.string());
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  bool mounted() const { return mounted_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
};

// A memory directory without room for the copies (a 64 KiB tmpfs, smaller than one of the tiny
// job's shards) stops the run before its first step, exit 2, saying how much room it has and
// needs, and the fix.
TEST_F(Recovery, MemoryCopiesWithoutRoomInTheMemoryDirRefuseToStart) {
  const SmallTmpfs small(dir_ / "small-shm", "64k");
  if (!small.mounted()) GTEST_SKIP() << "mounting a small tmpfs needs root";
  const CommandResult r = start("no-room", memory_copy_job(small.dir()), 2, 1, "2x1x1x1", 0).get();
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("checkpoint.memory_dir [^ ]*/small-shm has 0\\.1 MiB free on the "
                                                     "node of rank 0, where the memory copies need [0-9.]+ MiB .*"
                                                     "checkpoint.memory_interval = 0")))
      << r.output;
  EXPECT_EQ(read_metrics(dir_ / "no-room" / "run").size(), 0u) << r.output;
}

// The step the restarted run loaded from the nodes' memory; -1 when it did not.
int memory_step(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("checkpoint: loaded step-0*(\\d+) from the nodes' memory"))) return -1;
  return std::stoi(m[1]);
}

// A restore moves pieces of the copies straight into the ranks' memory: it needs no room in
// the memory directory beyond the copies. 3 pretend nodes of one rank share a 2 MiB tmpfs that
// the copies fill to ~1.6 MiB (each node keeps two steps of its shard and its sender's, ~530
// KiB, of the tiny job's ~400 KiB state); with a node lost, the two left restore from memory
// (writing the whole step out on each node, as a checkpoint step, would need 1.6 MiB more).
TEST_F(Recovery, ARestoreFromMemoryNeedsNoRoomBeyondTheCopies) {
  const SmallTmpfs small(dir_ / "restore-shm", "2m");
  if (!small.mounted()) GTEST_SKIP() << "mounting a small tmpfs needs root";
  auto run = start("restore-room", memory_copy_job(small.dir()), 3, 3, "", 1);
  kill_ranks(dir_ / "restore-room", {2}, 0, 6);
  const CommandResult r = run.get();
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "-n2 (rank 2) was lost: restarting 2 ranks on 2 pretend nodes, ")) << r.output;
  EXPECT_GE(memory_step(r.output), 5) << r.output;
}

// With checkpoint.memory_interval every rank's shard is in its node's memory and the next
// node's. The last of `nodes` pretend nodes (of `ranks` ranks in all) killed takes its memory
// along (the launcher deletes its copies), and the run goes on from the newest step the other
// nodes' memory holds whole: one the kill landed after, at most the one in flight earlier,
// where the disk holds none. The same as an uninterrupted run's checkpoint of that step resumed
// on the ranks left. `options`: the job's keys for every run (e.g. the optimizer sharded). The
// node is lost once `kill_after` steps are logged; the run must go on from step `min_loaded` or
// later. `output`: the run's.
void expect_a_lost_node_recovered_from_memory(const std::filesystem::path& dir, int ranks, int nodes,
                                              const std::string& options,
                                              const std::function<std::future<CommandResult>()>& start_run,
                                              size_t kill_after = 6, int min_loaded = 5,
                                              std::string* output = nullptr) {
  const int per_node = ranks / nodes, left = ranks - per_node;
  std::vector<int> lost(static_cast<size_t>(per_node));
  std::iota(lost.begin(), lost.end(), left);
  auto run = start_run();
  kill_ranks(dir / "memory", lost, 0, kill_after);
  const CommandResult r = run.get();
  if (output != nullptr) *output = r.output;
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string lost_ranks = per_node == 1 ? "rank " + std::to_string(left)
                                               : "ranks " + std::to_string(left) + "-" + std::to_string(ranks - 1);
  EXPECT_TRUE(contains(r.output, "-n" + std::to_string(nodes - 1) + " (" + lost_ranks + ") was lost: restarting " +
                                     std::to_string(left) + " ranks on " + std::to_string(nodes - 1) + " pretend node" +
                                     (nodes > 2 ? "s" : "") + ", "))
      << r.output;
  const int loaded = memory_step(r.output);
  ASSERT_GE(loaded, min_loaded) << r.output;
  EXPECT_EQ(resumed_step(r.output), loaded) << r.output;
  // The launcher leaves no copy behind.
  EXPECT_TRUE(std::filesystem::is_empty(dir / "shm")) << r.output;
  TrainedRun recovered = read_run(dir / "memory");
  recovered.steps = last_of_each_step(recovered.steps);

  const TrainedRun whole = train_in(dir / "whole", tiny_job(30, 1), ranks, "", "checkpoint.keep=100 " + options, nodes);
  const auto resumed_dir = copy_checkpoint_step(dir / "whole", loaded, dir / "resumed");
  TrainedRun reference = train_in(resumed_dir, tiny_job(30, 1), left, "", options);
  std::vector<StepLine> steps(whole.steps.begin(), whole.steps.begin() + loaded);
  steps.insert(steps.end(), reference.steps.begin(), reference.steps.end());
  reference.steps = steps;
  expect_same_run(recovered, reference, 0, 0, "a pretend node lost, recovered from memory");
}

TEST_F(Recovery, ANodeLostGoesOnFromTheMemoryCopiesOfTheNodesLeft) {
  expect_a_lost_node_recovered_from_memory(dir_, 4, 2, "",
                                           [&] { return start("memory", memory_copy_job(dir_ / "shm"), 4, 2, "", 1); });
}

// 3 pretend nodes of one rank, the last lost: node 0 holds shards 0 and 2 (its own and the one
// node 2 sent it), node 1 shards 1 and 0, so node 1's rank reads shard 2's pieces from node 0
// over the network, answered from node 0's file, and the rest in place from its own node.
TEST_F(Recovery, ANodeLostGoesOnFromMemoryWithPiecesMovedBetweenTheNodesLeft) {
  std::string output;
  expect_a_lost_node_recovered_from_memory(
      dir_, 3, 3, "", [&] { return start("memory", memory_copy_job(dir_ / "shm"), 3, 3, "", 1); }, 6, 5, &output);
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(output, m, std::regex("from the nodes' memory \\(([0-9.]+) MiB moved between nodes\\)")))
      << output;
  EXPECT_GT(std::stod(m[1]), 0.0) << output;
}

// The same with the optimizer sharded over the data axis: each rank's copy holds its part of
// the moments, which the restore cuts into the parts the ranks left hold.
TEST_F(Recovery, ANodeLostGoesOnFromTheMemoryCopiesWithTheOptimizerSharded) {
  const std::string sharded = "training.shard_optimizer=true";
  expect_a_lost_node_recovered_from_memory(
      dir_, 4, 2, sharded, [&] { return start("memory", memory_copy_job(dir_ / "shm"), 4, 2, "", 1, sharded); });
}

// checkpoint.memory_interval = "auto": the run makes 4 calibration copies (after its steps 2,
// 4, 6 and 8 where a copy ends within a step), measures what they cost every rank, and then
// copies every K steps after the last of them, K the most any rank needs to keep the copies
// within 2% of training time; the log names the choice and its measurement. A node lost after
// step 20 goes on from the newest of those copies, like an uninterrupted run resumed there.
TEST_F(Recovery, AnAutoMemoryIntervalIsMeasuredAndALostNodeGoesOnFromItsCopies) {
  std::string output;
  expect_a_lost_node_recovered_from_memory(
      dir_, 4, 2, "", [&] { return start("memory", memory_copy_job(dir_ / "shm", 30, "\"auto\""), 4, 2, "", 1); }, 20,
      2, &output);
  if (HasFatalFailure()) return;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      output, m,
      std::regex(
          "checkpoint: memory copies every (\\d+) steps from step (\\d+) \\(checkpoint.memory_interval = "
          "\"auto\", measured on the copies after steps ([0-9, and]+)\\): on rank [0-3], a copy paused training "
          "[0-9.]+ ms, slowed the steps beside it by [0-9.]+ ms \\(at most [0-9.]+ ms at 95% confidence\\) and wrote "
          "and sent for [0-9.]+ ms, with steps of "
          "[0-9.]+ ms; every \\1 steps keeps them within 2% of training time")))
      << output;
  const int interval = std::stoi(m[1]), from = std::stoi(m[2]);
  std::vector<int> calibration;
  const std::string listed = m[3];
  const std::regex number("\\d+");
  for (std::sregex_iterator it(listed.begin(), listed.end(), number), end; it != end; ++it)
    calibration.push_back(std::stoi(it->str()));
  ASSERT_EQ(calibration.size(), 4u) << output;
  EXPECT_EQ(calibration.front(), 2) << output;  // after the warm-up step and one without a copy
  for (size_t i = 1; i < calibration.size(); ++i) EXPECT_GE(calibration[i], calibration[i - 1] + 2) << output;
  const int last = calibration.back();
  EXPECT_GT(from, last) << output;
  EXPECT_EQ((from - last) % interval, 0) << output;
  // The step loaded is the last copy at or before the kill (after step 20 was logged: 20, or
  // 21 when that step's metrics line came before the kill), or the one before it when the
  // kill landed while a copy was in flight.
  const int loaded = memory_step(output);
  const bool calibration_copy = std::find(calibration.begin(), calibration.end(), loaded) != calibration.end();
  EXPECT_TRUE(calibration_copy || (loaded >= from && (loaded - last) % interval == 0)) << "step " << loaded << "\n"
                                                                                       << output;
  EXPECT_LE(loaded, 21) << output;
}

// A memory copy damaged (a test-only fault, AXONN_TEST_CORRUPT_MEMORY_COPY = `fault`) is not
// loaded: each rank that found it says why (`why`, a pattern), the run says the copy could not
// be used and loads the disk checkpoint, and ends like an uninterrupted one. The kill comes
// after disk step 10 is committed and 9 steps before the next disk step, so the newest memory
// copy (one every step) is newer than the disk's even when a slow (sanitized) run commits step
// 10 several steps late; at a tie the copy would not be read at all.
void expect_a_damaged_copy_to_fall_back_to_the_disk(
    const std::filesystem::path& dir, const std::string& fault, const std::string& why,
    const std::function<std::future<CommandResult>(const std::string& name, const std::string& job)>& start_run) {
  const std::string job = with_replaced(memory_copy_job(dir / "shm"), {{"interval = 100\n", "interval = 10\n"}});
  setenv("AXONN_TEST_CORRUPT_MEMORY_COPY", fault.c_str(), 1);
  auto run = start_run("corrupt", job);
  wait_for_committed(dir / "corrupt", 10);
  kill_ranks(dir / "corrupt", {1}, 0, 11);
  const CommandResult r = run.get();
  unsetenv("AXONN_TEST_CORRUPT_MEMORY_COPY");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(why))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("checkpoint: memory copies: the memory copy of step-0+\\d+ "
                                                     "could not be used .*; loading the disk checkpoint instead")))
      << r.output;
  EXPECT_EQ(memory_step(r.output), -1) << r.output;
  const int resumed = resumed_step(r.output);
  EXPECT_GE(resumed, 10) << r.output;
  EXPECT_EQ(resumed % 10, 0) << r.output;  // a disk step
  TrainedRun recovered = read_run(dir / "corrupt");
  recovered.steps = last_of_each_step(recovered.steps);
  const TrainedRun uninterrupted = train_in(dir / "uninterrupted", tiny_job(30, 10), 2, "2x1x1x1");
  expect_same_run(recovered, uninterrupted, 0, 0, "a damaged memory copy (" + fault + ")");
}

// A bit of rank 0's shard flipped: its verification names the file and the tensor.
TEST_F(Recovery, AMemoryCopyThatFailsItsChecksumFallsBackToTheDisk) {
  expect_a_damaged_copy_to_fall_back_to_the_disk(
      dir_, "checksum", "memory copy: rank 0: checksum mismatch in [^ ]*/\\.tmp-step-0+\\d+/shard-00000\\.mem, tensor ",
      [&](const std::string& name, const std::string& job) { return start(name, job, 2, 1, "2x1x1x1", 1); });
}

// Rank 1's shard cut short once it verified: both ranks have written their pieces of rank 0's
// shard, and all but the last of rank 1's, into their weights and moments when its last piece
// does not read; the disk checkpoint loaded instead writes every one of them again.
TEST_F(Recovery, AMemoryCopyThatFailsAfterItsPiecesWereWrittenFallsBackToTheDisk) {
  expect_a_damaged_copy_to_fall_back_to_the_disk(
      dir_, "after-verify",
      "memory copy: rank [01]: read of \\d+ bytes at offset \\d+ of [^ ]*/shard-00001\\.mem failed",
      [&](const std::string& name, const std::string& job) { return start(name, job, 2, 1, "2x1x1x1", 1); });
}

// A second failure after the last restart allowed ends the job with that failure, naming the
// limit; the newest checkpoint stays committed. The limit is the job's run.max_restarts here.
TEST_F(Recovery, TheRestartLimitEndsTheJobWithTheLastFailure) {
  auto run = start("limit", tiny_job(60, 4) + "max_restarts = 1\n", 2, 1, "2x1x1x1", -1);
  wait_for_committed(dir_ / "limit", 4);
  kill_ranks(dir_ / "limit", {1}, 0, 6);
  kill_ranks(dir_ / "limit", {1}, 1, read_metrics(dir_ / "limit" / "run").size() + 6);
  const CommandResult r = run.get();
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn run: restart 1 of 1: restarting all 2 ranks")) << r.output;
  EXPECT_TRUE(contains(
      r.output, "axonn run: no restart: restart limit 1 reached (--max-restarts, else the job's run.max_restarts)"))
      << r.output;
  const auto latest = read_latest(dir_ / "limit" / "ckpt");
  ASSERT_TRUE(latest.has_value()) << r.output;
  EXPECT_GE(*latest, 4);
}

// The ranks left fit no layout of the job (global batch 3 on 2 ranks): no restart, exit 3 as
// for any job no layout fits, naming the newest committed checkpoint to resume from elsewhere.
TEST_F(Recovery, NoLayoutForTheRanksLeftEndsTheJobNamingTheNewestCheckpoint) {
  const std::string job = with_replaced(tiny_job(60, 4), {{"hidden = 32", "hidden = 15"},
                                                          {"heads = 8", "heads = 3"},
                                                          {"global_batch = 24", "global_batch = 3"},
                                                          {"micro_batch = 2", "micro_batch = 1"}});
  auto run = start("no-layout", job, 3, 3, "", 1);
  wait_for_committed(dir_ / "no-layout", 4);  // a checkpoint to name
  kill_ranks(dir_ / "no-layout", {2}, 0, 10);
  const CommandResult r = run.get();
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex("axonn run: no restart: no layout runs the job on the 2 ranks "
                                             "left: .*global_batch=3.*; the newest committed checkpoint is "
                                             "step \\d+ in [^ ]*/no-layout/ckpt; resume it at a size a layout fits")))
      << r.output;
  EXPECT_FALSE(contains(r.output, "axonn run: restart 1")) << r.output;
}

// A stopped rank (SIGSTOP: hung) is named by its peers' collective timeout; the launcher
// kills it and restarts every rank, and the run ends like an uninterrupted one.
TEST_F(Recovery, AHungRankIsFoundByTheTimeoutAndTheJobRestarts) {
  auto run = start("hung", tiny_job(30, 4), 2, 1, "2x1x1x1", 1, "--timeout-ms 2000");
  for (int i = 0; i < 6000 && read_metrics(dir_ / "hung" / "run").size() < 6; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::vector<pid_t> pids = rank_pids(dir_ / "hung", {1}, 0);
  ASSERT_EQ(pids.size(), 1u);
  kill(pids[0], SIGSTOP);
  const CommandResult r = run.get();
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "did not arrive: it does not answer (stopped, or hung)")) << r.output;
  EXPECT_TRUE(contains(r.output, "was stopped by SIGSTOP and is killed")) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn run: restart 1 of 1: restarting all 2 ranks")) << r.output;
  TrainedRun recovered = read_run(dir_ / "hung");
  recovered.steps = last_of_each_step(recovered.steps);
  const TrainedRun uninterrupted = train_in(dir_ / "uninterrupted", tiny_job(30, 4), 2, "2x1x1x1");
  expect_same_run(recovered, uninterrupted, 0, 0, "restarted after a hang");
}

// A second pretend node lost while the first restart starts up and loads: the second restart
// goes on with the last node, and the run still reaches its last step with every sample once.
TEST_F(Recovery, ANodeLostDuringARecoveryIsRecoveredFromToo) {
  auto run = start("twice", tiny_job(30, 4), 6, 3, "", 2);
  kill_ranks(dir_ / "twice", {4, 5}, 0, 6);
  kill_ranks(dir_ / "twice", {2, 3}, 1, 0);  // as soon as the restart's ranks run: before its first step
  const CommandResult r = run.get();
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "-n2 (ranks 4-5) was lost: restarting 4 ranks on 2 pretend nodes")) << r.output;
  EXPECT_TRUE(contains(r.output, "-n1 (ranks 2-3) was lost: restarting 2 ranks on 1 pretend node")) << r.output;
  EXPECT_TRUE(contains(r.output, "recovery: restart 2: ")) << r.output;
  const std::vector<StepLine> steps = last_of_each_step(read_metrics(dir_ / "twice" / "run"));
  ASSERT_EQ(steps.size(), 30u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step, static_cast<int64_t>(i + 1));
    EXPECT_EQ(steps[i].data_cursor, static_cast<int64_t>(24 * (i + 1)));
  }
}

// Without --max-restarts a failure ends the job as before, with no restart line.
TEST_F(Recovery, WithoutMaxRestartsAFailureEndsTheJob) {
  auto run = start("none", tiny_job(60, 4), 2, 1, "2x1x1x1", 0);
  kill_ranks(dir_ / "none", {0}, 0, 3);
  const CommandResult r = run.get();
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn run: rank 0 was killed by signal 9")) << r.output;
  EXPECT_FALSE(contains(r.output, "axonn run: restart")) << r.output;
  EXPECT_FALSE(contains(r.output, "no restart")) << r.output;
}

// What the sbatch templates read: the job's run.max_restarts and run.spare_nodes, with
// overrides applied; a negative count is bad input naming the key.
TEST(RestartPolicy, PrintRestartPolicyFollowsTheJobAndOverrides) {
  const auto dir = fresh_dir("restart-policy");
  write_file(dir / "job.toml", tiny_job(2, 0));
  auto print = [&](const std::string& args) {
    return run_command("env -u PMIX_NAMESPACE -u AXONN_SITE_CONFIG " + kAxonn + " train --print-restart-policy " +
                       (dir / "job.toml").string() + " " + args);
  };
  EXPECT_EQ(print("").output, "0 0\n");
  EXPECT_EQ(print("run.max_restarts=3 run.spare_nodes=1").output, "3 1\n");
  const auto bad = print("run.max_restarts=-1");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, "max_restarts")) << bad.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace axonn::test
