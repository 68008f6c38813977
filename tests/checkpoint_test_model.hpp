#pragma once
// Shared by the checkpoint tests: a small model whose values depend on (tensor, element,
// step), tilings of it over simulated ranks, and saving/loading helpers. Values are exact
// floats, so every comparison is bitwise.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checksum.hpp"
#include "checkpoint/commit.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/load.hpp"
#include "checkpoint/reader.hpp"
#include "checkpoint/reshard.hpp"
#include "checkpoint/shard_writer.hpp"

namespace axonn::ckpt_test {

namespace fs = std::filesystem;
using Shape = std::vector<int64_t>;

struct TensorSpec {
  std::string name;
  Shape shape;
};

// Odd extents so most tilings are uneven; names with '/' and '.' like the trainer's; one
// 3-D tensor.
inline std::vector<TensorSpec> small_model() {
  return {{"wte", {25, 16}},
          {"blocks/0/attn.qkv", {16, 48}},
          {"blocks/0/mlp.fc", {16, 67}},
          {"blocks/0/ln1.weight", {16}},
          {"blocks/0/mlp.fc.bias", {67}},
          {"blocks/0/attn.cache", {6, 5, 9}}};  // 3-D: rows of a source are not contiguous in every target
}

inline float value(size_t tensor, int64_t index, int64_t step) {
  return static_cast<float>(step) * 4096.0f + static_cast<float>(tensor) * 512.0f +
         static_cast<float>(index % 2039) * 0.25f;
}

inline std::vector<float> global_values(const std::vector<TensorSpec>& model, size_t t, int64_t step) {
  std::vector<float> g(static_cast<size_t>(element_count(model[t].shape)));
  for (size_t i = 0; i < g.size(); ++i) g[i] = value(t, static_cast<int64_t>(i), step);
  return g;
}

inline std::vector<float> extract(const std::vector<float>& global, const Shape& shape, const Rect& r) {
  std::vector<float> out(static_cast<size_t>(element_count(r)));
  copy_region(global.data(), full_rect(shape), out.data(), r, r);
  return out;
}

// A tiling gives, for a tensor shape and a world size, one rectangle per rank.
using Tiling = std::function<std::vector<Rect>(const Shape&, int)>;

inline std::vector<std::pair<int64_t, int64_t>> even_parts(int64_t n, int64_t p) {
  std::vector<std::pair<int64_t, int64_t>> parts;
  for (int64_t i = 0, o = 0; i < p; ++i) {
    const int64_t c = n / p + (i < n % p ? 1 : 0);
    parts.emplace_back(o, c);
    o += c;
  }
  return parts;
}

// Split dimension 0 over the ranks.
inline std::vector<Rect> row_tiles(const Shape& s, int world) {
  std::vector<Rect> out;
  for (auto [o, c] : even_parts(s[0], world)) {
    Rect r = full_rect(s);
    r.offset[0] = o;
    r.count[0] = c;
    out.push_back(r);
  }
  return out;
}

// Split the last dimension over the ranks.
inline std::vector<Rect> col_tiles(const Shape& s, int world) {
  std::vector<Rect> out;
  for (auto [o, c] : even_parts(s.back(), world)) {
    Rect r = full_rect(s);
    r.offset.back() = o;
    r.count.back() = c;
    out.push_back(r);
  }
  return out;
}

// 2-D tensors as a 2 x (world/2) block grid; others split along dimension 0.
inline std::vector<Rect> block_tiles(const Shape& s, int world) {
  if (s.size() != 2 || world % 2 != 0) return row_tiles(s, world);
  std::vector<Rect> out;
  for (auto [ro, rc] : even_parts(s[0], 2)) {
    for (auto [co, cc] : even_parts(s[1], world / 2)) out.push_back(Rect{{ro, co}, {rc, cc}});
  }
  return out;
}

// One simulated rank's slices (owning their buffers).
struct RankState {
  std::vector<std::vector<float>> buffers;
  std::vector<TensorSlice> slices;
};

inline RankState rank_state(const std::vector<TensorSpec>& model, const Tiling& tiling, int rank, int world,
                            int64_t step) {
  RankState st;
  st.buffers.reserve(model.size());
  for (size_t t = 0; t < model.size(); ++t) {
    const Rect r = tiling(model[t].shape, world)[static_cast<size_t>(rank)];
    st.buffers.push_back(extract(global_values(model, t, step), model[t].shape, r));
    st.slices.push_back(TensorSlice{model[t].name, model[t].shape, r, st.buffers.back().data()});
  }
  return st;
}

inline Metadata test_metadata(int64_t step) {
  Metadata m;
  m.layout = "2x1x2x1";
  m.model_config = "[model]\nlayers = 1\nname = \"tiny \\\"quoted\\\"\"\n";
  m.data_cursor = step * 64;
  m.rng_state = {0, 1, 2, 0, 255, 7};
  m.ints["lr_schedule.step"] = step;
  m.reals["lr_schedule.last_lr"] = 3e-4 * static_cast<double>(step);
  m.strings["run.id"] = "test-run";
  return m;
}

// Every rank writes its shard on its own thread while rank 0 also commits (waiting for the
// others), as ranks of a job would.
inline CommitResult save_step(const fs::path& dir, int64_t step, int world, const Tiling& tiling, int keep = 3,
                              const std::vector<TensorSpec>& model = small_model()) {
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  std::vector<std::thread> writers;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  for (int r = 1; r < world; ++r) {
    writers.emplace_back([&, r] {
      try {
        RankState st = rank_state(model, tiling, r, world, step);
        write_shard(dir, step, r, st.slices);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  CommitResult result;
  try {
    RankState st0 = rank_state(model, tiling, 0, world, step);
    write_shard(dir, step, 0, st0.slices);
    result = commit(dir, step, ranks, test_metadata(step), keep, std::chrono::seconds(20));
  } catch (...) {
    for (auto& w : writers) w.join();
    throw;
  }
  for (auto& w : writers) w.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return result;
}

// Buffers for what `rank` of `world` owns under `tiling` (filled with NaN-like junk).
struct RankTargets {
  std::vector<std::vector<float>> buffers;
  std::vector<SliceRead> reads;
};
inline RankTargets rank_targets(const std::vector<TensorSpec>& model, const Tiling& tiling, int rank, int world) {
  RankTargets t;
  t.buffers.reserve(model.size());
  for (const TensorSpec& spec : model) {
    const Rect r = tiling(spec.shape, world)[static_cast<size_t>(rank)];
    t.buffers.emplace_back(static_cast<size_t>(element_count(r)), -12345.0f);
    t.reads.push_back(SliceRead{spec.name, spec.shape, r, t.buffers.back().data()});
  }
  return t;
}

// Bitwise comparison of what a rank read with the step's global values.
inline void expect_rank_values(const std::vector<TensorSpec>& model, const RankTargets& t, int64_t step) {
  for (size_t i = 0; i < model.size(); ++i) {
    const auto want = extract(global_values(model, i, step), model[i].shape, t.reads[i].rect);
    ASSERT_EQ(t.buffers[i].size(), want.size());
    EXPECT_EQ(std::memcmp(t.buffers[i].data(), want.data(), want.size() * sizeof(float)), 0)
        << model[i].name << " " << rect_string(t.reads[i].rect) << " differs from step " << step;
  }
}

inline fs::path test_dir_of(const ::testing::TestInfo& info) {
  return fs::path(AXONN_BINARY_DIR) / "tests" / "ckpt-tmp" / (std::string(info.test_suite_name()) + "." + info.name());
}

// A fresh directory under the build tree for the current test; deleted when the test
// passes, kept for inspection when it fails.
inline fs::path test_dir() {
  const fs::path dir = test_dir_of(*::testing::UnitTest::GetInstance()->current_test_info());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

class RemovePassedTestDirs : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Passed()) {
      std::error_code ec;
      fs::remove_all(test_dir_of(info), ec);
    }
  }
};
inline const bool kRemovePassedTestDirsRegistered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new RemovePassedTestDirs);
  return true;
}();

inline std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes(static_cast<size_t>(fs::file_size(file)), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

// Flips one byte inside the stored data of `slice` in `file` (found by its bytes).
inline void flip_data_byte(const fs::path& file, const std::vector<float>& slice) {
  std::string bytes = read_bytes(file);
  const std::string needle(reinterpret_cast<const char*>(slice.data()), std::min<size_t>(64, slice.size() * 4));
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos) << "slice data not found in " << file;
  bytes[at + needle.size() / 2] = static_cast<char>(bytes[at + needle.size() / 2] ^ 0x10);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Rewrites a committed step as format version 1 wrote it (what an older axonn left on disk):
// checksum blocks of whole rows, rows_per_block = max(1, 4 MiB / bytes per row), block hashes
// recomputed from the stored data, no cols_per_block / source_cols_per_block attributes,
// format_version 1 in every file; the data and the VDS mappings are untouched. `step` may also
// be a save's .tmp-step directory before its commit (shards only). The version 1
// hashing is restated here from the old specification, not taken from the library's blocks.
inline void rewrite_as_format_v1(const fs::path& step) {
  struct Hashes {
    int64_t rows_per_block;
    std::vector<uint64_t> blocks;
    uint64_t xxh3;
  };
  std::map<std::pair<int64_t, std::string>, Hashes> by_source;  // (rank, dataset)
  std::map<int64_t, uint64_t> shard_checksums;
  for (const auto& entry : fs::directory_iterator(step)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard-", 0) != 0) continue;
    const std::string f = entry.path().string();
    h5::Handle file = h5::open_file_readwrite(entry.path());
    const h5::Attrs root(file.get(), f);
    const int64_t rank = root.get_i64(format::kAttrRank);
    std::vector<uint64_t> dataset_hashes;
    for (int64_t i = 0; i < root.get_i64(format::kAttrSliceCount); ++i) {
      char ds_name[32];
      std::snprintf(ds_name, sizeof ds_name, "/slice-%05lld", static_cast<long long>(i));
      h5::Handle ds = h5::open_dataset(file.get(), ds_name, f);
      const Shape dims = h5::dataset_dims(ds.get(), f);
      std::vector<float> data(static_cast<size_t>(element_count(dims)));
      h5::read_f32(ds.get(), full_rect(dims), data.data(), dims, Shape(dims.size(), 0), f);
      const int64_t row_bytes = element_count(dims) / dims[0] * 4;
      Hashes h{std::max<int64_t>(1, (int64_t{4} << 20) / row_bytes), {}, 0};
      for (int64_t r = 0; r < dims[0]; r += h.rows_per_block) {
        const int64_t n = std::min(h.rows_per_block, dims[0] - r);
        h.blocks.push_back(
            xxh3_64(reinterpret_cast<const char*>(data.data()) + r * row_bytes, static_cast<size_t>(n * row_bytes)));
      }
      h.xxh3 = combine_hashes(h.blocks);
      const h5::Attrs a(ds.get(), f);
      a.set_i64(format::kAttrRowsPerBlock, h.rows_per_block);
      a.set_u64s(format::kAttrBlockHashes, h.blocks);
      a.set_u64(format::kAttrXxh3, h.xxh3);
      a.remove(format::kAttrColsPerBlock);
      dataset_hashes.push_back(h.xxh3);
      by_source[{rank, ds_name}] = std::move(h);
    }
    shard_checksums[rank] = combine_hashes(dataset_hashes);
    root.set_u64(format::kAttrShardChecksum, shard_checksums[rank]);
    root.set_i64(format::kAttrVersion, 1);
    file.close(f, "close");
  }
  const fs::path index = step / "index.h5";
  if (!fs::exists(index)) return;  // shards of a save not committed yet
  const std::string f = index.string();
  h5::Handle file = h5::open_file_readwrite(index);
  const h5::Attrs root(file.get(), f);
  std::vector<uint64_t> checksums;
  for (int64_t rank : root.get_i64s(format::kAttrShardRanks)) checksums.push_back(shard_checksums.at(rank));
  root.set_u64s(format::kAttrShardChecksums, checksums);
  root.set_i64(format::kAttrVersion, 1);
  for (const std::string& tensor : root.get_strs(format::kAttrTensorNames)) {
    h5::Handle ds = h5::open_dataset(file.get(), tensor, f);
    const h5::Attrs a(ds.get(), f);
    const auto ranks = a.get_i64s(format::kAttrSourceRank);
    const auto datasets = a.get_strs(format::kAttrSourceDataset);
    std::vector<int64_t> rows_per_block;
    std::vector<uint64_t> hashes, blocks;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const Hashes& h = by_source.at({ranks[i], datasets[i]});
      rows_per_block.push_back(h.rows_per_block);
      hashes.push_back(h.xxh3);
      blocks.insert(blocks.end(), h.blocks.begin(), h.blocks.end());
    }
    a.set_i64s(format::kAttrSourceRowsPerBlock, rows_per_block);
    a.set_u64s(format::kAttrSourceXxh3, hashes);
    a.set_u64s(format::kAttrSourceBlockHashes, blocks);
    a.remove(format::kAttrSourceColsPerBlock);
  }
  file.close(f, "close");
}

}  // namespace axonn::ckpt_test
