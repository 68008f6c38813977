// Memory copies of the training state (trainer/train/memory_copies.hpp,
// checkpoint/memory_steps.hpp): who keeps whose copy, what a node's directory says it holds,
// the messages files travel in, and a node's copy committed as a checkpoint step that loads
// like one saved to disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/load.hpp"
#include "checkpoint/memory_steps.hpp"
#include "checkpoint/shard_writer.hpp"
#include "checkpoint/step_dir.hpp"
#include "checkpoint/verify.hpp"
#include "trainer/train/memory_copies.hpp"

namespace axonn {
namespace {

namespace fs = std::filesystem;

fs::path test_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("axonn-memory-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(MemoryCopyPlan, EachRankSendsToTheSameLocalRankOfTheNextNode) {
  const std::vector<int> node_of_rank = {0, 0, 1, 1, 2, 2};
  const MemoryCopyPlan r1 = plan_memory_copies(node_of_rank, 1, "/m", 2);
  EXPECT_EQ(r1.buddy, 3);
  EXPECT_EQ(r1.senders, std::vector<int>{5});
  EXPECT_EQ(r1.leaders, (std::vector<int>{0, 2, 4}));
  EXPECT_FALSE(r1.leads_node());
  const MemoryCopyPlan r4 = plan_memory_copies(node_of_rank, 4, "/m", 2);
  EXPECT_EQ(r4.buddy, 0);
  EXPECT_EQ(r4.senders, std::vector<int>{2});
  EXPECT_TRUE(r4.leads_node());
}

TEST(MemoryCopyPlan, UnevenNodesWrapAroundTheSmallerNode) {
  // Node 0 has three ranks, node 1 one: node 0's ranks all send to rank 3, which sends to rank 0.
  const std::vector<int> node_of_rank = {0, 0, 0, 1};
  EXPECT_EQ(plan_memory_copies(node_of_rank, 2, "/m", 1).buddy, 3);
  EXPECT_EQ(plan_memory_copies(node_of_rank, 3, "/m", 1).senders, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan_memory_copies(node_of_rank, 3, "/m", 1).buddy, 0);
  EXPECT_TRUE(plan_memory_copies(node_of_rank, 1, "/m", 1).senders.empty());
}

TEST(MemoryCopyPlan, OneNodeKeepsItsOwnCopyOnly) {
  const MemoryCopyPlan plan = plan_memory_copies(std::vector<int>{0, 0}, 1, "/m", 1);
  EXPECT_EQ(plan.buddy, -1);
  EXPECT_TRUE(plan.senders.empty());
}

TEST(MemoryCopyPlan, TheJobDirectoryTellsCheckpointDirectoriesApart) {
  EXPECT_EQ(memory_job_dir("/dev/shm", "42", "/a/ckpt"), memory_job_dir("/dev/shm", "42", "/a/ckpt"));
  EXPECT_NE(memory_job_dir("/dev/shm", "42", "/a/ckpt"), memory_job_dir("/dev/shm", "42", "/b/ckpt"));
  EXPECT_EQ(memory_job_dir("/dev/shm", "42", "/a/ckpt").parent_path(), fs::path("/dev/shm"));
  EXPECT_EQ(memory_job_dir("/dev/shm", "42", "/a/ckpt").filename().string().rfind("axonn-42-", 0), 0u);
}

// Step 8 of a tensor "w" [4, 2] written by two ranks (a row each), its meta by rank 0.
void write_step(const fs::path& node_dir, int64_t step, bool with_rank_1, bool with_meta) {
  const std::vector<float> rows[2] = {{1, 2}, {3, 4}};
  for (int rank = 0; rank < (with_rank_1 ? 2 : 1); ++rank) {
    const std::vector<TensorSlice> slice = {TensorSlice{"w", {2, 2}, Rect{{rank, 0}, {1, 2}}, rows[rank].data()}};
    write_shard(node_dir, step, rank, slice, "token");
  }
  if (with_meta) {
    Metadata metadata;
    metadata.ints["step"] = step;
    metadata.model_config = "tiny";
    write_memory_meta(node_dir, step, metadata, "token", 2);
  }
}

TEST(MemorySteps, ANodesDirectorySaysWhichShardsAndWhetherTheMetaIsThere) {
  const fs::path node = test_dir("inventory");
  EXPECT_TRUE(memory_steps(node / "absent").empty());
  write_step(node, 4, true, true);
  write_step(node, 6, false, false);
  const std::vector<MemoryStep> steps = memory_steps(node);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step, 4);
  EXPECT_EQ(steps[0].shards, (std::vector<int>{0, 1}));
  EXPECT_EQ(steps[0].world, 2);
  EXPECT_EQ(steps[1].step, 6);
  EXPECT_EQ(steps[1].shards, std::vector<int>{0});
  EXPECT_EQ(steps[1].world, 0);
  remove_memory_steps_before(node, 6);
  ASSERT_EQ(memory_steps(node).size(), 1u);
  EXPECT_EQ(memory_steps(node)[0].step, 6);
  fs::remove_all(node);
}

TEST(MemorySteps, FilesTravelInOneMessageAndArriveWhole) {
  const fs::path from = test_dir("pack-from"), to = test_dir("pack-to");
  std::ofstream(from / "a.h5") << "first file";
  std::ofstream(from / "empty.h5");
  const std::vector<fs::path> files = {from / "a.h5", from / "empty.h5"};
  const std::vector<char> message = pack_files(files);
  const std::vector<fs::path> written = unpack_files(message, to / "step");
  ASSERT_EQ(written.size(), 2u);
  std::ifstream in(to / "step" / "a.h5");
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "first file");
  EXPECT_TRUE(fs::exists(to / "step" / "empty.h5"));
  EXPECT_EQ(fs::file_size(to / "step" / "empty.h5"), 0u);
  // A message cut short, or naming a path outside the directory, writes nothing wrong.
  std::vector<char> cut(message.begin(), message.end() - 3);
  EXPECT_THROW(unpack_files(cut, to / "cut"), std::runtime_error);
  std::vector<char> evil = {2, 0, 0, 0, 0, 0, 0, 0, '.', '.', 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_THROW(unpack_files(evil, to / "evil"), std::runtime_error);
  fs::remove_all(from);
  fs::remove_all(to);
}

TEST(MemorySteps, ANodesCopyCommitsAsACheckpointStepThatLoads) {
  const fs::path node = test_dir("commit");
  write_step(node, 8, true, true);
  const CommitResult committed = commit_memory_step(node, 8, node / "restore");
  EXPECT_EQ(committed.step_dir, step_path(node / "restore", 8));
  EXPECT_TRUE(verify_checkpoint(committed.step_dir).ok());
  std::vector<float> w(4, 0.0f);
  const std::vector<SliceRead> reads = {SliceRead{"w", {2, 2}, Rect{{0, 0}, {2, 2}}, w.data()}};
  const LoadResult loaded = load_checkpoint(node / "restore", reads);
  EXPECT_EQ(loaded.step, 8);
  EXPECT_EQ(loaded.metadata.model_config, "tiny");
  EXPECT_EQ(loaded.metadata.ints.count("memory_copy.world"), 0u);  // the copy's bookkeeping stays out
  EXPECT_EQ(w, (std::vector<float>{1, 2, 3, 4}));

  // The fault the recovery tests inject: the step no longer verifies.
  EXPECT_FALSE(flip_first_stored_bit(committed.step_dir).empty());
  const VerifyReport report = verify_checkpoint(committed.step_dir);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.problems[0].what.find("checksum mismatch"), std::string::npos) << report.problems[0].what;
  fs::remove_all(node);
}

TEST(MemorySteps, AStepMissingAShardIsRefusedNamingIt) {
  const fs::path node = test_dir("missing");
  write_step(node, 8, false, true);
  try {
    commit_memory_step(node, 8, node / "restore");
    FAIL() << "a step without rank 1's shard committed";
  } catch (const MissingShard& e) {
    EXPECT_NE(std::string(e.what()).find("lacks rank 1's shard"), std::string::npos) << e.what();
  }
  fs::remove_all(node);
}

}  // namespace
}  // namespace axonn
