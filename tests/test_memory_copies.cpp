// Memory copies of the training state (trainer/train/memory_copies.hpp,
// checkpoint/memory_shard.hpp, checkpoint/memory_steps.hpp): who keeps whose copy, when
// (trainer/train/memory_interval.hpp: a fixed interval, or "auto" from a copy's cost), the raw
// shard format and its checks, what a node's directory says it holds, and the pieces of the
// shards a restore moves (checkpoint/memory_pieces.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/fs_util.hpp"
#include "checkpoint/memory_pieces.hpp"
#include "checkpoint/memory_pieces_read.hpp"
#include "checkpoint/memory_shard.hpp"
#include "checkpoint/memory_steps.hpp"
#include "checkpoint/raw_read.hpp"
#include "checkpoint/step_dir.hpp"
#include "comm/gloo_communicator.hpp"
#include "comm/gloo_mesh.hpp"
#include "thread_exchange.hpp"
#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/train/host_exchange.hpp"
#include "trainer/train/memory_copies.hpp"
#include "trainer/train/memory_interval.hpp"

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
  const MemoryCopyPlan r1 = plan_memory_copies(node_of_rank, 1, "/m");
  EXPECT_EQ(r1.buddy, 3);
  EXPECT_EQ(r1.senders, std::vector<int>{5});
  EXPECT_EQ(r1.node_ranks, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(r1.leader(2), 4);
  EXPECT_FALSE(r1.leads_node());
  const MemoryCopyPlan r4 = plan_memory_copies(node_of_rank, 4, "/m");
  EXPECT_EQ(r4.buddy, 0);
  EXPECT_EQ(r4.senders, std::vector<int>{2});
  EXPECT_TRUE(r4.leads_node());
}

// A restore: each node's shards go to its ranks in turn, so every rank verifies and serves its
// share; a node holding one shard gives it to its lowest rank.
TEST(MemoryCopyPlan, ARestoreDealsANodesShardsToItsRanks) {
  const MemoryCopyPlan plan = plan_memory_copies(std::vector<int>{0, 0, 1, 1, 1}, 0, "/m");
  // Shards 0-3 on both nodes (each node's own and its copies of the other's), shard 4 on node 0.
  const std::map<int, std::vector<int>> shard_nodes = {{0, {0, 1}}, {1, {0, 1}}, {2, {0, 1}}, {3, {0, 1}}, {4, {0}}};
  const std::map<std::pair<int, int>, int> keeper = deal_memory_shards(plan, shard_nodes);
  const std::map<std::pair<int, int>, int> expected = {{{0, 0}, 0}, {{0, 1}, 1}, {{0, 2}, 0}, {{0, 3}, 1}, {{0, 4}, 0},
                                                       {{1, 0}, 2}, {{1, 1}, 3}, {{1, 2}, 4}, {{1, 3}, 2}};
  EXPECT_EQ(keeper, expected);
  EXPECT_EQ(deal_memory_shards(plan, {{3, {1}}}), (std::map<std::pair<int, int>, int>{{{1, 3}, 2}}));
}

TEST(MemoryCopyPlan, UnevenNodesWrapAroundTheSmallerNode) {
  // Node 0 has three ranks, node 1 one: node 0's ranks all send to rank 3, which sends to rank 0.
  const std::vector<int> node_of_rank = {0, 0, 0, 1};
  EXPECT_EQ(plan_memory_copies(node_of_rank, 2, "/m").buddy, 3);
  EXPECT_EQ(plan_memory_copies(node_of_rank, 3, "/m").senders, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan_memory_copies(node_of_rank, 3, "/m").buddy, 0);
  EXPECT_TRUE(plan_memory_copies(node_of_rank, 1, "/m").senders.empty());
}

TEST(MemoryCopyPlan, OneNodeKeepsItsOwnCopyOnly) {
  const MemoryCopyPlan plan = plan_memory_copies(std::vector<int>{0, 0}, 1, "/m");
  EXPECT_EQ(plan.buddy, -1);
  EXPECT_TRUE(plan.senders.empty());
}

// "auto": the fewest steps between copies whose pause and slowdown of the step beside them are
// within 2% of the steps between them, and that let a copy end before the next starts.
TEST(MemoryInterval, TheFewestStepsThatKeepTheCopiesWithinTheBudget) {
  // A GPU node: 0.3 ms paused of 100 ms steps is 0.3%, and the writing ends within the step.
  EXPECT_EQ(memory_interval_for({.step_s = 0.1, .pause_s = 3e-4, .background_s = 0.05}), 1);
  // 10 ms paused of 100 ms steps: 10%, within 2% at every 5 steps.
  EXPECT_EQ(memory_interval_for({.step_s = 0.1, .pause_s = 0.01, .background_s = 0.05}), 5);
  // Writing 1.5 GB takes 0.95 s beside 0.3 s steps: every 4 steps, so no copy waits for the last.
  EXPECT_EQ(memory_interval_for({.step_s = 0.3, .pause_s = 1e-3, .background_s = 0.95}), 4);
  // On the CPU backend the background takes the step's cores: 0.3 ms paused and 12 ms slower of
  // 165 ms steps is 7.5%, within 2% at every 4 steps (3.7 rounds up). A step beside the copy
  // that was faster than the fastest before it costs nothing.
  EXPECT_EQ(memory_interval_for({.step_s = 0.165, .pause_s = 3e-4, .slowdown_s = 0.012, .background_s = 0.04}), 4);
  EXPECT_EQ(memory_interval_for({.step_s = 0.165, .pause_s = 3e-4, .slowdown_s = -0.01, .background_s = 0.04}), 1);
  // Exactly at the budget is within it; an unmeasured step copies every step.
  EXPECT_EQ(memory_interval_for({.step_s = 0.5, .pause_s = 0.01, .background_s = 0}), 1);
  EXPECT_EQ(memory_interval_for({.step_s = 0, .pause_s = 1, .background_s = 1}), 1);
  // The slowdown counts at its bound: 30 ms more of 165 ms steps is 18%, every 10 steps.
  EXPECT_EQ(
      memory_interval_for(
          {.step_s = 0.165, .pause_s = 3e-4, .slowdown_s = 0.012, .slowdown_bound_s = 0.03, .background_s = 0.04}),
      10);
  EXPECT_EQ(
      describe_copy_cost(
          {.step_s = 0.165, .pause_s = 3e-4, .slowdown_s = 0.012, .slowdown_bound_s = 0.03, .background_s = 0.04}),
      "a copy paused training 0.3 ms, slowed the steps beside it by 12.0 ms (at most 30.0 ms at 95% confidence) and "
      "wrote and sent for 40.0 ms, with steps of 165.0 ms");
}

// A fixed interval copies after the multiples of it. "auto" calibrates: with copies that end
// within a step, it copies after every other step from the run's second, the steps before them
// without a copy beside them and the steps after them beside one; it decides after the step
// beside the last, then copies every K steps.
TEST(MemoryInterval, TheScheduleOfAFixedAndOfAnAutoInterval) {
  const MemoryCopySchedule fixed(3, 4);
  std::vector<int64_t> due;
  for (int64_t s = 5; s <= 12; ++s) {
    if (fixed.due(s)) due.push_back(s);
    EXPECT_FALSE(fixed.deciding(s) || fixed.calibrating());
  }
  EXPECT_EQ(due, (std::vector<int64_t>{6, 9, 12}));
  EXPECT_EQ(fixed.next_copy(10), 12);
  EXPECT_EQ(fixed.next_copy(12), 12);

  MemoryCopySchedule automatic(std::nullopt, 10);  // resumed from step 10
  std::vector<int64_t> without, beside;
  due.clear();
  for (int64_t s = 11; s <= 30; ++s) {
    if (automatic.calibrating()) {
      // A copy's writing and sending ends within the step after it.
      const CalibrationStep measured = automatic.boundary(s, false);
      if (measured == CalibrationStep::without_copy) without.push_back(s);
      if (measured == CalibrationStep::beside_copy) beside.push_back(s);
    }
    if (automatic.deciding(s)) {
      EXPECT_EQ(s, 19);
      automatic.decide(3);
      EXPECT_EQ(automatic.next_copy(s), 21);
    }
    if (automatic.due(s)) due.push_back(s);
  }
  EXPECT_EQ(automatic.interval(), 3);
  EXPECT_EQ(without, (std::vector<int64_t>{12, 14, 16, 18}));
  EXPECT_EQ(beside, (std::vector<int64_t>{13, 15, 17, 19}));
  EXPECT_EQ(automatic.calibration_copies(), (std::vector<int64_t>{12, 14, 16, 18}));
  EXPECT_EQ(describe_copy_steps(automatic.calibration_copies()), "steps 12, 14, 16 and 18");
  EXPECT_EQ(due, (std::vector<int64_t>{12, 14, 16, 18, 21, 24, 27, 30}));
  EXPECT_EQ(describe_memory_interval(1), "every 1 step");
  EXPECT_EQ(describe_memory_interval(std::nullopt).rfind("as often as keeps them within 2% of training time", 0), 0u);
}

// Copies whose writing and sending outlast a step: every step a copy runs beside is measured
// beside it (none is taken for a step without a copy), and the next calibration copy waits
// for the one before to end on every rank and for a step with none beside it.
TEST(MemoryInterval, AutoSpacesCopiesThatOutlastAStep) {
  MemoryCopySchedule automatic(std::nullopt, 0);
  std::vector<int64_t> without, beside;
  std::optional<int64_t> decided;
  // Each copy still runs at the two boundaries after it (some rank's: the ranks agree).
  std::vector<int64_t> copies;
  for (int64_t s = 1; s <= 40 && !decided; ++s) {
    const bool running = !copies.empty() && s - copies.back() <= 2;
    const CalibrationStep measured = automatic.boundary(s, running);
    if (measured == CalibrationStep::without_copy) without.push_back(s);
    if (measured == CalibrationStep::beside_copy) beside.push_back(s);
    if (automatic.deciding(s)) decided = s;
    if (automatic.due(s)) copies.push_back(s);
  }
  EXPECT_EQ(copies, (std::vector<int64_t>{2, 6, 10, 14}));
  EXPECT_EQ(automatic.calibration_copies(), copies);
  EXPECT_EQ(without, (std::vector<int64_t>{2, 6, 10, 14}));
  EXPECT_EQ(beside, (std::vector<int64_t>{3, 4, 5, 7, 8, 9, 11, 12, 13, 15, 16, 17}));
  EXPECT_EQ(decided, 17);
  automatic.decide(5);
  EXPECT_EQ(automatic.next_copy(17), 19);  // 14 + 5
  EXPECT_TRUE(automatic.due(19));
  EXPECT_FALSE(automatic.due(18));
}

// The calibration's step times: the steps without a copy against the steps beside one, every
// one of a copy's steps counted in what it cost; a step beside a disk save's writing is left
// out of the means, unless that would leave a side with none.
TEST(MemoryInterval, TheCalibrationCountsEveryStepACopySlowsAndLeavesOutTheStepsBesideADiskSave) {
  CopyCalibration calibration;
  calibration.add(CalibrationStep::none, 0.5, false);  // the warm-up
  for (int copy = 0; copy < 4; ++copy) {
    const bool beside_save = copy == 2;  // a save's writing beside this copy's first step
    calibration.add(CalibrationStep::without_copy, 0.1, false);
    calibration.add(CalibrationStep::beside_copy, beside_save ? 0.3 : 0.13, beside_save);
    calibration.add(CalibrationStep::beside_copy, 0.11, false);
  }
  EXPECT_NEAR(calibration.step_s(), 0.1, 1e-12);
  // The 7 steps beside copies and no save average 0.1171..., 2 steps per copy.
  EXPECT_NEAR(calibration.slowdown_s(4), 2 * ((3 * 0.13 + 4 * 0.11) / 7 - 0.1), 1e-12);
  EXPECT_EQ(calibration.slowdown_s(0), 0.0);

  CopyCalibration all_beside_saves;  // a save beside every step: every step counts
  for (int copy = 0; copy < 4; ++copy) {
    all_beside_saves.add(CalibrationStep::without_copy, 0.2, true);
    all_beside_saves.add(CalibrationStep::beside_copy, 0.3, true);
  }
  EXPECT_NEAR(all_beside_saves.step_s(), 0.2, 1e-12);
  EXPECT_NEAR(all_beside_saves.slowdown_s(4), 0.1, 1e-12);
  // Steps that do not vary bound the slowdown at its mean.
  EXPECT_NEAR(all_beside_saves.slowdown_bound_s(4), 0.1, 1e-12);
}

// Steps that vary as much as a copy slows them leave its cost uncertain: the interval follows
// the 95% upper bound of the slowdown (Welch's t), not its mean. The steps of a 12.8M-parameter
// run on 8 ranks sharing 2 cores, whose copy slowed the steps beside it by 0.40 s on average.
TEST(MemoryInterval, TheSlowdownIsTakenAtItsUpperBoundWhenTheStepsVary) {
  CopyCalibration calibration;
  calibration.add(CalibrationStep::none, 4.272, false);
  const double without[] = {1.890, 2.593, 2.011, 2.026}, beside[] = {3.257, 2.559, 2.276, 2.029};
  for (int copy = 0; copy < 4; ++copy) {
    calibration.add(CalibrationStep::without_copy, without[copy], false);
    calibration.add(CalibrationStep::beside_copy, beside[copy], false);
  }
  EXPECT_NEAR(calibration.step_s(), 2.13, 1e-9);
  EXPECT_NEAR(calibration.slowdown_s(4), 0.40025, 1e-9);
  // Standard errors 0.2653 s (beside) and 0.1573 s (without), 4.9 degrees of freedom: t = 2.132
  // (of 4), 0.400 + 2.132 * 0.3085 = 1.058 s.
  EXPECT_NEAR(calibration.slowdown_bound_s(4), 1.0579, 1e-4);
  const CopyCost cost{.step_s = calibration.step_s(),
                      .pause_s = 0.052,
                      .slowdown_s = calibration.slowdown_s(4),
                      .slowdown_bound_s = calibration.slowdown_bound_s(4),
                      .background_s = 2.25};
  EXPECT_EQ(memory_interval_for(cost), 27);  // (0.052 + 1.058) / (2% of 2.13) = 26.05; at the mean every 11

  // A side of one step has no spread: the bound is the mean difference.
  CopyCalibration one_each;
  one_each.add(CalibrationStep::without_copy, 0.1, false);
  one_each.add(CalibrationStep::beside_copy, 0.15, false);
  EXPECT_NEAR(one_each.slowdown_bound_s(1), 0.05, 1e-12);

  EXPECT_EQ(student_t_95(1), 6.314);
  EXPECT_EQ(student_t_95(4.9), 2.132);  // rounded down to 4
  EXPECT_EQ(student_t_95(0.5), 6.314);
  EXPECT_EQ(student_t_95(30), 1.697);
  EXPECT_EQ(student_t_95(1e9), 1.697);
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

TEST(MemoryShard, ItsTableDecodesWithoutItsData) {
  const std::vector<float> a = {1, 2, 3, 4};
  const std::vector<TensorSlice> slices = {TensorSlice{"w", {2, 4}, Rect{{0, 2}, {2, 2}}, a.data()}};
  Metadata metadata;
  metadata.layout = "1x2x1x1";
  const std::vector<char> bytes = encode_memory_shard({6, 0, 2}, "tok", slices, &metadata);
  size_t table_bytes = 0;
  const MemoryShard whole = decode_memory_shard_table(bytes, "copy", &table_bytes);
  EXPECT_EQ(table_bytes, bytes.size() - a.size() * sizeof(float));
  const MemoryShard table = decode_memory_shard_table(std::span(bytes).first(table_bytes), "copy");
  ASSERT_EQ(table.slices.size(), 1u);
  EXPECT_EQ(table.slices[0].rect, (Rect{{0, 2}, {2, 2}}));
  EXPECT_EQ(table.slices[0].data, nullptr);
  EXPECT_EQ(table.metadata->layout, "1x2x1x1");
  EXPECT_EQ(table.header.world, 2);
  EXPECT_THROW(decode_memory_shard_table(std::span(bytes).first(table_bytes - 1), "copy"), FormatError);
}

// A 4x6 tensor written by 2 ranks as row halves, read by 3 ranks as column thirds: each read
// takes one piece of each shard, and the pieces answered and placed give the tensor back.
TEST(MemoryPieces, EachReadTakesTheOverlapsOfTheStoredSlicesAndNothingElse) {
  std::vector<float> tensor(24);
  for (size_t i = 0; i < tensor.size(); ++i) tensor[i] = static_cast<float>(i);
  std::map<int, MemoryShard> held;
  std::vector<MemoryShard> tables;
  for (int r = 0; r < 2; ++r) {
    const std::vector<TensorSlice> slice = {TensorSlice{"w", {4, 6}, Rect{{2 * r, 0}, {2, 6}}, tensor.data() + 12 * r}};
    const std::vector<char> bytes = encode_memory_shard({8, r, 2}, "tok", slice, nullptr);
    held[r] = decode_memory_shard(bytes, "shard");
    tables.push_back(decode_memory_shard_table(bytes, "shard"));
  }
  for (int64_t third = 0; third < 3; ++third) {
    std::vector<float> got(8, -1);
    const std::vector<SliceRead> reads = {SliceRead{"w", {4, 6}, Rect{{0, 2 * third}, {4, 2}}, got.data()}};
    const std::vector<MemoryPiece> pieces = plan_memory_pieces(tables, reads, "step 8");
    ASSERT_EQ(pieces.size(), 2u);
    EXPECT_EQ(pieces[1].shard, 1);
    EXPECT_EQ(pieces[1].region, (Rect{{2, 2 * third}, {2, 2}}));
    std::vector<float> placed(8, -1);
    const std::vector<float*> into = {placed.data()};
    const std::vector<char> answer = answer_piece_request(held, encode_piece_request(pieces), "rank 2");
    EXPECT_EQ(answer.size(), 8 * sizeof(float));  // only the read's part of the two shards
    place_piece_answer(pieces, answer, reads, into, "rank 0");
    for (int64_t row = 0; row < 4; ++row)
      for (int64_t col = 0; col < 2; ++col)
        EXPECT_EQ(placed[static_cast<size_t>(row * 2 + col)], tensor[static_cast<size_t>(row * 6 + 2 * third + col)]);
    EXPECT_THROW(place_piece_answer(pieces, std::span(answer).first(4), reads, into, "rank 0"), FormatError);
  }
}

TEST(MemoryPieces, AnotherModelOrADamagedRequestIsRefusedNamingIt) {
  const std::vector<float> data(12, 1.0f);
  const std::vector<TensorSlice> slice = {TensorSlice{"w", {2, 6}, Rect{{0, 0}, {2, 6}}, data.data()}};
  const std::vector<char> bytes = encode_memory_shard({8, 0, 1}, "tok", slice, nullptr);
  const std::vector<MemoryShard> tables = {decode_memory_shard_table(bytes, "shard")};
  std::vector<float> out(12);
  const std::vector<SliceRead> other_name = {SliceRead{"v", {2, 6}, Rect{{0, 0}, {2, 6}}, out.data()}};
  EXPECT_THROW(plan_memory_pieces(tables, other_name, "step 8"), RequestMismatch);
  const std::vector<SliceRead> other_shape = {SliceRead{"w", {3, 4}, Rect{{0, 0}, {3, 4}}, out.data()}};
  EXPECT_THROW(plan_memory_pieces(tables, other_shape, "step 8"), RequestMismatch);
  // Two shards holding the same rows: not exactly once.
  const std::vector<MemoryShard> twice = {tables[0], tables[0]};
  const std::vector<SliceRead> whole = {SliceRead{"w", {2, 6}, Rect{{0, 0}, {2, 6}}, out.data()}};
  EXPECT_THROW(plan_memory_pieces(twice, whole, "step 8"), FormatError);

  const std::map<int, MemoryShard> held = {{0, decode_memory_shard(bytes, "shard")}};
  const std::vector<std::vector<int64_t>> damaged = {{1, 0, 2, 0, 0, 1, 1},          // a shard not held
                                                     {0, 3, 2, 0, 0, 1, 1},          // no such slice
                                                     {0, 0, 2, 1, 5, 2, 1},          // past the stored rows
                                                     {0, 0, 2, 0, 0, -1, -1},        // a negative count
                                                     {0, 0, 2, 0, 0, 1, INT64_MAX},  // a count that would overflow
                                                     {0, 0, 2, 0, 0, 1},             // cut short
                                                     {0, 0, -1}};
  for (const auto& request : damaged) {
    try {
      answer_piece_request(held, request, "rank 3");
      ADD_FAILURE() << "a damaged request was answered";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("the request of rank 3 for memory copy pieces"), std::string::npos)
          << e.what();
    }
  }
}

// A [2, 4, 6] tensor stored by 2 ranks as halves of its middle dimension and read in place
// from their files as [2, 4, 3] column halves, two-dimensional planes of it and a bias: the
// pieces land where answer_piece_request and place_piece_answer put them, and the answer read
// from the files is the one from memory. A file whose table is not the one planned with, or
// that ends early, is refused naming it; verified where it lies, a flipped bit is found.
TEST(MemoryPieces, ReadInPlaceFromTheShardFilesTheyFillTheReadsAsAnAnswerWould) {
  const fs::path dir = test_dir("in-place");
  std::vector<float> tensor(48), bias = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
  for (size_t i = 0; i < tensor.size(); ++i) tensor[i] = static_cast<float>(i);
  std::vector<std::vector<float>> halves(2);
  for (int r = 0; r < 2; ++r)  // rows 2r, 2r+1 of the middle dimension, both of dimension 0
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 2 * r; b < 2 * r + 2; ++b)
        for (int64_t c = 0; c < 6; ++c)
          halves[static_cast<size_t>(r)].push_back(tensor[static_cast<size_t>((a * 4 + b) * 6 + c)]);
  std::vector<MemoryShard> tables;
  std::vector<std::string> table_bytes;
  std::map<int, MemoryShard> held;
  for (int r = 0; r < 2; ++r) {
    std::vector<TensorSlice> slices = {
        TensorSlice{"w", {2, 4, 6}, Rect{{0, 2 * r, 0}, {2, 2, 6}}, halves[static_cast<size_t>(r)].data()}};
    if (r == 1) slices.push_back(TensorSlice{"b", {6}, Rect{{0}, {6}}, bias.data()});
    const std::vector<char> bytes = encode_memory_shard({8, r, 2}, "tok", slices, nullptr);
    store_memory_shard(dir, bytes);
    size_t n = 0;
    tables.push_back(decode_memory_shard_table(bytes, "shard", &n));
    table_bytes.emplace_back(bytes.data(), n);
    held[r] = decode_memory_shard(bytes, "shard");
  }
  const fs::path paths[2] = {memory_shard_path(dir, 8, 0), memory_shard_path(dir, 8, 1)};
  std::map<int, MemoryShardFile> files;
  for (int r = 0; r < 2; ++r) {
    const MappedRawFile mapped(paths[r]);
    size_t n = 0;
    EXPECT_EQ(verify_memory_shard(mapped.bytes(), paths[r].string(), &n).slices.size(), static_cast<size_t>(r + 1));
    EXPECT_EQ(n, table_bytes[static_cast<size_t>(r)].size());
    files.emplace(r, MemoryShardFile(paths[r], table_bytes[static_cast<size_t>(r)], tables[static_cast<size_t>(r)]));
  }
  const auto file_of = [&files](int r) { return files.count(r) != 0 ? &files.at(r) : nullptr; };
  for (int64_t half = 0; half < 2; ++half) {
    std::vector<float> in_place(24, -1), answered(24, -1), b_in_place(3, -1), b_answered(3, -1);
    const std::vector<SliceRead> reads = {SliceRead{"w", {2, 4, 6}, Rect{{0, 0, 3 * half}, {2, 4, 3}}, nullptr},
                                          SliceRead{"b", {6}, Rect{{3 * half}, {3}}, nullptr}};
    const std::vector<MemoryPiece> pieces = plan_memory_pieces(tables, reads, "step 8");
    const std::vector<float*> into = {in_place.data(), b_in_place.data()},
                              placed = {answered.data(), b_answered.data()};
    for (int r = 0; r < 2; ++r) {
      std::vector<MemoryPiece> of_shard;
      for (const MemoryPiece& p : pieces)
        if (p.shard == r) of_shard.push_back(p);
      files.at(r).read_pieces(of_shard, reads, into);
    }
    const std::vector<int64_t> request = encode_piece_request(pieces);
    const std::vector<char> answer = answer_piece_request(held, request, "rank 1");
    EXPECT_EQ(answer_piece_request_from_files(request, file_of, "rank 1"), answer);
    place_piece_answer(pieces, answer, reads, placed, "rank 0");
    EXPECT_EQ(in_place, answered);
    EXPECT_EQ(b_in_place, b_answered);
    EXPECT_EQ(in_place[0], tensor[static_cast<size_t>(3 * half)]);            // [0, 0, 3 half]
    EXPECT_EQ(in_place[23], tensor[47 - static_cast<size_t>(3 - 3 * half)]);  // [1, 3, 3 half + 2]
    EXPECT_EQ(b_in_place[2], bias[static_cast<size_t>(3 * half + 2)]);
  }
  EXPECT_THROW(answer_piece_request_from_files(std::vector<int64_t>{5, 0, 1, 0, 1}, file_of, "rank 1"), FormatError);

  // Rank 1's table planned with, rank 0's file: not the same copy.
  try {
    MemoryShardFile(paths[0], table_bytes[1], tables[1]);
    FAIL() << "another shard's file was opened as rank 1's";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00000.mem is not the copy of rank 1's shard"), std::string::npos)
        << e.what();
  }
  std::vector<float> out(48);
  const std::vector<SliceRead> whole = {SliceRead{"w", {2, 4, 6}, Rect{{0, 0, 0}, {2, 4, 6}}, nullptr}};
  const std::vector<float*> into = {out.data()};
  std::vector<MemoryPiece> of_rank_1;
  for (const MemoryPiece& p : plan_memory_pieces(tables, whole, "step 8"))
    if (p.shard == 1) of_rank_1.push_back(p);
  flip_last_bit(paths[1]);  // in the bias: what verify_memory_shard finds, not the reads
  EXPECT_THROW(verify_memory_shard(MappedRawFile(paths[1]).bytes(), paths[1].string()), ChecksumMismatch);
  fs::resize_file(paths[1], fs::file_size(paths[1]) - 30);  // into w's last row
  EXPECT_THROW(files.at(1).read_pieces(of_rank_1, whole, into), CheckpointError);
  EXPECT_THROW(verify_memory_shard(MappedRawFile(paths[1]).bytes(), paths[1].string()), FormatError);
  fs::remove_all(dir);
}

// The shard tables travel to every rank this way: bytes of any length and value, three to a
// float, each rank's back as it was; and lists of integers of any length.
TEST(HostExchange, AllGatherBytesGivesEveryRanksBytesBack) {
  const int world = 3;
  auto bytes_of = [](int rank) {
    std::string bytes(static_cast<size_t>(rank == 1 ? 0 : 1000 + rank), '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 37 + static_cast<size_t>(rank)) & 0xFF);
    return bytes;
  };
  test::run_ranks(world, [&](int rank, Exchange& exchange) {
    const GroupSpec group{"world", {0, 1, 2}};
    const auto contexts =
        connect_gloo_groups(exchange, make_gloo_device(true), {group}, std::chrono::seconds(20), "bytes");
    GlooCommunicator comm(group, contexts[0], std::chrono::seconds(20), nullptr);
    const std::unique_ptr<Backend> backend = make_cpu_backend(1);
    const std::vector<std::string> all = all_gather_bytes(*backend, comm, bytes_of(rank));
    ASSERT_EQ(all.size(), 3u);
    for (int r = 0; r < world; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], bytes_of(r)) << "rank " << r;
    const std::vector<std::string> none = all_gather_bytes(*backend, comm, "");
    EXPECT_EQ(none, std::vector<std::string>(3));
    // Integer lists of different lengths (the nodes' inventories, the ranks' servers), one empty.
    const std::vector<int64_t> list(static_cast<size_t>(2 * rank), -7 + rank);
    const std::vector<std::vector<int64_t>> lists = all_gather_integer_lists(*backend, comm, list);
    ASSERT_EQ(lists.size(), 3u);
    for (int r = 0; r < world; ++r)
      EXPECT_EQ(lists[static_cast<size_t>(r)], std::vector<int64_t>(static_cast<size_t>(2 * r), -7 + r));
  });
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

// The fault the recovery tests inject (AXONN_TEST_CORRUPT_MEMORY_COPY) is one a restore's
// verification finds.
TEST(MemorySteps, TheInjectedFaultFailsTheShardsChecksum) {
  const fs::path node = test_dir("fault");
  write_step(node, 10, true);
  const fs::path path = memory_shard_path(node, 10, 1);
  flip_last_bit(path);
  EXPECT_THROW(decode_memory_shard(read_text_file(path), path.string()), ChecksumMismatch);
  fs::remove_all(node);
}

}  // namespace
}  // namespace axonn
