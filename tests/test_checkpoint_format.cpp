// Format version 3's checksum tiles on real files: what the writer stores (one HDF5 chunk per
// tile), that a reshard reads and verifies only the tiles it needs on every read route (tile
// by tile from the chunks, HDF5 for shards stored otherwise), that a flipped byte is caught on
// each, and that version 2 steps (the same tiles, contiguous) and version 1 steps (whole-row
// blocks, contiguous) still load, plan and verify. Also the raw reads' own edge cases.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/index_file.hpp"
#include "checkpoint/inspect.hpp"
#include "checkpoint/raw_read.hpp"
#include "checkpoint/read_plan.hpp"
#include "checkpoint/rect.hpp"
#include "checkpoint/shard_meta.hpp"
#include "checkpoint/step_dir.hpp"
#include "checkpoint/verify.hpp"
#include "checkpoint_test_model.hpp"
#include "process_helpers.hpp"

namespace axonn {
namespace {

using namespace ckpt_test;

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// The small model and one tensor of several tiles: [2048, 1536] float32 = 12 MiB, saved by 2
// ranks as row tiles of [1024, 1536] (6 MiB), each cut into 2 x 1 tiles... of 1024 rows x 768
// columns (the writer splits columns first).
constexpr size_t kBig = 6;  // its index in tiled_model()
std::vector<TensorSpec> tiled_model() {
  auto model = small_model();
  model.push_back({"big", {2048, 1536}});
  return model;
}

// Loads `model` at (tiling, world) through `options`, one reader per rank, bitwise.
void expect_model_load(const fs::path& dir, const std::vector<TensorSpec>& model, const Tiling& tiling, int world,
                       int64_t step, const ReadOptions& options) {
  for (int r = 0; r < world; ++r) {
    RankTargets t = rank_targets(model, tiling, r, world);
    CheckpointReader reader = CheckpointReader::open_latest(dir);
    for (const SliceRead& s : t.reads) reader.read(s, options);
    expect_rank_values(model, t, step);
  }
}

const ReadOptions kVerified{ReadPath::shards, true}, kUnverified{ReadPath::shards, false},
    kVds{ReadPath::index_vds, true};

// Rewrites every dataset of every shard of `step` with h5py, data and attributes kept, created
// with `create_options` (h5py create_dataset keywords): "" stores them contiguous, as format
// versions 1 and 2 did; "chunks=True, compression='gzip'" as a user's tool might. The caller
// skips without h5py (test::python_has_h5py).
void rewrite_shard_datasets(const fs::path& step, const std::string& create_options) {
  const fs::path script = step.parent_path() / "rewrite_datasets.py";
  std::ofstream(script) << "import sys, h5py\n"
                           "with h5py.File(sys.argv[1], 'r+') as f:\n"
                           "    for name in [n for n in f if n.startswith('slice-')]:\n"
                           "        data, attrs = f[name][...], dict(f[name].attrs)\n"
                           "        del f[name]\n"
                           "        ds = f.create_dataset(name, data=data, "
                        << create_options
                        << ")\n"
                           "        for k, v in attrs.items():\n"
                           "            ds.attrs[k] = v\n";
  for (const auto& entry : fs::directory_iterator(step)) {
    if (entry.path().filename().string().rfind("shard-", 0) != 0) continue;
    const std::string cmd = "/usr/bin/python3 " + script.string() + " " + entry.path().string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
}

// `format_version` = `version` in index.h5 and every shard of `step`.
void set_format_version(const fs::path& step, int64_t version) {
  for (const auto& entry : fs::directory_iterator(step)) {
    const std::string f = entry.path().string();
    h5::Handle file = h5::open_file_readwrite(entry.path());
    h5::Attrs(file.get(), f).set_i64(format::kAttrVersion, version);
    file.close(f, "close");
  }
}

// How the datasets of `shard` are stored.
std::vector<h5::RawStorage> shard_storage(const fs::path& shard) {
  const std::string f = shard.string();
  h5::Handle file = h5::open_file_readonly(shard);
  std::vector<h5::RawStorage> out;
  for (const ShardSlice& s : read_shard_meta(shard).slices) {
    h5::Handle ds = h5::open_dataset(file.get(), s.dataset, f);
    out.push_back(h5::raw_storage(ds.get(), f));
  }
  return out;
}

// What each rank of col_tiles(world) reads of "big" alone: the reader's count and the plan's.
std::vector<std::pair<int64_t, int64_t>> big_column_reads(const fs::path& dir, int world) {
  const auto model = tiled_model();
  std::vector<std::vector<RectRequest>> requests(static_cast<size_t>(world));
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int r = 0; r < world; ++r)
    requests[static_cast<size_t>(r)].push_back(
        RectRequest{"big", col_tiles(model[kBig].shape, world)[static_cast<size_t>(r)]});
  CheckpointReader probe = CheckpointReader::open_latest(dir);
  const ReadPlan plan = plan_reads(probe.tensors(), requests);
  for (int r = 0; r < world; ++r) {
    CheckpointReader reader = CheckpointReader::open_latest(dir);
    const Rect rect = requests[static_cast<size_t>(r)][0].rect;
    std::vector<float> dst(static_cast<size_t>(element_count(rect)));
    reader.read(SliceRead{"big", model[kBig].shape, rect, dst.data()});
    out.emplace_back(reader.bytes_read(), plan.ranks[static_cast<size_t>(r)].bytes_read);
  }
  return out;
}

// Every rank of four new tilings loads `step` bitwise on every read route: whole tiles of half
// the columns, partial tiles (thirds), quarter rows x half columns, uneven rows.
void expect_loads_on_every_route(const fs::path& dir, const std::vector<TensorSpec>& model, int64_t step) {
  for (const ReadOptions& o : {kVerified, kUnverified, kVds}) {
    expect_model_load(dir, model, col_tiles, 2, step, o);
    expect_model_load(dir, model, col_tiles, 3, step, o);
    expect_model_load(dir, model, block_tiles, 4, step, o);
    expect_model_load(dir, model, row_tiles, 3, step, o);
  }
}

// Each rank of col_tiles(world) reads `bytes` of "big", as its plan predicts.
void expect_big_column_reads(const fs::path& dir, int world, int64_t bytes) {
  for (const auto& [read, planned] : big_column_reads(dir, world)) {
    EXPECT_EQ(read, bytes);
    EXPECT_EQ(planned, read);
  }
}

TEST(CheckpointFormat, Version3StoresEachTileAsAChunkAndAColumnReshardReadsOnlyThoseItNeeds) {
  const fs::path dir = test_dir();
  const auto model = tiled_model();
  save_step(dir, 3, 2, row_tiles, 3, model);
  const CheckpointReader reader = CheckpointReader::open_latest(dir);
  EXPECT_EQ(reader.format_version(), 3);
  for (const StoredRect& s : reader.tensor("big").sources) {
    EXPECT_EQ(s.rows_per_block, 1024);
    EXPECT_EQ(s.cols_per_block, 768);
    EXPECT_EQ(s.block_hashes.size(), 2u);
  }
  // The shard says the same as the index.
  const ShardMeta meta = read_shard_meta(dir / "step-000000003" / "shard-00001.h5");
  EXPECT_EQ(meta.format_version, 3);
  // Every dataset is stored in chunks of its tile shape; "big"'s are 1024 x 768.
  const std::vector<h5::RawStorage> storage = shard_storage(dir / "step-000000003" / "shard-00001.h5");
  ASSERT_EQ(storage.size(), meta.slices.size());
  for (size_t k = 0; k < storage.size(); ++k) {
    const ShardSlice& slice = meta.slices[k];
    EXPECT_EQ(storage[k].kind, h5::RawStorage::chunked) << slice.tensor;
    EXPECT_EQ(storage[k].chunk_dims, tile_chunk_shape(choose_block_grid(slice.rect), slice.rect)) << slice.tensor;
    if (slice.tensor == "big") {
      EXPECT_EQ(storage[k].chunk_dims, (Shape{1024, 768}));
    }
  }
  EXPECT_EQ(meta.slices.at(kBig).cols_per_block, 768);
  EXPECT_EQ(meta.slices.at(kBig).block_hashes, reader.tensor("big").sources.at(1).block_hashes);

  expect_loads_on_every_route(dir, model, 3);
  for (const ReadOptions& o : {kVerified, kUnverified, kVds}) expect_model_load(dir, model, row_tiles, 1, 3, o);
  // Half the columns: exactly the wanted bytes, the plan agreeing.
  expect_big_column_reads(dir, 2, 2048 * 768 * 4);
  // A quarter of the columns (384) still reads whole 768-column tiles: 2x, predicted.
  expect_big_column_reads(dir, 4, 2048 * 768 * 4);
  EXPECT_TRUE(verify_checkpoint(dir / "step-000000003").ok());
  EXPECT_TRUE(has(inspect_checkpoint(reader), "format AXONNCKP v3")) << inspect_checkpoint(reader);
}

TEST(CheckpointFormat, AFlippedByteIsCaughtOnEveryReadRouteAndNamedByItsTile) {
  const fs::path dir = test_dir();
  const auto model = tiled_model();
  save_step(dir, 4, 2, row_tiles, 3, model);
  const fs::path shard = dir / "step-000000004" / "shard-00001.h5";
  // Rank 1's first row of "big": its tile of rows 0..1023, columns 0..767.
  flip_data_byte(shard, extract(global_values(model, kBig, 4), model[kBig].shape, row_tiles(model[kBig].shape, 2)[1]));
  auto load = [&](const Tiling& tiling, int world, int rank) {
    RankTargets t = rank_targets(model, tiling, rank, world);
    CheckpointReader reader = CheckpointReader::open_latest(dir);
    for (const SliceRead& s : t.reads) reader.read(s);
  };
  struct Route {
    const char* what;
    Tiling tiling;
    int world, rank;
  };
  const Route refused[] = {
      {"tile columns", col_tiles, 2, 0},       // the tile's own columns: its chunk into dst
      {"partial tile", col_tiles, 3, 0},       // columns 0..511: the tile through a buffer
      {"whole rows", row_tiles, 1, 0},         // every tile, each its chunk into dst
      {"rows into wider", block_tiles, 4, 2},  // rows 1024..1535, columns 0..767
  };
  for (const Route& r : refused) {
    try {
      load(r.tiling, r.world, r.rank);
      ADD_FAILURE() << r.what << ": a corrupt tile loaded";
    } catch (const ChecksumMismatch& e) {
      EXPECT_EQ(e.file(), shard.string()) << r.what;
      EXPECT_TRUE(has(e.what(), "tensor 'big'")) << e.what();
      EXPECT_TRUE(has(e.what(), "its rows 0..1023, columns 0..767")) << e.what();
    }
  }
  // Requests that need none of that tile load: its neighbour columns, and rank 0's rows.
  EXPECT_NO_THROW(load(col_tiles, 2, 1));
  EXPECT_NO_THROW(load(row_tiles, 2, 0));
  const VerifyReport report = verify_checkpoint(dir / "step-000000004");
  EXPECT_FALSE(report.ok());
  EXPECT_TRUE(has(format_verify_report(report), "1 of 2 blocks differ from the index, rows 0..1023 columns 0..767"))
      << format_verify_report(report);
}

TEST(CheckpointFormat, Version2StepsLoadPlanAndVerifyFromTheirContiguousTiles) {
  if (!test::python_has_h5py())
    GTEST_SKIP() << "/usr/bin/python3 cannot import h5py and numpy: apt-get install python3-h5py";
  const fs::path dir = test_dir();
  const auto model = tiled_model();
  save_step(dir, 9, 2, row_tiles, 3, model);
  const fs::path step = dir / "step-000000009";
  rewrite_shard_datasets(step, "");  // contiguous, as version 2 stored them
  set_format_version(step, 2);
  for (const h5::RawStorage& st : shard_storage(step / "shard-00000.h5")) EXPECT_EQ(st.kind, h5::RawStorage::contiguous);
  const CheckpointReader reader = CheckpointReader::open_latest(dir);
  EXPECT_EQ(reader.format_version(), 2);
  expect_loads_on_every_route(dir, model, 9);
  // The same tiles as version 3: half the columns read exactly those bytes.
  expect_big_column_reads(dir, 2, 2048 * 768 * 4);
  EXPECT_TRUE(verify_checkpoint(step).ok());
  flip_data_byte(step / "shard-00001.h5",
                 extract(global_values(model, kBig, 9), model[kBig].shape, row_tiles(model[kBig].shape, 2)[1]));
  RankTargets t = rank_targets(model, col_tiles, 0, 2);
  EXPECT_THROW(load_checkpoint(dir, t.reads), ChecksumMismatch);
  EXPECT_TRUE(has(format_verify_report(verify_checkpoint(step)), "rows 0..1023 columns 0..767"))
      << format_verify_report(verify_checkpoint(step));
}

TEST(CheckpointFormat, Version1StepsLoadPlanAndVerifyWithTheirRowBlocks) {
  if (!test::python_has_h5py())
    GTEST_SKIP() << "/usr/bin/python3 cannot import h5py and numpy: apt-get install python3-h5py";
  const fs::path dir = test_dir();
  const auto model = tiled_model();
  save_step(dir, 5, 2, row_tiles, 3, model);
  const fs::path step = dir / "step-000000005";
  rewrite_shard_datasets(step, "");  // contiguous, as version 1 stored them
  rewrite_as_format_v1(step);
  {
    const CheckpointReader reader = CheckpointReader::open_latest(dir);
    EXPECT_EQ(reader.format_version(), 1);
    for (const StoredRect& s : reader.tensor("big").sources) {
      EXPECT_EQ(s.rows_per_block, 682);  // 4 MiB / 6 KiB rows
      EXPECT_EQ(s.cols_per_block, 1536);
      EXPECT_EQ(s.block_hashes.size(), 2u);
    }
    EXPECT_TRUE(has(inspect_checkpoint(reader), "format AXONNCKP v1")) << inspect_checkpoint(reader);
  }
  EXPECT_EQ(read_shard_meta(step / "shard-00000.h5").slices.at(kBig).cols_per_block, 1536);
  expect_loads_on_every_route(dir, model, 5);
  // Row blocks: half the columns still read every row, as version 1 did; the plan agrees.
  expect_big_column_reads(dir, 2, 2048 * 1536 * 4);
  const VerifyReport good = verify_checkpoint(step);
  EXPECT_TRUE(good.ok()) << format_verify_report(good);

  // The next save in the same directory is version 3; the version 1 step stays loadable.
  save_step(dir, 6, 2, block_tiles, 3, model);
  EXPECT_EQ(CheckpointReader::open_latest(dir).format_version(), 3);
  LoadOptions older;
  older.step = 5;
  RankTargets t = rank_targets(model, col_tiles, 1, 2);
  EXPECT_EQ(load_checkpoint(dir, t.reads, older).step, 5);
  expect_rank_values(model, t, 5);

  // Version 1 shards committed by this build (an upgrade between a save's shards and its
  // commit): indexed as version 3, their row blocks as full-width tiles.
  for (int r = 0; r < 2; ++r) {
    RankState st = rank_state(model, col_tiles, r, 2, 7);
    write_shard(dir, 7, r, st.slices);
  }
  rewrite_shard_datasets(tmp_step_path(dir, 7), "");
  rewrite_as_format_v1(tmp_step_path(dir, 7));
  EXPECT_EQ(read_shard_meta(tmp_step_path(dir, 7) / "shard-00000.h5").format_version, 1);
  commit(dir, 7, std::vector<int>{0, 1}, test_metadata(7), 5, std::chrono::seconds(10));
  {
    const CheckpointReader mixed = CheckpointReader::open_latest(dir);
    EXPECT_EQ(mixed.format_version(), 3);
    EXPECT_EQ(mixed.tensor("big").sources.at(0).cols_per_block, 768);   // all of its columns
    EXPECT_EQ(mixed.tensor("big").sources.at(0).rows_per_block, 1365);  // 4 MiB / 3 KiB rows
  }
  expect_model_load(dir, model, block_tiles, 4, 7, kVerified);
  EXPECT_TRUE(verify_checkpoint(dir / "step-000000007").ok());

  // Corruption in a version 1 step is caught by its row blocks.
  flip_data_byte(step / "shard-00000.h5",
                 extract(global_values(model, kBig, 5), model[kBig].shape, row_tiles(model[kBig].shape, 2)[0]));
  EXPECT_THROW(load_checkpoint(dir, t.reads, older), ChecksumMismatch);
  EXPECT_TRUE(has(format_verify_report(verify_checkpoint(step)), "rows 0..681 columns 0..1535"))
      << format_verify_report(verify_checkpoint(step));
}

// ---- committed fixtures: a step of every format version an axonn wrote ----
//
// tests/fixtures/checkpoint-vN/ holds step 3 of small_model() saved by 2 ranks as row tiles
// (the test metadata: layout, model config, cursor, RNG bytes, meta keys), format version N,
// written once by DISABLED_WriteTheFixtures below and committed. The tests read those bytes,
// not what this build writes, so a change in how a checksum, an attribute or a dataset is
// written that would orphan the checkpoints users have fails here. Regenerate only for a new
// format version (add checkpoint-vN+1; never rewrite an older one):
//   build/tests/test_checkpoint_format --gtest_also_run_disabled_tests --gtest_filter='*WriteTheFixtures'
// (writes tests/fixtures/checkpoint-v1, -v2 and -v3).
const fs::path kFixtures = fs::path(test::kSourceDir) / "tests" / "fixtures";
constexpr int64_t kFixtureStep = 3;

TEST(CheckpointFixtures, DISABLED_WriteTheFixtures) {
  ASSERT_TRUE(test::python_has_h5py());
  for (const int version : {1, 2, 3}) {
    const fs::path dir = kFixtures / ("checkpoint-v" + std::to_string(version));
    fs::remove_all(dir);
    save_step(dir, kFixtureStep, 2, row_tiles);
    const fs::path step = dir / "step-000000003";
    if (version < 3) rewrite_shard_datasets(step, "");  // contiguous, as versions 1 and 2 stored them
    if (version == 2) set_format_version(step, 2);
    if (version == 1) rewrite_as_format_v1(step);
    fs::remove(dir / "rewrite_datasets.py");
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().filename().string().find("lock") != std::string::npos) fs::remove_all(entry.path());
  }
}

// Each fixture, copied (a reader takes the directory's lock), opens as its version, verifies,
// and loads at other tilings with the values small_model() had at step 3.
TEST(CheckpointFixtures, EveryFormatVersionAnAxonnWroteLoadsAndVerifies) {
  for (const int version : {1, 2, 3}) {
    SCOPED_TRACE("version " + std::to_string(version));
    const fs::path dir = test_dir() / ("v" + std::to_string(version));
    fs::create_directories(dir);
    fs::copy(kFixtures / ("checkpoint-v" + std::to_string(version)), dir, fs::copy_options::recursive);
    const CheckpointReader reader = CheckpointReader::open_latest(dir);
    EXPECT_EQ(reader.format_version(), version);
    EXPECT_EQ(reader.step(), kFixtureStep);
    EXPECT_EQ(reader.metadata().data_cursor, test_metadata(kFixtureStep).data_cursor);
    EXPECT_EQ(reader.metadata().model_config, test_metadata(kFixtureStep).model_config);
    const VerifyReport report = verify_checkpoint(dir / "step-000000003");
    EXPECT_TRUE(report.ok()) << format_verify_report(report);
    for (const ReadOptions& o : {kVerified, kVds}) {
      expect_model_load(dir, small_model(), col_tiles, 3, kFixtureStep, o);
      expect_model_load(dir, small_model(), block_tiles, 4, kFixtureStep, o);
    }
  }
}

// The fixtures, and a step this build writes, against checkpoint/README.md by code that shares
// nothing with ours: h5py and python3-xxhash (tests/checkpoint_xxh3_check.py).
TEST(CheckpointFixtures, AnIndependentXxh3AndH5pyFindEveryHashAndAttributeAsTheSpecSays) {
  ASSERT_EQ(std::system("/usr/bin/python3 -c 'import h5py, numpy, xxhash' 2>/dev/null"), 0)
      << "/usr/bin/python3 needs h5py, numpy and xxhash: scripts/install-deps.sh installs python3-h5py, python3-xxhash";
  const fs::path fresh = test_dir();
  save_step(fresh, 4, 2, block_tiles, 3, tiled_model());  // "big" in several tiles per rectangle
  std::vector<std::pair<fs::path, int>> steps = {{fresh / "step-000000004", 3}};
  for (const int version : {1, 2, 3})
    steps.emplace_back(kFixtures / ("checkpoint-v" + std::to_string(version)) / "step-000000003", version);
  for (const auto& [step, version] : steps) {
    const auto r = test::run_command("/usr/bin/python3 " + test::kSourceDir + "/tests/checkpoint_xxh3_check.py " +
                                     step.string() + " " + std::to_string(version), 120);
    EXPECT_EQ(r.code, 0) << step << "\n" << r.output;
    EXPECT_TRUE(has(r.output, "ok: format version " + std::to_string(version))) << r.output;
  }
}

TEST(CheckpointFormat, UnknownVersionsAreRefusedByIndexAndShard) {
  const fs::path dir = test_dir();
  save_step(dir, 7, 1, row_tiles);
  const fs::path shard = dir / "step-000000007" / "shard-00000.h5";
  {
    h5::Handle f = h5::open_file_readwrite(shard);
    h5::Attrs(f.get(), shard.string()).set_i64(format::kAttrVersion, 4);
    f.close(shard.string(), "close");
  }
  try {
    read_shard_meta(shard);
    FAIL() << "a version 4 shard was read";
  } catch (const FormatError& e) {
    EXPECT_TRUE(has(e.what(), "format version 4; this build reads versions 1, 2 and 3 only")) << e.what();
  }
  const VerifyReport report = verify_checkpoint(dir / "step-000000007");
  EXPECT_FALSE(report.ok());
  EXPECT_TRUE(has(format_verify_report(report), "format version 4")) << format_verify_report(report);
}

// Rewrites attribute `name` of tensor `tensor` in `index` (the tests' stand-in for damage).
void patch_tensor_attr(const fs::path& index, const std::string& tensor, const std::string& name,
                       const std::vector<int64_t>& values) {
  h5::Handle f = h5::open_file_readwrite(index);
  h5::Handle ds = h5::open_dataset(f.get(), tensor, index.string());
  h5::Attrs(ds.get(), index.string()).set_i64s(name, values);
  ds.close(index.string(), "close dataset");
  f.close(index.string(), "close");
}

std::string read_index_error(const fs::path& index) {
  try {
    read_index(index);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(read)";
}

TEST(CheckpointFormat, IndexRectanglesAreRefusedWhenOutsideTheTensorHoweverFarOrWhenTheyOverlapOrLeaveGaps) {
  const fs::path dir = test_dir();
  save_step(dir, 7, 2, row_tiles);  // wte [25, 16]: rows 0..12 on rank 0, 13..24 on rank 1, one block each
  const fs::path index = dir / "step-000000007" / "index.h5";
  const std::string wte = index.string() + ": tensor 'wte': ";
  // An offset so large that offset + count wraps around.
  patch_tensor_attr(index, "wte", format::kAttrSourceOffset, {0, 0, INT64_MAX - 5, 0});
  std::string e = read_index_error(index);
  EXPECT_TRUE(has(e, wte + "tensor 'wte': rectangle offset [9223372036854775802, 0] count [12, 16] does not lie "
                           "inside global shape [25, 16]"))
      << e;
  // A negative offset, a zero count: the format's rectangles lie inside the tensor with
  // counts of at least 1 (checkpoint/README.md).
  patch_tensor_attr(index, "wte", format::kAttrSourceOffset, {0, 0, 13, -1});
  e = read_index_error(index);
  EXPECT_TRUE(has(e, wte + "tensor 'wte': rectangle offset [13, -1] count [12, 16] does not lie inside")) << e;
  patch_tensor_attr(index, "wte", format::kAttrSourceOffset, {0, 0, 13, 0});
  patch_tensor_attr(index, "wte", format::kAttrSourceCount, {13, 16, 12, 0});
  e = read_index_error(index);
  EXPECT_TRUE(has(e, wte + "tensor 'wte': rectangle offset [13, 0] count [12, 0] does not lie inside")) << e;
  // Row 13 stored twice (the block extents follow, so the checksums stay consistent).
  patch_tensor_attr(index, "wte", format::kAttrSourceCount, {14, 16, 12, 16});
  patch_tensor_attr(index, "wte", format::kAttrSourceRowsPerBlock, {14, 12});
  e = read_index_error(index);
  EXPECT_TRUE(has(e, wte + "stored rectangles offset [0, 0] count [14, 16] and offset [13, 0] count [12, 16] overlap"))
      << e;
  // Row 12 stored nowhere.
  patch_tensor_attr(index, "wte", format::kAttrSourceCount, {12, 16, 12, 16});
  patch_tensor_attr(index, "wte", format::kAttrSourceRowsPerBlock, {12, 12});
  e = read_index_error(index);
  EXPECT_TRUE(has(e, wte + "its stored rectangles hold 384 of its 400 elements; the index is corrupt")) << e;
  // A tensor listed twice would be counted twice.
  patch_tensor_attr(index, "wte", format::kAttrSourceCount, {13, 16, 12, 16});
  patch_tensor_attr(index, "wte", format::kAttrSourceRowsPerBlock, {13, 12});
  EXPECT_EQ(read_index_error(index), "(read)");
  {
    h5::Handle f = h5::open_file_readwrite(index);
    h5::Attrs(f.get(), index.string()).set_strs(format::kAttrTensorNames, {"wte", "wte"});
    f.close(index.string(), "close");
  }
  e = read_index_error(index);
  EXPECT_TRUE(has(e, index.string() + ": tensor 'wte' is listed twice; the index is corrupt")) << e;
}

// validate_rect against the format's rule written out here, not the function itself: a
// rectangle of the tensor's rank, in every dimension 0 <= offset, 1 <= count and
// offset + count <= extent (exactly: offsets and counts come from files, any int64).
TEST(Rect, ValidateAcceptsExactlyTheRectanglesInsideTheTensorWithPositiveCounts) {
  const std::vector<int64_t> values = {INT64_MIN, -3, -1, 0, 1, 2, 3, 4, INT64_MAX - 1, INT64_MAX};
  const auto inside = [](int64_t extent, int64_t offset, int64_t count) {
    if (offset < 0 || count < 1) return false;
    // offset + count <= extent, exactly: both are below 2^63, so their sum in uint64_t is exact.
    return static_cast<uint64_t>(offset) + static_cast<uint64_t>(count) <= static_cast<uint64_t>(extent);
  };
  int accepted = 0, checked = 0;
  for (const int64_t extent : {int64_t{1}, int64_t{3}, INT64_MAX})
    for (const int64_t o0 : values)
      for (const int64_t c0 : values)
        for (const int64_t o1 : {int64_t{-1}, int64_t{0}, int64_t{2}})
          for (const int64_t c1 : {int64_t{0}, int64_t{1}, int64_t{2}}) {
            const std::vector<int64_t> shape = {extent, 3};
            const Rect rect{{o0, o1}, {c0, c1}};
            const bool want = inside(extent, o0, c0) && inside(3, o1, c1);
            bool got = true;
            try {
              validate_rect(shape, rect, "t");
            } catch (const std::invalid_argument&) {
              got = false;
            }
            EXPECT_EQ(got, want) << "shape [" << extent << ", 3] " << rect_string(rect);
            accepted += want;
            ++checked;
          }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, checked);
  // Another rank than the shape's, or a shape with an empty extent, is never inside.
  EXPECT_THROW(validate_rect({4}, Rect{{0, 0}, {1, 1}}, "t"), std::invalid_argument);
  EXPECT_THROW(validate_rect({4, 4}, Rect{{0}, {1}}, "t"), std::invalid_argument);
  EXPECT_THROW(validate_rect({0, 4}, Rect{{0, 0}, {0, 1}}, "t"), std::invalid_argument);
  EXPECT_THROW(validate_rect({}, Rect{{}, {}}, "t"), std::invalid_argument);
}

// A shard's own rectangles (its datasets' offset attribute and extents) are held to the same
// rule when verify or a commit reads them: a negative offset, or one past the tensor's end.
TEST(CheckpointFormat, ShardRectanglesOutsideTheTensorAreRefusedNamingTheDataset) {
  const fs::path dir = test_dir();
  save_step(dir, 7, 2, row_tiles);  // shard 1's slice-00000: wte rows 13..24 of [25, 16]
  const fs::path shard = dir / "step-000000007" / "shard-00001.h5";
  const auto shard_error = [&](const std::vector<int64_t>& offset) {
    {
      h5::Handle f = h5::open_file_readwrite(shard);
      h5::Handle ds = h5::open_dataset(f.get(), "slice-00000", shard.string());
      h5::Attrs(ds.get(), shard.string()).set_i64s(format::kAttrOffset, offset);
      ds.close(shard.string(), "close dataset");
      f.close(shard.string(), "close");
    }
    try {
      read_shard_meta(shard);
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("(read)");
  };
  const std::string where = shard.string() + " /slice-00000 (tensor 'wte'): tensor 'wte': rectangle ";
  std::string e = shard_error({-1, 0});
  EXPECT_TRUE(has(e, where + "offset [-1, 0] count [12, 16] does not lie inside global shape [25, 16]")) << e;
  e = shard_error({14, 0});
  EXPECT_TRUE(has(e, where + "offset [14, 0] count [12, 16] does not lie inside global shape [25, 16]")) << e;
  EXPECT_EQ(shard_error({13, 0}), "(read)");
}

TEST(CheckpointFormat, AnIndexOfMoreElementsThanAnInt64CountsInBytesIsRefused) {
  const fs::path dir = test_dir();
  fs::create_directories(dir);
  const int64_t side = int64_t{1} << 40;  // [2^40, 2^40]: 2^82 bytes of float32
  StoredRect whole;
  whole.file = "shard-00000.h5";
  whole.dataset = "/slice-00000";
  whole.rect = Rect{{0, 0}, {side, side}};
  whole.rows_per_block = side;
  whole.cols_per_block = side;
  whole.block_hashes = {42};
  whole.xxh3 = combine_hashes(whole.block_hashes);
  IndexContents contents;
  contents.tensors.push_back(TensorInfo{"huge", {side, side}, {whole}});
  write_index(dir / "index.h5", contents);
  const std::string e = read_index_error(dir / "index.h5");
  EXPECT_TRUE(has(e, "tensor 'huge': global shape [1099511627776, 1099511627776] is empty in some dimension or holds "
                     "more than 2^56 elements"))
      << e;
}

TEST(CheckpointFormat, ShardsStoredOtherwiseAreReadAndVerifiedThroughHdf5) {
  if (!test::python_has_h5py())
    GTEST_SKIP() << "/usr/bin/python3 cannot import h5py and numpy: apt-get install python3-h5py";
  const fs::path dir = test_dir();
  const auto model = tiled_model();
  save_step(dir, 8, 2, row_tiles, 3, model);
  // What h5repack or a user's script might leave: every dataset chunked in h5py's own shape
  // (not the tiles), or also compressed; attributes kept. The raw reads cannot take those
  // bytes; HDF5 can.
  for (const std::string options : {"chunks=True", "chunks=True, compression='gzip'"}) {
    SCOPED_TRACE(options);
    rewrite_shard_datasets(dir / "step-000000008", options);
    const std::vector<h5::RawStorage> storage = shard_storage(dir / "step-000000008" / "shard-00001.h5");
    EXPECT_EQ(storage.front().kind, options == "chunks=True" ? h5::RawStorage::chunked : h5::RawStorage::other);
    expect_model_load(dir, model, col_tiles, 3, 8, kVerified);
    expect_model_load(dir, model, block_tiles, 4, 8, kVerified);
    for (const auto& [read, planned] : big_column_reads(dir, 2)) EXPECT_EQ(read, planned);
    EXPECT_TRUE(verify_checkpoint(dir / "step-000000008").ok());
  }
}

// A file of 1 MiB whose byte i is i * 7 mod 256.
fs::path pattern_file(const fs::path& dir, std::string* bytes) {
  bytes->resize(1 << 20);
  for (size_t i = 0; i < bytes->size(); ++i) (*bytes)[i] = static_cast<char>(i * 7 % 256);
  const fs::path p = dir / "pattern.bin";
  std::ofstream(p, std::ios::binary).write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  return p;
}

TEST(RawRead, RunsWithSmallAndLargeGapsScatteredOrNot) {
  const fs::path dir = test_dir();
  std::string bytes;
  const RawFile file(pattern_file(dir, &bytes));
  struct Case {
    int64_t offset, rows, run, file_stride, dst_stride;
  };
  const Case cases[] = {
      {5, 1, 1000, 1000, 1000},         // one run
      {100, 300, 64, 64, 64},           // adjacent runs, adjacent in memory: one read
      {100, 1500, 64, 64, 80},          // adjacent in the file, scattered: preadv (2 calls)
      {3, 1200, 100, 300, 100},         // small gaps: preadv with scratch (3 calls)
      {1, 7, 1000, 100000, 1200},       // gaps over 64 KiB: one read per run
      {(1 << 20) - 64, 1, 64, 64, 64},  // up to the last byte
  };
  for (const Case& c : cases) {
    std::string got(static_cast<size_t>((c.rows - 1) * c.dst_stride + c.run), '\0');
    file.read_runs(c.offset, c.rows, c.run, c.file_stride, got.data(), c.dst_stride);
    for (int64_t r = 0; r < c.rows; ++r) {
      const std::string want = bytes.substr(static_cast<size_t>(c.offset + r * c.file_stride), c.run);
      ASSERT_EQ(got.substr(static_cast<size_t>(r * c.dst_stride), c.run), want) << "row " << r;
    }
  }
}

TEST(RawRead, AShortOrMissingFileIsACheckpointErrorNamingIt) {
  const fs::path dir = test_dir();
  std::string bytes;
  const fs::path p = pattern_file(dir, &bytes);
  const RawFile file(p);
  std::string buf(4096, '\0');
  for (const auto& read :
       std::vector<std::function<void()>>{[&] { file.read_runs((1 << 20) - 100, 1, 200, 200, buf.data(), 200); },
                                          [&] { file.read_runs((1 << 20) - 100, 2, 100, 100, buf.data(), 1000); },
                                          [&] { file.read_runs((1 << 20) - 1000, 3, 100, 600, buf.data(), 100); }}) {
    try {
      read();
      ADD_FAILURE() << "a read past the end succeeded";
    } catch (const CheckpointError& e) {
      EXPECT_EQ(e.file(), p.string());
      EXPECT_TRUE(has(e.what(), "the file ends early")) << e.what();
    }
  }
  EXPECT_THROW(RawFile(dir / "absent.bin"), CheckpointError);
}

}  // namespace
}  // namespace axonn
