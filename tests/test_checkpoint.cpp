// The checkpoint library on real files (under the build tree): shards written by simulated
// ranks (threads), commit, reading back at other tilings bitwise, `latest`, retention,
// refusals with clear messages, async save, fallback.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <stop_token>
#include <thread>

#include "checkpoint/async_saver.hpp"
#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/commit.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/latest_recovery.hpp"
#include "checkpoint/load.hpp"
#include "checkpoint/replicas.hpp"
#include "checkpoint/step_dir.hpp"
#include "checkpoint/verify.hpp"
#include "checkpoint_test_model.hpp"

namespace axonn {
namespace {

using namespace ckpt_test;

bool contains_text(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Loads the whole model at (tiling, world) through `options`; checks it is `step` holding
// the values written for `values_of` (default: step).
void expect_load(const fs::path& dir, const Tiling& tiling, int world, int64_t step, const ReadOptions& options = {},
                 int64_t values_of = -1) {
  const auto model = small_model();
  for (int r = 0; r < world; ++r) {
    RankTargets t = rank_targets(model, tiling, r, world);
    LoadOptions lo;
    lo.read = options;
    const LoadResult res = load_checkpoint(dir, t.reads, lo);
    EXPECT_EQ(res.step, step);
    EXPECT_FALSE(res.fell_back);
    expect_rank_values(model, t, values_of < 0 ? step : values_of);
  }
}

TEST(Checkpoint, SavedAtOneTilingLoadsAtOthersBitwiseOnEveryReadPath) {
  const fs::path dir = test_dir();
  const CommitResult c = save_step(dir, 12, 4, block_tiles);
  EXPECT_EQ(c.step_dir, dir / "step-000000012");
  EXPECT_EQ(c.shards, 4);
  const ReadOptions shards_verified{ReadPath::shards, true}, shards_plain{ReadPath::shards, false},
      vds{ReadPath::index_vds, true};
  for (const ReadOptions& o : {shards_verified, shards_plain, vds}) {
    expect_load(dir, row_tiles, 3, 12, o);    // fewer ranks, uneven rows
    expect_load(dir, col_tiles, 5, 12, o);    // more ranks, columns
    expect_load(dir, block_tiles, 4, 12, o);  // the same layout
    expect_load(dir, row_tiles, 1, 12, o);    // one rank holds everything
  }
}

TEST(Checkpoint, MetadataRoundTrips) {
  const fs::path dir = test_dir();
  save_step(dir, 7, 2, row_tiles);
  const CheckpointReader reader = CheckpointReader::open_latest(dir);
  EXPECT_EQ(reader.step(), 7);
  EXPECT_EQ(reader.metadata(), test_metadata(7));
  EXPECT_EQ(reader.tensors().size(), small_model().size());
  EXPECT_EQ(reader.tensor("blocks/0/mlp.fc").global_shape, (Shape{16, 67}));
  EXPECT_EQ(reader.shards().size(), 2u);
}

TEST(Checkpoint, LatestNamesTheNewestCommitAndOlderStepsStayLoadable) {
  const fs::path dir = test_dir();
  EXPECT_THROW(CheckpointReader::open_latest(dir), NoCheckpoint);
  RankTargets none = rank_targets(small_model(), row_tiles, 0, 1);
  EXPECT_THROW(load_checkpoint(dir, none.reads), NoCheckpoint);
  save_step(dir, 10, 2, row_tiles);
  save_step(dir, 20, 2, col_tiles);
  EXPECT_EQ(read_bytes(dir / "latest"), "step-000000020\n");
  EXPECT_EQ(CheckpointReader::open_latest(dir).step(), 20);
  expect_load(dir, block_tiles, 2, 20);
  RankTargets t = rank_targets(small_model(), block_tiles, 1, 2);
  LoadOptions older;
  older.step = 10;
  EXPECT_EQ(load_checkpoint(dir, t.reads, older).step, 10);
  expect_rank_values(small_model(), t, 10);
  // Nothing but committed directories count as steps.
  EXPECT_EQ(committed_steps(dir), (std::vector<int64_t>{10, 20}));
}

TEST(Checkpoint, RetentionKeepsTheNewestKAndNeverTheOneLatestNames) {
  const fs::path dir = test_dir();
  for (int64_t step = 1; step <= 5; ++step) save_step(dir, step, 2, row_tiles, /*keep=*/2);
  EXPECT_EQ(committed_steps(dir), (std::vector<int64_t>{4, 5}));
  // Re-committing an older step (a resume from an older one) makes it `latest`: kept
  // beside the two newest.
  const CommitResult old = save_step(dir, 3, 2, row_tiles, 2);
  EXPECT_TRUE(old.removed_steps.empty());
  EXPECT_EQ(committed_steps(dir), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(read_latest(dir), 3);
  const CommitResult next = save_step(dir, 6, 2, row_tiles, 2);
  EXPECT_EQ(next.removed_steps, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(committed_steps(dir), (std::vector<int64_t>{5, 6}));
  // apply_retention directly: keep 1 while `latest` names the older step.
  write_latest(dir, 5);
  apply_retention(dir, 1, 6);
  EXPECT_EQ(committed_steps(dir), (std::vector<int64_t>{5, 6}));
  expect_load(dir, row_tiles, 2, 5);
}

TEST(Checkpoint, MissingShardTimesOutClearlyAndLatestIsUnchanged) {
  const fs::path dir = test_dir();
  save_step(dir, 10, 2, row_tiles);
  const auto model = small_model();
  for (int r = 0; r < 2; ++r) {
    RankState st = rank_state(model, row_tiles, r, 3, 20);
    write_shard(dir, 20, r, st.slices);
  }
  const std::vector<int> ranks = {0, 1, 2};
  try {
    commit(dir, 20, ranks, test_metadata(20), 3, std::chrono::milliseconds(300));
    FAIL() << "commit did not time out";
  } catch (const CommitTimeout& e) {
    EXPECT_TRUE(contains_text(e.what(), "rank 2: no shard-00002.h5")) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "1 of 3 shards")) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "`latest` is unchanged")) << e.what();
  }
  EXPECT_EQ(read_latest(dir), 10);
  EXPECT_FALSE(fs::exists(dir / "step-000000020"));
  expect_load(dir, col_tiles, 2, 10);
  // The late rank arrives: the same step commits.
  RankState st = rank_state(model, row_tiles, 2, 3, 20);
  write_shard(dir, 20, 2, st.slices);
  commit(dir, 20, ranks, test_metadata(20), 3, std::chrono::seconds(5));
  expect_load(dir, col_tiles, 2, 20);
}

TEST(Checkpoint, ShardsOfAnotherSaveAreNotMixedIn) {
  const fs::path dir = test_dir();
  const auto model = small_model();
  // A crashed attempt at step 30 left rank 1's shard with another token.
  RankState stale = rank_state(model, row_tiles, 1, 2, 29);
  write_shard(dir, 30, 1, stale.slices, "attempt-1");
  RankState st0 = rank_state(model, row_tiles, 0, 2, 30);
  write_shard(dir, 30, 0, st0.slices, "attempt-2");
  const std::vector<int> ranks = {0, 1};
  try {
    commit(dir, 30, ranks, test_metadata(30), 3, std::chrono::milliseconds(200), "attempt-2");
    FAIL() << "a stale shard was committed";
  } catch (const CommitTimeout& e) {
    EXPECT_TRUE(contains_text(e.what(), "shard-00001.h5 is from another save")) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "'attempt-1'")) << e.what();
  }
  RankState st1 = rank_state(model, row_tiles, 1, 2, 30);
  write_shard(dir, 30, 1, st1.slices, "attempt-2");  // overwrites the stale one
  commit(dir, 30, ranks, test_metadata(30), 3, std::chrono::seconds(5), "attempt-2");
  expect_load(dir, block_tiles, 2, 30);
  EXPECT_EQ(CheckpointReader::open_latest(dir).save_token(), "attempt-2");
}

TEST(Checkpoint, DuplicateOrMissingRectanglesAreRefusedAtCommit) {
  const fs::path dir = test_dir();
  const auto model = small_model();
  // Two data-parallel replicas both write everything (they forgot assign_writers).
  RankState a = rank_state(model, row_tiles, 0, 1, 5);
  write_shard(dir, 5, 0, a.slices);
  write_shard(dir, 5, 1, a.slices);
  const std::vector<int> both = {0, 1};
  try {
    commit(dir, 5, both, test_metadata(5), 3, std::chrono::seconds(5));
    FAIL() << "duplicates were committed";
  } catch (const CheckpointError& e) {
    EXPECT_TRUE(contains_text(e.what(), "is written by both shard-00000.h5 and shard-00001.h5")) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "replicas")) << e.what();
  }
  // Only half the row tiles: coverage is incomplete.
  RankState half = rank_state(model, row_tiles, 0, 2, 6);
  write_shard(dir, 6, 0, half.slices);
  const std::vector<int> one = {0};
  try {
    commit(dir, 6, one, test_metadata(6), 3, std::chrono::seconds(5));
    FAIL() << "an incomplete step was committed";
  } catch (const CheckpointError& e) {
    EXPECT_TRUE(contains_text(e.what(), "some rank did not write its part")) << e.what();
  }
  EXPECT_FALSE(read_latest(dir));
}

TEST(Checkpoint, BadSlicesAreRefusedBeforeAnythingIsWritten) {
  const fs::path dir = test_dir();
  std::vector<float> data(64, 1.0f);
  const std::vector<TensorSlice> overlapping = {TensorSlice{"w", {8, 8}, Rect{{0, 0}, {4, 8}}, data.data()},
                                                TensorSlice{"w", {8, 8}, Rect{{3, 0}, {4, 8}}, data.data()}};
  EXPECT_THROW(write_shard(dir, 1, 0, overlapping), std::invalid_argument);
  const std::vector<TensorSlice> outside = {TensorSlice{"w", {8, 8}, Rect{{6, 0}, {4, 8}}, data.data()}};
  EXPECT_THROW(write_shard(dir, 1, 0, outside), std::invalid_argument);
  const std::vector<TensorSlice> bad_name = {TensorSlice{"a b", {8}, Rect{{0}, {8}}, data.data()}};
  EXPECT_THROW(write_shard(dir, 1, 0, bad_name), std::invalid_argument);
  EXPECT_FALSE(fs::exists(tmp_step_path(dir, 1) / "shard-00000.h5"));
}

TEST(Checkpoint, FlippedByteIsAChecksumErrorNamingFileAndTensor) {
  const fs::path dir = test_dir();
  save_step(dir, 12, 2, row_tiles);
  const auto model = small_model();
  // Corrupt rank 1's rectangle of blocks/0/mlp.fc (tensor 2).
  const Rect r = row_tiles(model[2].shape, 2)[1];
  const fs::path shard = dir / "step-000000012" / "shard-00001.h5";
  flip_data_byte(shard, extract(global_values(model, 2, 12), model[2].shape, r));
  RankTargets t = rank_targets(model, row_tiles, 0, 1);
  try {
    load_checkpoint(dir, t.reads);
    FAIL() << "a corrupt shard loaded";
  } catch (const ChecksumMismatch& e) {
    EXPECT_EQ(e.file(), shard.string());
    EXPECT_TRUE(contains_text(e.what(), "checksum mismatch in " + shard.string())) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "tensor 'blocks/0/mlp.fc'")) << e.what();
  }
  // Rank 0's rows do not touch the corrupt rectangle: they still load.
  RankTargets rows0 = rank_targets(model, row_tiles, 0, 2);
  EXPECT_EQ(load_checkpoint(dir, rows0.reads).step, 12);
  const VerifyReport report = verify_checkpoint(dir / "step-000000012");
  EXPECT_FALSE(report.ok());
  bool named = false;
  for (const VerifyProblem& p : report.problems)
    named = named || (p.file == shard.string() && p.tensor == "blocks/0/mlp.fc");
  EXPECT_TRUE(named) << format_verify_report(report);
  EXPECT_EQ(report.shards_checked, 2);
}

TEST(Checkpoint, WrongGlobalShapeOrUnknownTensorNamesTheTensorAndBothShapes) {
  const fs::path dir = test_dir();
  save_step(dir, 3, 2, row_tiles);
  std::vector<float> buf(25 * 17);
  const std::vector<SliceRead> wrong = {SliceRead{"wte", {25, 17}, Rect{{0, 0}, {25, 17}}, buf.data()}};
  LoadOptions fallback;
  fallback.fallback = true;  // a model mismatch is not fixed by an older step
  try {
    load_checkpoint(dir, wrong, fallback);
    FAIL() << "a wrong shape loaded";
  } catch (const RequestMismatch& e) {
    EXPECT_TRUE(contains_text(e.what(), "tensor 'wte'")) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "global shape [25, 16] but the model expects [25, 17]")) << e.what();
  }
  const std::vector<SliceRead> unknown = {SliceRead{"wtf", {25, 16}, Rect{{0, 0}, {25, 16}}, buf.data()}};
  try {
    load_checkpoint(dir, unknown);
    FAIL() << "an unknown tensor loaded";
  } catch (const RequestMismatch& e) {
    EXPECT_TRUE(contains_text(e.what(), "no tensor 'wtf'")) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "'wte'")) << e.what();
  }
}

TEST(Checkpoint, UnknownFormatVersionAndWrongMagicAreRefused) {
  const fs::path dir = test_dir();
  save_step(dir, 3, 2, row_tiles);
  const fs::path index = dir / "step-000000003" / "index.h5";
  {
    h5::Handle f = h5::open_file_readwrite(index);
    h5::Attrs(f.get(), index.string()).set_i64(format::kAttrVersion, 4);
    f.close(index.string(), "close");
  }
  try {
    CheckpointReader reader(dir / "step-000000003");
    FAIL() << "version 4 opened";
  } catch (const FormatError& e) {
    EXPECT_EQ(e.file(), index.string());
    EXPECT_TRUE(contains_text(e.what(), "format version 4; this build reads versions 1, 2 and 3 only")) << e.what();
  }
  {
    h5::Handle f = h5::open_file_readwrite(index);
    const h5::Attrs root(f.get(), index.string());
    root.set_i64(format::kAttrVersion, format::kVersion);
    root.set_str(format::kAttrMagic, "NOTACKPT");
    f.close(index.string(), "close");
  }
  try {
    CheckpointReader reader(dir / "step-000000003");
    FAIL() << "a wrong magic opened";
  } catch (const FormatError& e) {
    EXPECT_TRUE(contains_text(e.what(), "magic 'NOTACKPT', expected 'AXONNCKP'")) << e.what();
  }
  // Not HDF5 at all: an HDF5 error naming the file.
  std::ofstream(index, std::ios::trunc) << "garbage";
  try {
    CheckpointReader reader(dir / "step-000000003");
    FAIL() << "garbage opened";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.file(), index.string());
    EXPECT_TRUE(contains_text(e.what(), "open file failed for " + index.string())) << e.what();
  }
}

TEST(Checkpoint, AsyncSaveReturnsBeforeTheWriteFinishes) {
  const fs::path dir = test_dir();
  const auto model = small_model();
  SaverOptions options;
  options.commit_timeout = std::chrono::seconds(20);
  AsyncSaver saver(dir, 0, options);
  RankState st0 = rank_state(model, row_tiles, 0, 2, 40);
  saver.save(40, st0.slices, CommitSpec{{0, 1}, test_metadata(40)});
  // The save is in flight: its commit waits for rank 1, which has not written yet.
  EXPECT_FALSE(saver.poll());
  // save() copied the data: changing the caller's buffers now does not change the checkpoint.
  for (auto& b : st0.buffers) std::fill(b.begin(), b.end(), -1.0f);
  RankState st1 = rank_state(model, row_tiles, 1, 2, 40);
  write_shard(dir, 40, 1, st1.slices);
  saver.wait();
  ASSERT_TRUE(saver.last_commit());
  EXPECT_EQ(saver.last_commit()->step_dir, dir / "step-000000040");
  EXPECT_TRUE(saver.poll());
  expect_load(dir, col_tiles, 3, 40);
}

// A rank leaving after a failure: its commit stops waiting for a shard that will never come
// (without abandon() this wait() would block for the 10-minute commit timeout) once as long
// again as its own shard took has passed, `latest` unchanged; a step whose shards are all
// there commits all the same.
TEST(Checkpoint, AnAbandonedCommitStopsWaitingForShardsThatNeverCome) {
  const fs::path dir = test_dir();
  const auto model = small_model();
  RankState st0 = rank_state(model, row_tiles, 0, 2, 40);
  {
    AsyncSaver saver(dir, 0);
    saver.save(40, st0.slices, CommitSpec{{0, 1}, test_metadata(40)});
    saver.abandon();
    try {
      saver.wait();
      FAIL() << "an abandoned commit committed without rank 1's shard";
    } catch (const CheckpointError& e) {
      EXPECT_TRUE(contains_text(e.what(), "commit of step 40 abandoned: this rank is leaving after a failure, and "))
          << e.what();
      EXPECT_TRUE(contains_text(e.what(), " ms later 1 of 2 shards in ")) << e.what();
      EXPECT_TRUE(contains_text(e.what(), "rank 1: no shard-00001.h5")) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "step-000000040"));
    EXPECT_TRUE(fs::exists(dir / ".tmp-step-000000040" / "shard-00000.h5"));  // its own shard is written
  }
  RankState st1 = rank_state(model, row_tiles, 1, 2, 41);
  write_shard(dir, 41, 1, st1.slices);
  RankState st0_next = rank_state(model, row_tiles, 0, 2, 41);
  AsyncSaver saver(dir, 0);
  saver.abandon();
  saver.save(41, st0_next.slices, CommitSpec{{0, 1}, test_metadata(41)});
  saver.wait();
  ASSERT_TRUE(saver.last_commit());
  EXPECT_EQ(saver.last_commit()->step_dir, dir / "step-000000041");
}

// A surviving rank still writing its shard when the committing rank leaves: the commit waits
// `after_stop` for it and commits (a failure of one rank loses no step whose other shards
// were on their way); a stop requested before the commit began counts from its first look.
TEST(Checkpoint, AnAbandonedCommitStillTakesTheShardsThatArriveInItsWait) {
  const fs::path dir = test_dir();
  const auto model = small_model();
  RankState st0 = rank_state(model, row_tiles, 0, 2, 40);
  RankState st1 = rank_state(model, row_tiles, 1, 2, 40);
  write_shard(dir, 40, 0, st0.slices);
  std::stop_source leaving;
  leaving.request_stop();
  std::thread survivor([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    write_shard(dir, 40, 1, st1.slices);
  });
  const auto committed = commit(dir, 40, std::vector<int>{0, 1}, test_metadata(40), 2, std::chrono::minutes(10), "", {},
                                leaving.get_token(), std::chrono::seconds(60));
  survivor.join();
  EXPECT_EQ(committed.step_dir, dir / "step-000000040");
  EXPECT_EQ(read_latest(dir), 40);
}

TEST(Checkpoint, AsyncWriterErrorSurfacesOnTheNextCall) {
  const fs::path base = test_dir();
  const fs::path blocked = base / "not-a-directory";
  std::ofstream(blocked) << "a file where the checkpoint directory should be";
  const auto model = small_model();
  RankState st = rank_state(model, row_tiles, 0, 1, 1);
  {
    AsyncSaver saver(blocked, 0);
    saver.save(1, st.slices);  // returns: the failure happens on the writer thread
    try {
      saver.wait();
      FAIL() << "the writer error was lost";
    } catch (const CheckpointError& e) {
      EXPECT_TRUE(contains_text(e.what(), blocked.string())) << e.what();
    }
    EXPECT_NO_THROW(saver.wait());  // reported once
    // Unobserved, the error is rethrown by the next save().
    saver.save(2, st.slices);
    EXPECT_THROW(saver.save(3, st.slices), CheckpointError);
    while (!saver.poll()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // And by poll().
  AsyncSaver saver(blocked, 0);
  saver.save(4, st.slices);
  bool threw = false;
  for (int i = 0; i < 10000 && !threw; ++i) {
    try {
      if (saver.poll()) break;
    } catch (const CheckpointError&) {
      threw = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(threw);
}

TEST(Checkpoint, FallbackToThePreviousStepOnlyWhenAsked) {
  const fs::path dir = test_dir();
  const auto model = small_model();
  save_step(dir, 10, 2, row_tiles);
  save_step(dir, 20, 2, row_tiles);
  const Rect r = row_tiles(model[0].shape, 2)[0];
  flip_data_byte(dir / "step-000000020" / "shard-00000.h5", extract(global_values(model, 0, 20), model[0].shape, r));
  RankTargets t = rank_targets(model, col_tiles, 0, 2);
  EXPECT_THROW(load_checkpoint(dir, t.reads), ChecksumMismatch);
  LoadOptions fb;
  fb.fallback = true;
  const LoadResult res = load_checkpoint(dir, t.reads, fb);
  EXPECT_EQ(res.step, 10);
  EXPECT_TRUE(res.fell_back);
  ASSERT_EQ(res.skipped.size(), 1u);
  EXPECT_TRUE(contains_text(res.skipped[0], "step-000000020: checksum mismatch in")) << res.skipped[0];
  EXPECT_TRUE(contains_text(res.skipped[0], "shard-00000.h5")) << res.skipped[0];
  EXPECT_EQ(res.metadata.data_cursor, 10 * 64);
  expect_rank_values(model, t, 10);
  // A missing shard file: refused by name, and the same fallback.
  fs::remove(dir / "step-000000020" / "shard-00001.h5");
  try {
    CheckpointReader reader = CheckpointReader::open_latest(dir);
    FAIL() << "a step with a missing shard opened";
  } catch (const MissingShard& e) {
    EXPECT_TRUE(contains_text(e.what(), "shard-00001.h5 (rank 1)")) << e.what();
  }
  EXPECT_EQ(load_checkpoint(dir, t.reads, fb).step, 10);
  // Every step broken: one error listing each.
  flip_data_byte(dir / "step-000000010" / "shard-00000.h5", extract(global_values(model, 0, 10), model[0].shape, r));
  try {
    load_checkpoint(dir, t.reads, fb);
    FAIL() << "nothing loadable, yet it loaded";
  } catch (const CheckpointError& e) {
    EXPECT_TRUE(contains_text(e.what(), "no loadable checkpoint")) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "step-000000020: ")) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "step-000000010: ")) << e.what();
  }
}

TEST(Checkpoint, SavingACommittedStepAgainReplacesItWhole) {
  const fs::path dir = test_dir();
  save_step(dir, 8, 2, row_tiles);
  // Same step number, other data (step 9's values) and another tiling.
  const auto model = small_model();
  std::vector<RankState> states;
  for (int r = 0; r < 3; ++r) {
    states.push_back(rank_state(model, col_tiles, r, 3, 9));
    write_shard(dir, 8, r, states.back().slices);
  }
  const std::vector<int> ranks = {0, 1, 2};
  const CommitResult c = commit(dir, 8, ranks, test_metadata(9), 3, std::chrono::seconds(5));
  EXPECT_TRUE(c.replaced_existing);
  expect_load(dir, row_tiles, 2, 8, {}, 9);
  EXPECT_EQ(CheckpointReader::open_latest(dir).shards().size(), 3u);
}

TEST(Checkpoint, LatestHoldingANulByteShowsItEscapedWithWhatFollows) {
  const fs::path dir = test_dir();
  fs::create_directories(dir);
  std::ofstream(dir / "latest", std::ios::binary) << std::string("step-0000") + '\0' + "garbage\n";
  try {
    read_latest(dir);
    FAIL() << "a latest holding a NUL byte was read";
  } catch (const FormatError& e) {
    // what() is a C string: an unescaped NUL would end the message at "step-0000".
    const std::string message = e.what();
    EXPECT_TRUE(contains_text(message, "holds 'step-0000\\x00garbage\\x0a', not a step directory name")) << message;
    EXPECT_EQ(message.find('\0'), std::string::npos) << message;
  }
}

TEST(Checkpoint, LatestFullOfBytesIsShownBoundedAndCounted) {
  const fs::path dir = test_dir();
  fs::create_directories(dir);
  std::ofstream(dir / "latest", std::ios::binary) << std::string(100000, '\x01');
  try {
    read_latest(dir);
    FAIL() << "a latest of 100000 bytes was read";
  } catch (const FormatError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(contains_text(message, "\\x01... (100000 bytes in all)")) << message.substr(0, 300);
    EXPECT_LT(message.size(), 2000u);
  }
}

TEST(Checkpoint, LatestNamingAMissingStepIsDamageNotAFreshStart) {
  const fs::path dir = test_dir();
  save_step(dir, 4, 1, row_tiles);
  save_step(dir, 5, 1, row_tiles);
  fs::remove_all(dir / "step-000000005");
  RankTargets t = rank_targets(small_model(), row_tiles, 0, 1);
  try {
    load_checkpoint(dir, t.reads);
    FAIL() << "a missing latest step loaded";
  } catch (const NoCheckpoint& e) {
    FAIL() << "reported as 'no checkpoint', which means start fresh: " << e.what();
  } catch (const MissingShard& e) {
    EXPECT_TRUE(contains_text(e.what(), "`latest` names it")) << e.what();
  }
  LoadOptions fb;
  fb.fallback = true;
  EXPECT_EQ(load_checkpoint(dir, t.reads, fb).step, 4);
  LoadOptions absent;
  absent.step = 7;
  EXPECT_THROW(load_checkpoint(dir, t.reads, absent), NoCheckpoint);
}

TEST(Checkpoint, DataParallelReplicasWriteEachRectangleOnceWithAssignWriters) {
  // 2 data replicas x 2 tensor-parallel ranks: ranks 0 and 2 hold tile 0, ranks 1 and 3
  // tile 1. Every rank writes a shard (some of them empty) with only its assigned slices.
  const fs::path dir = test_dir();
  const auto model = small_model();
  std::vector<RankState> states;
  std::vector<std::vector<HeldSlice>> held;
  for (int r = 0; r < 4; ++r) {
    states.push_back(rank_state(model, row_tiles, r % 2, 2, 50));
    held.emplace_back();
    for (const TensorSlice& s : states.back().slices) held.back().push_back(HeldSlice{s.name, s.global_shape, s.rect});
  }
  const auto writes = assign_writers(held);
  size_t written = 0;
  for (int r = 0; r < 4; ++r) {
    std::vector<TensorSlice> mine;
    for (size_t i : writes[static_cast<size_t>(r)]) mine.push_back(states[static_cast<size_t>(r)].slices[i]);
    written += mine.size();
    write_shard(dir, 50, r, mine);
  }
  EXPECT_EQ(written, 2 * model.size());
  const std::vector<int> ranks = {0, 1, 2, 3};
  commit(dir, 50, ranks, test_metadata(50), 2, std::chrono::seconds(5));
  expect_load(dir, col_tiles, 3, 50);
  EXPECT_TRUE(verify_checkpoint(dir / "step-000000050").ok());
}

TEST(Checkpoint, RemoveUncommittedClearsTemporariesOnly) {
  const fs::path dir = test_dir();
  save_step(dir, 1, 1, row_tiles);
  RankState st = rank_state(small_model(), row_tiles, 0, 1, 2);
  write_shard(dir, 2, 0, st.slices);
  ASSERT_TRUE(fs::exists(tmp_step_path(dir, 2)));
  remove_uncommitted(dir);
  EXPECT_FALSE(fs::exists(tmp_step_path(dir, 2)));
  expect_load(dir, row_tiles, 1, 1);
}

TEST(Checkpoint, RetentionLeavesProtectedStepsAloneAndDoesNotCountThem) {
  const fs::path dir = test_dir();
  for (int64_t step : {10, 20, 30}) save_step(dir, step, 2, row_tiles, /*keep=*/5);
  // A run resumed from 20 (30 did not load): its saves keep 30 whatever `keep` says, and
  // `keep` counts its own steps only.
  const std::vector<int64_t> kept = {30};
  write_latest(dir, 20);
  EXPECT_EQ(apply_retention(dir, 1, 21, kept), (std::vector<int64_t>{10}));
  EXPECT_EQ(committed_steps(dir), (std::vector<int64_t>{20, 30}));
  RankState st = rank_state(small_model(), row_tiles, 0, 1, 21);
  write_shard(dir, 21, 0, st.slices);
  const CommitResult c = commit(dir, 21, std::vector<int>{0}, test_metadata(21), 1, std::chrono::seconds(5), "", kept);
  EXPECT_EQ(c.removed_steps, (std::vector<int64_t>{20}));
  EXPECT_EQ(committed_steps(dir), (std::vector<int64_t>{21, 30}));
  // Past it: the run's own steps are still the ones retention counts.
  for (int64_t step : {31, 32}) {
    RankState next = rank_state(small_model(), row_tiles, 0, 1, step);
    write_shard(dir, step, 0, next.slices);
    commit(dir, step, std::vector<int>{0}, test_metadata(step), 1, std::chrono::seconds(5), "", kept);
  }
  EXPECT_EQ(committed_steps(dir), (std::vector<int64_t>{30, 32}));
  // Unprotected, the same retention deletes the step the run did not write.
  EXPECT_EQ(apply_retention(dir, 1, 33), (std::vector<int64_t>{30}));
  EXPECT_EQ(committed_steps(dir), (std::vector<int64_t>{32}));
}

TEST(Checkpoint, ALostLatestIsRecoveredAsTheNewestStepThatVerifies) {
  const fs::path dir = test_dir();
  const auto model = small_model();
  EXPECT_FALSE(recover_latest(dir));  // nothing committed: a fresh start
  for (int64_t step : {10, 20, 30}) save_step(dir, step, 2, row_tiles, /*keep=*/5);
  EXPECT_FALSE(recover_latest(dir));  // `latest` names a step: nothing to recover
  fs::remove(dir / "latest");
  std::optional<LatestRecovery> r = recover_latest(dir);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->step, 30);
  EXPECT_EQ(r->why, "`latest` is missing");
  EXPECT_TRUE(r->rejected.empty());
  // The newest step's data is damaged: the one before it, naming why 30 was skipped.
  const Rect rect = row_tiles(model[0].shape, 2)[0];
  flip_data_byte(dir / "step-000000030" / "shard-00000.h5", extract(global_values(model, 0, 30), model[0].shape, rect));
  std::ofstream(dir / "latest") << "garbage\n";
  r = recover_latest(dir);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->step, 20);
  EXPECT_TRUE(contains_text(r->why, "`latest` is unreadable")) << r->why;
  ASSERT_EQ(r->rejected.size(), 1u);
  EXPECT_TRUE(contains_text(r->rejected[0], "step-000000030: ")) << r->rejected[0];
  EXPECT_TRUE(contains_text(r->rejected[0], "shard-00000.h5")) << r->rejected[0];
  // No step verifies: an error listing each, never "nothing to resume".
  fs::remove(dir / "step-000000020" / "index.h5");
  fs::remove(dir / "step-000000010" / "index.h5");
  try {
    recover_latest(dir);
    FAIL() << "recovered a step although none verifies";
  } catch (const CheckpointError& e) {
    for (const char* step : {"step-000000030: ", "step-000000020: ", "step-000000010: "})
      EXPECT_TRUE(contains_text(e.what(), step)) << e.what();
  }
}

// Steps 10 and 20 saved at row tiles, and step 20's index.h5 removed (`latest` names it);
// returns what rank 0 of 2 at column tiles reads.
RankTargets steps_whose_newest_has_no_index(const fs::path& dir) {
  save_step(dir, 10, 2, row_tiles);
  save_step(dir, 20, 2, row_tiles);
  fs::remove(dir / "step-000000020" / "index.h5");
  return rank_targets(small_model(), col_tiles, 0, 2);
}

TEST(Checkpoint, FallbackSkipsAStepWithoutIndexAndALatestNamingNoStep) {
  const fs::path dir = test_dir();
  RankTargets t = steps_whose_newest_has_no_index(dir);
  EXPECT_THROW(load_checkpoint(dir, t.reads), CheckpointError);
  LoadOptions fb;
  fb.fallback = true;
  EXPECT_EQ(load_checkpoint(dir, t.reads, fb).step, 10);
  write_latest(dir, 40);
  EXPECT_THROW(load_checkpoint(dir, t.reads), MissingShard);
  const LoadResult res = load_checkpoint(dir, t.reads, fb);
  EXPECT_EQ(res.step, 10);
  EXPECT_TRUE(res.fell_back);
}

TEST(Checkpoint, LoadChecksEachStepBeforeReadingAndARefusalIsNeverFallenBackFrom) {
  const fs::path dir = test_dir();
  RankTargets t = steps_whose_newest_has_no_index(dir);
  LoadOptions options;
  options.fallback = true;
  std::vector<int64_t> checked;
  options.check = [&checked](const CheckpointReader& reader) { checked.push_back(reader.step()); };
  EXPECT_EQ(load_checkpoint(dir, t.reads, options).step, 10);
  EXPECT_EQ(checked, (std::vector<int64_t>{10}));  // 20 did not open
  options.check = [](const CheckpointReader& reader) {
    throw RequestMismatch(reader.step_dir().string(), "test", "another model");
  };
  EXPECT_THROW(load_checkpoint(dir, t.reads, options), RequestMismatch);
}

}  // namespace
}  // namespace axonn
