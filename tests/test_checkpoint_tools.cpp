// The checkpoint tools on real files: inspect, verify, plan (against what the reader really
// reads), safetensors export (whole tensors, and slabs transposed under other names), and an
// h5py reader of index.h5 after the directory moved.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/inspect.hpp"
#include "checkpoint/read_plan.hpp"
#include "checkpoint/safetensors.hpp"
#include "checkpoint/verify.hpp"
#include "checkpoint_test_model.hpp"
#include "process_helpers.hpp"

namespace axonn {
namespace {

using namespace ckpt_test;

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

TEST(CheckpointTools, InspectListsTensorsShapesDtypeLayoutStepSizesAndShards) {
  const fs::path dir = test_dir();
  save_step(dir, 12, 4, block_tiles);
  const CheckpointReader reader = CheckpointReader::open(dir);  // the checkpoint directory: its latest
  EXPECT_EQ(CheckpointReader::open(dir / "step-000000012").step(), 12);
  const std::string text = inspect_checkpoint(reader);
  EXPECT_TRUE(has(text, "step 12, format AXONNCKP v3, checksums XXH3-64")) << text;
  EXPECT_TRUE(has(text, "layout '2x1x2x1', data cursor 768")) << text;
  EXPECT_TRUE(has(text, "lr_schedule.step = 12")) << text;
  EXPECT_TRUE(has(text, "tensors: 6")) << text;
  EXPECT_TRUE(has(text, "blocks/0/mlp.fc")) << text;
  EXPECT_TRUE(has(text, "[16, 67]")) << text;
  EXPECT_TRUE(has(text, "float32")) << text;
  EXPECT_TRUE(has(text, "shards: 4")) << text;
  EXPECT_TRUE(has(text, "shard-00003.h5  rank     3")) << text;
}

TEST(CheckpointTools, VerifyPassesOnAGoodStepAndReportsEveryCorruptShard) {
  const fs::path dir = test_dir();
  save_step(dir, 5, 3, row_tiles);
  const fs::path step = dir / "step-000000005";
  const VerifyReport good = verify_checkpoint(step);
  EXPECT_TRUE(good.ok()) << format_verify_report(good);
  EXPECT_EQ(good.shards_checked, 3);
  int64_t model_bytes = 0;
  for (const TensorSpec& t : small_model()) model_bytes += element_count(t.shape) * 4;
  EXPECT_EQ(good.bytes_checked, model_bytes);
  EXPECT_TRUE(has(format_verify_report(good), "OK: step 5, 3 shards")) << format_verify_report(good);

  const auto model = small_model();
  flip_data_byte(step / "shard-00000.h5",
                 extract(global_values(model, 0, 5), model[0].shape, row_tiles(model[0].shape, 3)[0]));
  flip_data_byte(step / "shard-00002.h5",
                 extract(global_values(model, 1, 5), model[1].shape, row_tiles(model[1].shape, 3)[2]));
  const VerifyReport bad = verify_checkpoint(step);
  EXPECT_FALSE(bad.ok());
  std::map<std::string, std::string> tensor_of_file;
  for (const VerifyProblem& p : bad.problems) {
    if (!p.tensor.empty()) tensor_of_file[fs::path(p.file).filename().string()] = p.tensor;
  }
  EXPECT_EQ(tensor_of_file,
            (std::map<std::string, std::string>{{"shard-00000.h5", "wte"}, {"shard-00002.h5", "blocks/0/attn.qkv"}}))
      << format_verify_report(bad);
  const std::string text = format_verify_report(bad);
  EXPECT_TRUE(has(text, "FAILED")) << text;
  EXPECT_TRUE(has(text, "checksum mismatch in /slice-00000")) << text;
  // A missing shard is a problem too, not an exception.
  fs::remove(step / "shard-00001.h5");
  const VerifyReport missing = verify_checkpoint(step);
  bool named = false;
  for (const VerifyProblem& p : missing.problems)
    named = named || (has(p.file, "shard-00001.h5") && p.what == "shard file is missing");
  EXPECT_TRUE(named) << format_verify_report(missing);
}

TEST(CheckpointTools, PlanPredictsExactlyTheBytesTheReaderReads) {
  const fs::path dir = test_dir();
  // One tensor big enough for several checksum blocks: [2048, 1536] float32 = 12 MiB, saved
  // as 2 row tiles of 6 MiB, each 2 blocks side by side (1024 rows x 768 columns).
  const std::vector<TensorSpec> model = {{"big", {2048, 1536}}, {"bias", {1536}}};
  save_step(dir, 1, 2, row_tiles, 3, model);
  CheckpointReader probe = CheckpointReader::open_latest(dir);
  for (const Tiling& tiling : {Tiling(row_tiles), Tiling(col_tiles), Tiling(block_tiles)}) {
    for (int world : {1, 3, 4, 6}) {
      std::vector<std::vector<RectRequest>> requests(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) {
        for (const TensorSpec& t : model)
          requests[static_cast<size_t>(r)].push_back(
              RectRequest{t.name, tiling(t.shape, world)[static_cast<size_t>(r)]});
      }
      for (bool verified : {true, false}) {
        const ReadPlan plan = plan_reads(probe.tensors(), requests, verified);
        for (int r = 0; r < world; ++r) {
          CheckpointReader reader = CheckpointReader::open_latest(dir);
          RankTargets t = rank_targets(model, tiling, r, world);
          for (const SliceRead& s : t.reads) reader.read(s, ReadOptions{ReadPath::shards, verified});
          EXPECT_EQ(reader.bytes_read(), plan.ranks[static_cast<size_t>(r)].bytes_read)
              << "world " << world << " rank " << r;
          expect_rank_values(model, t, 1);
        }
      }
    }
  }
  // Half the columns are whole blocks: every rank reads just what it wants, from both files.
  // A quarter of the columns reads the 768-column blocks holding it, 2x; half the rows of a
  // stored tile too (its blocks span all its rows).
  auto big_plan = [&](const Tiling& tiling, int world) {
    std::vector<std::vector<RectRequest>> requests(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r)
      requests[static_cast<size_t>(r)].push_back(
          RectRequest{"big", tiling({2048, 1536}, world)[static_cast<size_t>(r)]});
    return plan_reads(probe.tensors(), requests);
  };
  const ReadPlan halves = big_plan(col_tiles, 2);
  EXPECT_EQ(halves.ranks[0].files.size(), 2u);
  EXPECT_EQ(halves.ranks[0].bytes_read, 2048 * 768 * 4);
  EXPECT_EQ(halves.ranks[0].bytes_wanted, 2048 * 768 * 4);
  EXPECT_TRUE(has(format_read_plan(halves), "(1.00x)")) << format_read_plan(halves);
  EXPECT_TRUE(has(format_read_plan(big_plan(col_tiles, 4)), "(2.00x)")) << format_read_plan(big_plan(col_tiles, 4));
  EXPECT_TRUE(has(format_read_plan(big_plan(row_tiles, 4)), "(2.00x)")) << format_read_plan(big_plan(row_tiles, 4));
}

// Parses a safetensors file by hand and returns (name -> raw bytes).
std::map<std::string, std::string> parse_safetensors(const fs::path& path, std::string* header_out) {
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  *header_out = header;
  std::map<std::string, std::string> out;
  for (const TensorSpec& t : small_model()) {
    const std::string key = "\"" + t.name + "\":{\"dtype\":\"F32\",\"shape\":";
    const size_t at = header.find(key);
    if (at == std::string::npos) {
      ADD_FAILURE() << t.name << " missing from header " << header;
      continue;
    }
    const size_t off = header.find("\"data_offsets\":[", at);
    unsigned long long b = 0, e = 0;
    EXPECT_EQ(std::sscanf(header.c_str() + off, "\"data_offsets\":[%llu,%llu]", &b, &e), 2);
    out[t.name] = bytes.substr(8 + n + b, e - b);
  }
  return out;
}

TEST(CheckpointTools, SafetensorsExportHoldsEveryFullTensor) {
  const fs::path dir = test_dir();
  save_step(dir, 4, 3, col_tiles);
  CheckpointReader reader = CheckpointReader::open_latest(dir);
  const fs::path out = dir / "export.safetensors";
  export_safetensors(reader, out);
  std::string header;
  const auto tensors = parse_safetensors(out, &header);
  EXPECT_TRUE(has(header, "\"__metadata__\":{\"axonn.step\":\"4\",\"axonn.layout\":\"2x1x2x1\"")) << header;
  EXPECT_TRUE(has(header, "\"wte\":{\"dtype\":\"F32\",\"shape\":[25,16],\"data_offsets\":[")) << header;
  const auto model = small_model();
  for (size_t i = 0; i < model.size(); ++i) {
    const auto want = global_values(model, i, 4);
    const std::string want_bytes(reinterpret_cast<const char*>(want.data()), want.size() * 4);
    EXPECT_TRUE(tensors.count(model[i].name) && tensors.at(model[i].name) == want_bytes) << model[i].name;
  }
  // The data section is exactly the tensors, back to back.
  int64_t total = 0;
  for (const TensorSpec& t : model) total += element_count(t.shape) * 4;
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(out)), 8 + static_cast<int64_t>(header.size()) + total);
}

TEST(CheckpointTools, SafetensorsExportWritesSlabsTransposedUnderOtherNames) {
  const fs::path dir = test_dir();
  save_step(dir, 4, 3, col_tiles);
  CheckpointReader reader = CheckpointReader::open_latest(dir);
  const auto model = small_model();  // wte [25, 16] is tensor 0, blocks/0/attn.cache [6, 5, 9] tensor 5
  const std::vector<float> wte = global_values(model, 0, 4), cache = global_values(model, 5, 4);
  auto slab = [](Shape offset, Shape count) { return Rect{std::move(offset), std::move(count)}; };
  const std::vector<ExportTensor> entries = {
      {"wte.T", "wte", full_rect({25, 16}), 0, true},                               // [16, 25]
      {"cache.2.T", "blocks/0/attn.cache", slab({2, 0, 0}, {1, 5, 9}), 1, true},    // [9, 5]
      {"cache.part", "blocks/0/attn.cache", slab({1, 1, 3}, {3, 2, 4}), 0, false},  // [3, 2, 4]
  };
  EXPECT_EQ(export_shape(entries[0]), (Shape{16, 25}));
  EXPECT_EQ(export_shape(entries[1]), (Shape{9, 5}));
  const fs::path out = dir / "slabs.safetensors";
  export_safetensors(reader, out, entries);
  const std::string bytes = read_bytes(out);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  const std::string header = bytes.substr(8, n);
  // Sorted by file name: cache.2.T, cache.part, wte.T.
  EXPECT_TRUE(has(header, "\"cache.2.T\":{\"dtype\":\"F32\",\"shape\":[9,5],\"data_offsets\":[0,180]}")) << header;
  EXPECT_TRUE(has(header, "\"cache.part\":{\"dtype\":\"F32\",\"shape\":[3,2,4],\"data_offsets\":[180,276]}")) << header;
  EXPECT_TRUE(has(header, "\"wte.T\":{\"dtype\":\"F32\",\"shape\":[16,25],\"data_offsets\":[276,1876]}")) << header;
  ASSERT_EQ(bytes.size(), 8 + n + 1876);
  auto file_value = [&](int64_t index) {
    float f = 0;
    std::memcpy(&f, bytes.data() + 8 + n + static_cast<uint64_t>(index) * 4, 4);
    return f;
  };
  for (int64_t j = 0; j < 9; ++j)
    for (int64_t i = 0; i < 5; ++i)
      EXPECT_EQ(file_value(j * 5 + i), cache[static_cast<size_t>(2 * 45 + i * 9 + j)]) << j << " " << i;
  int64_t k = 45;
  for (int64_t a = 1; a < 4; ++a)
    for (int64_t b = 1; b < 3; ++b)
      for (int64_t c = 3; c < 7; ++c) EXPECT_EQ(file_value(k++), cache[static_cast<size_t>(a * 45 + b * 9 + c)]);
  for (int64_t j = 0; j < 16; ++j)
    for (int64_t i = 0; i < 25; ++i) EXPECT_EQ(file_value(69 + j * 25 + i), wte[static_cast<size_t>(i * 16 + j)]);

  // Each bad entry is refused before anything is written, naming it.
  const struct {
    ExportTensor entry;
    std::string message;
  } bad[] = {
      {{"x", "nope", full_rect({2}), 0, false}, "nope"},
      {{"", "wte", full_rect({25, 16}), 0, false}, "the file name is empty"},
      {{"x", "wte", slab({20, 0}, {6, 16}), 0, false}, "does not lie inside global shape [25, 16]"},
      {{"x", "wte", slab({0}, {25}), 0, false}, "does not have the rank"},
      {{"x", "blocks/0/attn.cache", slab({0, 0, 0}, {2, 5, 9}), 1, false}, "has extent 2, not 1"},
      {{"x", "blocks/0/attn.cache", slab({0, 0, 0}, {2, 5, 9}), 0, true}, "must be one matrix"},
      {{"x", "blocks/0/ln1.weight", full_rect({16}), 0, true}, "a transpose needs 2 dimensions"},
      {{"x", "wte", full_rect({25, 16}), 3, false}, "drop_leading 3 is outside [0, 2]"},
      {{"wte.T", "wte", full_rect({25, 16}), 0, false}, "the file name is also given to a slab of wte"},
  };
  for (const auto& [entry, message] : bad) {
    std::vector<ExportTensor> with = {entries[0], entry};
    const fs::path refused = dir / "refused.safetensors";
    try {
      export_safetensors(reader, refused, with);
      ADD_FAILURE() << "accepted " << message;
    } catch (const RequestMismatch& e) {
      EXPECT_TRUE(has(e.what(), message)) << e.what();
    }
    EXPECT_FALSE(fs::exists(refused)) << message;
    EXPECT_FALSE(fs::exists(dir / "refused.safetensors.partial")) << message;
  }
}

TEST(CheckpointTools, H5pyReadsTheIndexAfterTheDirectoryMovedAndMatchesTheExport) {
  if (!test::python_has_h5py())
    GTEST_SKIP() << "/usr/bin/python3 cannot import h5py and numpy: apt-get install python3 python3-h5py";
  const fs::path dir = test_dir();
  save_step(dir / "run", 9, 4, block_tiles);
  fs::path step = dir / "run" / "step-000000009";
  {
    CheckpointReader reader(step);
    export_safetensors(reader, dir / "export.safetensors");
  }
  // Move the whole checkpoint directory: VDS sources are relative to index.h5.
  fs::rename(dir / "run", dir / "moved");
  step = dir / "moved" / "step-000000009";
  const std::string cmd = "cd / && /usr/bin/python3 " + std::string(AXONN_SOURCE_DIR) +
                          "/tests/checkpoint_h5py_check.py " + step.string() + " " +
                          (dir / "export.safetensors").string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) output += buf;
  const int status = pclose(p);
  EXPECT_EQ(status, 0) << output;
  EXPECT_TRUE(has(output, "ok: 6 tensors")) << output;
  // The library reads the moved step too, through the VDS.
  CheckpointReader moved(step);
  RankTargets t = rank_targets(small_model(), row_tiles, 1, 2);
  for (const SliceRead& s : t.reads) moved.read(s, ReadOptions{ReadPath::index_vds, true});
  expect_rank_values(small_model(), t, 9);
}

}  // namespace
}  // namespace axonn
