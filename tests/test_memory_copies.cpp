// Memory copies of the training state (trainer/train/memory_copies.hpp,
// checkpoint/memory_shard.hpp, checkpoint/memory_steps.hpp): who keeps whose copy, the raw
// shard format and its checks, what a node's directory says it holds, and a node's copy
// committed as a checkpoint step that loads like one saved to disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/load.hpp"
#include "checkpoint/memory_shard.hpp"
#include "checkpoint/memory_steps.hpp"
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

// `step` of a tensor "w" [2, 2] written by two ranks (a row each) into a node's directory;
// rank 0's shard carries the metadata.
void write_step(const fs::path& node_dir, int64_t step, bool with_rank_1) {
  const std::vector<float> rows[2] = {{1, 2}, {3, 4}};
  Metadata metadata;
  metadata.ints["step"] = step;
  metadata.model_config = "tiny";
  for (int rank = 0; rank < (with_rank_1 ? 2 : 1); ++rank) {
    const std::vector<TensorSlice> slice = {TensorSlice{"w", {2, 2}, Rect{{rank, 0}, {1, 2}}, rows[rank].data()}};
    store_memory_shard(node_dir, encode_memory_shard({step, rank, 2}, "token", slice, rank == 0 ? &metadata : nullptr));
  }
}

TEST(MemoryShard, RoundTripsItsSlicesAndMetadata) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7};
  const std::vector<TensorSlice> slices = {TensorSlice{"h.0.w", {4, 3}, Rect{{2, 0}, {2, 3}}, a.data()},
                                           TensorSlice{"adam.m/b", {1}, Rect{{0}, {1}}, b.data()}};
  Metadata metadata;
  metadata.layout = "2x1x1x1";
  metadata.data_cursor = 96;
  metadata.rng_state = {1, 2, 3};
  metadata.ints["step"] = 4;
  metadata.reals["training.last_lr"] = 1e-3;
  metadata.strings["job"] = "a = 1\n";
  const std::vector<char> bytes = encode_memory_shard({4, 0, 2}, "tok", slices, &metadata);
  const MemoryShard shard = decode_memory_shard(bytes, "copy");
  EXPECT_EQ(shard.header.step, 4);
  EXPECT_EQ(shard.header.world, 2);
  EXPECT_EQ(shard.save_token, "tok");
  ASSERT_TRUE(shard.metadata.has_value());
  EXPECT_EQ(*shard.metadata, metadata);
  ASSERT_EQ(shard.slices.size(), 2u);
  EXPECT_EQ(shard.slices[0].name, "h.0.w");
  EXPECT_EQ(shard.slices[0].rect, (Rect{{2, 0}, {2, 3}}));
  EXPECT_EQ(std::vector<float>(shard.slices[0].data, shard.slices[0].data + 6), a);
  EXPECT_EQ(shard.slices[1].data[0], 7.0f);
  EXPECT_FALSE(decode_memory_shard(encode_memory_shard({4, 1, 2}, "tok", slices, nullptr), "copy").metadata);
}

TEST(MemoryShard, AChangedByteIsAChecksumOrFormatErrorNamingIt) {
  const std::vector<float> a = {1, 2, 3, 4};
  const std::vector<TensorSlice> slices = {TensorSlice{"w", {2, 2}, Rect{{0, 0}, {2, 2}}, a.data()}};
  const std::vector<char> bytes = encode_memory_shard({4, 0, 1}, "tok", slices, nullptr);
  std::vector<char> data_flipped = bytes;
  data_flipped.back() ^= 1;
  try {
    decode_memory_shard(data_flipped, "shard-00000.mem");
    FAIL() << "a changed float decoded";
  } catch (const ChecksumMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch in shard-00000.mem, tensor w"), std::string::npos)
        << e.what();
  }
  std::vector<char> header_flipped = bytes;
  header_flipped[60] ^= 1;  // inside the token and slice table
  EXPECT_THROW(decode_memory_shard(header_flipped, "x"), FormatError);
  EXPECT_THROW(decode_memory_shard(std::vector<char>(bytes.begin(), bytes.end() - 1), "x"), FormatError);
  EXPECT_THROW(decode_memory_shard(std::vector<char>(bytes.begin(), bytes.begin() + 20), "x"), FormatError);
  EXPECT_THROW(decode_memory_shard_header(std::vector<char>(48, 'A'), "x"), FormatError);
}

TEST(MemorySteps, ANodesDirectorySaysWhichShardsAndWhetherTheStepIsWhole) {
  const fs::path node = test_dir("inventory");
  EXPECT_TRUE(memory_steps(node / "absent").empty());
  write_step(node, 4, true);
  write_step(node, 6, false);
  std::ofstream(tmp_step_path(node, 6) / "shard-00001.mem.partial") << "a copy being written";
  const std::vector<MemoryStep> steps = memory_steps(node);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step, 4);
  EXPECT_EQ(steps[0].shards, (std::vector<int>{0, 1}));
  EXPECT_EQ(steps[0].world, 2);
  EXPECT_TRUE(steps[0].whole());
  EXPECT_EQ(steps[1].step, 6);
  EXPECT_EQ(steps[1].shards, std::vector<int>{0});
  EXPECT_FALSE(steps[1].whole());
  remove_memory_steps_before(node, 6);
  ASSERT_EQ(memory_steps(node).size(), 1u);
  EXPECT_EQ(memory_steps(node)[0].step, 6);
  fs::remove_all(node);
}

TEST(MemorySteps, ANodesCopyCommitsAsACheckpointStepThatLoads) {
  const fs::path node = test_dir("commit");
  write_step(node, 8, true);
  const CommitResult committed = commit_memory_step(node, 8, node / "restore");
  EXPECT_EQ(committed.step_dir, step_path(node / "restore", 8));
  EXPECT_TRUE(verify_checkpoint(committed.step_dir).ok());
  std::vector<float> w(4, 0.0f);
  const std::vector<SliceRead> reads = {SliceRead{"w", {2, 2}, Rect{{0, 0}, {2, 2}}, w.data()}};
  const LoadResult loaded = load_checkpoint(node / "restore", reads);
  EXPECT_EQ(loaded.step, 8);
  EXPECT_EQ(loaded.metadata.model_config, "tiny");
  EXPECT_EQ(w, (std::vector<float>{1, 2, 3, 4}));
  fs::remove_all(node);
}

TEST(MemorySteps, AStepMissingAShardOrFailingItsChecksumIsRefusedNamingIt) {
  const fs::path node = test_dir("missing");
  write_step(node, 8, false);
  try {
    commit_memory_step(node, 8, node / "restore");
    FAIL() << "a step without rank 1's shard committed";
  } catch (const MissingShard& e) {
    EXPECT_NE(std::string(e.what()).find("lacks rank 1's shard"), std::string::npos) << e.what();
  }
  write_step(node, 10, true);
  flip_last_bit(memory_shard_path(node, 10, 1));  // the fault the recovery tests inject
  EXPECT_THROW(commit_memory_step(node, 10, node / "restore"), ChecksumMismatch);
  EXPECT_FALSE(read_latest(node / "restore").has_value());
  fs::remove_all(node);
}

}  // namespace
}  // namespace axonn
