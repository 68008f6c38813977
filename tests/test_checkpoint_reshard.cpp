// Reshard math and replica spreading (pure, no files). The oracle is independent of
// plan_copy: every element of a requested rectangle is counted over the copy regions, and
// the assembled data is compared with the global tensor element by element.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "checkpoint/blocks.hpp"
#include "checkpoint/read_plan.hpp"
#include "checkpoint/replicas.hpp"
#include "checkpoint/reshard.hpp"

namespace axonn {
namespace {

using Shape = std::vector<int64_t>;

// Cut [0, n) into p parts: even ("as even as possible", the first n % p one longer) or at
// random distinct cut points (uneven neighbours).
std::vector<std::pair<int64_t, int64_t>> cuts(int64_t n, int64_t p, std::mt19937* rng) {
  std::vector<int64_t> points = {0, n};
  if (rng == nullptr) {
    for (int64_t i = 1; i < p; ++i) points.push_back(i * (n / p) + std::min(i, n % p));
  } else {
    std::vector<int64_t> all(static_cast<size_t>(n - 1));
    std::iota(all.begin(), all.end(), int64_t{1});
    std::shuffle(all.begin(), all.end(), *rng);
    points.insert(points.end(), all.begin(), all.begin() + (p - 1));
  }
  std::sort(points.begin(), points.end());
  std::vector<std::pair<int64_t, int64_t>> parts;
  for (size_t i = 0; i + 1 < points.size(); ++i) parts.emplace_back(points[i], points[i + 1] - points[i]);
  return parts;
}

// Row tiles x column tiles. `bricks`: every row band gets its own column cuts, so a tile's
// neighbours above and below are offset (uneven neighbours in both dimensions).
std::vector<Rect> tiling(const Shape& shape, int64_t rows, int64_t cols, std::mt19937* rng, bool bricks = false) {
  std::vector<Rect> rects;
  if (shape.size() == 1) {
    for (auto [o, c] : cuts(shape[0], rows, rng)) rects.push_back(Rect{{o}, {c}});
    return rects;
  }
  auto col_parts = cuts(shape[1], cols, rng);
  for (auto [ro, rc] : cuts(shape[0], rows, rng)) {
    if (bricks) col_parts = cuts(shape[1], cols, rng);
    for (auto [co, cc] : col_parts) rects.push_back(Rect{{ro, co}, {rc, cc}});
  }
  return rects;
}

// The 4D grid's shard of W [k, n] for rank (x, y, z): rows (x*G_z + z) of k/(G_x*G_z), column
// block y of n/G_y (docs/parallel-plan.md, role xy).
struct Grid {
  int x, y, z;
};
Rect grid_shard(const Shape& w, const Grid& g, int ix, int iy, int iz) {
  const int64_t rows = w[0] / (g.x * g.z), cols = w[1] / g.y;
  return Rect{{(ix * g.z + iz) * rows, iy * cols}, {rows, cols}};
}
std::vector<Rect> grid_tiling(const Shape& w, const Grid& g) {
  std::vector<Rect> rects;
  for (int iz = 0; iz < g.z; ++iz)
    for (int iy = 0; iy < g.y; ++iy)
      for (int ix = 0; ix < g.x; ++ix) rects.push_back(grid_shard(w, g, ix, iy, iz));
  return rects;
}
std::vector<Grid> grids_up_to(int world) {
  std::vector<Grid> out;
  for (int x = 1; x <= world; ++x)
    for (int y = 1; x * y <= world; ++y)
      for (int z = 1; x * y * z <= world; ++z) out.push_back(Grid{x, y, z});
  return out;
}

std::vector<float> global_data(const Shape& shape) {
  std::vector<float> g(static_cast<size_t>(element_count(shape)));
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i) + 0.25f;
  return g;
}

std::vector<float> extract(const std::vector<float>& global, const Shape& shape, const Rect& r) {
  std::vector<float> out(static_cast<size_t>(element_count(r)));
  copy_region(global.data(), full_rect(shape), out.data(), r, r);
  return out;
}

// Calls fn(row-major index inside `outer`) for every element of `region`: an odometer over
// all but the last dimension, independent of copy_region, and a plain loop along the last
// (the 4D grid test below visits a billion elements).
template <typename Fn>
void for_each_index(const Rect& region, const Rect& outer, Fn fn) {
  const size_t rank = region.count.size();
  const int64_t run = region.count[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  while (true) {
    int64_t linear = 0;
    for (size_t d = 0; d < rank; ++d) linear = linear * outer.count[d] + (region.offset[d] + idx[d] - outer.offset[d]);
    for (int64_t i = 0; i < run; ++i) fn(static_cast<size_t>(linear + i));
    size_t d = rank - 1;
    while (d > 0 && ++idx[d - 1] == region.count[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

// Checks that `old_tiles` can fill every rectangle of `new_tiles` exactly once, and that the
// assembled data equals the global tensor. Returns the number of copy ops.
size_t check_reshard(const Shape& shape, const std::vector<Rect>& old_tiles, const std::vector<Rect>& new_tiles,
                     const std::vector<float>& global) {
  std::vector<std::vector<float>> stored;
  for (const Rect& r : old_tiles) stored.push_back(extract(global, shape, r));
  size_t ops_total = 0;
  for (const Rect& wanted : new_tiles) {
    const std::vector<CopyOp> ops = plan_copy(old_tiles, wanted);
    ops_total += ops.size();
    // Independent coverage count over the wanted rectangle.
    std::vector<int> hits(static_cast<size_t>(element_count(wanted)), 0);
    std::vector<float> out(hits.size(), -1.0f);
    for (const CopyOp& op : ops) {
      EXPECT_TRUE(contains(old_tiles[op.source], op.region));
      EXPECT_TRUE(contains(wanted, op.region));
      for_each_index(op.region, wanted, [&](size_t i) { ++hits[i]; });
      copy_region(stored[op.source].data(), old_tiles[op.source], out.data(), wanted, op.region);
    }
    for (size_t i = 0; i < hits.size(); ++i) {
      if (hits[i] != 1) {
        ADD_FAILURE() << "element " << i << " of " << rect_string(wanted) << " covered " << hits[i] << " times";
        return ops_total;
      }
    }
    EXPECT_EQ(out, extract(global, shape, wanted)) << rect_string(wanted);
  }
  return ops_total;
}

TEST(Reshard, OneDimensionalTilingsEvenAndUneven) {
  std::mt19937 rng(7);
  const Shape shape = {37};
  const auto global = global_data(shape);
  for (int64_t a = 1; a <= 8; ++a) {
    for (int64_t b = 1; b <= 8; ++b) {
      check_reshard(shape, tiling(shape, a, 1, nullptr), tiling(shape, b, 1, nullptr), global);
      check_reshard(shape, tiling(shape, a, 1, &rng), tiling(shape, b, 1, &rng), global);
    }
  }
}

TEST(Reshard, TwoDimensionalRowColumnBlockAndBrickTilings) {
  std::mt19937 rng(11);
  const Shape shape = {23, 19};
  const auto global = global_data(shape);
  const std::vector<std::pair<int64_t, int64_t>> splits = {{1, 1}, {4, 1}, {1, 5}, {3, 3}, {2, 4}, {5, 2}, {7, 6}};
  for (auto [ar, ac] : splits) {
    for (auto [br, bc] : splits) {
      check_reshard(shape, tiling(shape, ar, ac, nullptr), tiling(shape, br, bc, nullptr), global);
      check_reshard(shape, tiling(shape, ar, ac, &rng), tiling(shape, br, bc, &rng), global);
      check_reshard(shape, tiling(shape, ar, ac, &rng, true), tiling(shape, br, bc, &rng, true), global);
    }
  }
}

TEST(Reshard, FourDGridShardsEveryGridOfWorldsOneToEightToEveryOther) {
  // 840 = lcm(1..8): every k/(G_x*G_z) and n/G_y is whole.
  const Shape w = {840, 840};
  const auto global = global_data(w);
  const auto grids = grids_up_to(8);
  ASSERT_EQ(grids.size(), 38u);  // ordered (x, y, z) with product <= 8
  // Each wanted rectangle is planned on its own, so a new grid's shards are checked as the
  // distinct rectangles of all of them: grids with the same G_x*G_z and G_y cut W alike, and
  // the 38 grids' 210 shards are 103 rectangles (the sum of r*y over r*y <= 8). Half the
  // elements of checking grid after grid, at the same coverage. The old grids keep their own
  // order of shards, which is the order plan_copy sees its sources in.
  std::vector<Rect> wanted;
  size_t shards = 0;
  for (const Grid& b : grids) {
    for (const Rect& r : grid_tiling(w, b)) {
      ++shards;
      if (std::find(wanted.begin(), wanted.end(), r) == wanted.end()) wanted.push_back(r);
    }
  }
  EXPECT_EQ(shards, 210u);
  EXPECT_EQ(wanted.size(), 103u);
  for (const Grid& a : grids) check_reshard(w, grid_tiling(w, a), wanted, global);
}

TEST(Reshard, ThreeDimensionalCopyRegion) {
  const Shape shape = {4, 5, 6};
  const auto global = global_data(shape);
  const Rect a{{0, 0, 0}, {2, 5, 6}}, b{{2, 0, 0}, {2, 5, 6}};
  const std::vector<Rect> wanted = {Rect{{1, 1, 2}, {3, 3, 3}}, Rect{{0, 0, 0}, {4, 5, 6}}, Rect{{3, 4, 5}, {1, 1, 1}}};
  check_reshard(shape, {a, b}, wanted, global);
}

TEST(Reshard, GapsAndOverlapsAreRefusedWithAMessage) {
  const std::vector<Rect> gap = {Rect{{0, 0}, {2, 4}}, Rect{{3, 0}, {1, 4}}};
  try {
    plan_copy(gap, Rect{{0, 0}, {4, 4}});
    FAIL() << "a gap was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cover 12 of the 16 elements"), std::string::npos) << e.what();
  }
  const std::vector<Rect> overlap = {Rect{{0, 0}, {3, 4}}, Rect{{2, 0}, {2, 4}}};
  EXPECT_THROW(plan_copy(overlap, Rect{{0, 0}, {4, 4}}), std::invalid_argument);
  auto pair = find_overlap(overlap);
  ASSERT_TRUE(pair);
  EXPECT_EQ(*pair, std::make_pair(size_t{0}, size_t{1}));
  std::mt19937 rng(3);
  EXPECT_FALSE(find_overlap(tiling({30, 30}, 5, 6, &rng, true)));
}

TEST(Blocks, GridGeometryAndTheBlocksARegionTouches) {
  // Rows 10..19, columns 20..28 of a tensor, in blocks of 4 x 4: block rows of 4, 4, 2 rows and
  // block columns of 4, 4, 1 columns.
  const Rect stored{{10, 20}, {10, 9}};
  const BlockGrid g = block_grid(stored, 4, 4);
  EXPECT_EQ(g.block_rows(), 3);
  EXPECT_EQ(g.block_cols(), 3);
  EXPECT_EQ(g.count(), 9);
  EXPECT_EQ(g.row_end(2), 10);
  EXPECT_EQ(g.col_end(2), 9);
  EXPECT_EQ(g.block_row_elements(2), 1);
  // Region rows 13..15, columns 25..26 -> local rows 3..5, columns 5..6 -> blocks rows 0..1,
  // column 1: 8 rows x 4 columns.
  const BlockSpan s = blocks_touched(g, stored, Rect{{13, 25}, {3, 2}});
  EXPECT_EQ(std::make_tuple(s.i_begin, s.i_end, s.j_begin, s.j_end), std::make_tuple(0, 2, 1, 2));
  EXPECT_EQ(span_elements(g, s), 8 * 4);
  // The last block is short both ways: one row-and-column corner is 2 rows x 1 column.
  const BlockSpan corner = blocks_touched(g, stored, Rect{{19, 28}, {1, 1}});
  EXPECT_EQ(std::make_tuple(corner.i_begin, corner.i_end, corner.j_begin, corner.j_end), std::make_tuple(2, 3, 2, 3));
  EXPECT_EQ(span_elements(g, corner), 2);
  // The whole rectangle is every block.
  EXPECT_EQ(span_elements(g, blocks_touched(g, stored, stored)), element_count(stored));
  // 1-D: one column; 3-D: the dimensions after 1 stay whole in every block.
  const BlockGrid line = block_grid(Rect{{5}, {10}}, 4, 1);
  EXPECT_EQ(line.block_cols(), 1);
  EXPECT_EQ(span_elements(line, blocks_touched(line, Rect{{5}, {10}}, Rect{{9}, {1}})), 4);
  const BlockGrid cube = block_grid(Rect{{0, 0, 0}, {6, 5, 9}}, 4, 2);
  EXPECT_EQ(cube.inner, 9);
  EXPECT_EQ(cube.count(), 2 * 3);
  EXPECT_EQ(cube.block_row_elements(2), 1 * 9);
  EXPECT_THROW(block_grid(stored, 0, 4), std::invalid_argument);
}

TEST(Blocks, BlockExtentsAsLargeAsADamagedIndexMayHoldMakeOneBlock) {
  const Rect stored{{0, 0}, {13, 16}};
  const BlockGrid g = block_grid(stored, INT64_MAX, INT64_MAX);
  EXPECT_EQ(g.block_rows(), 1);
  EXPECT_EQ(g.block_cols(), 1);
  const BlockSpan s = blocks_touched(g, stored, Rect{{12, 15}, {1, 1}});
  EXPECT_EQ(std::make_tuple(s.i_begin, s.i_end, s.j_begin, s.j_end), std::make_tuple(0, 1, 0, 1));
  EXPECT_EQ(span_elements(g, s), 13 * 16);
}

TEST(Blocks, TheWriterCutsPowersOfTwoOfAtMost4MiBColumnsFirst) {
  struct Case {
    Shape count;
    int64_t rows_per_block, cols_per_block;
  };
  const Case cases[] = {
      {{512, 1536}, 512, 1536},    // 3 MiB: one block
      {{1024, 1536}, 1024, 768},   // 6 MiB: 2 blocks, side by side
      {{2048, 2048}, 1024, 1024},  // 16 MiB: 2 x 2
      {{4096, 2048}, 2048, 512},   // 32 MiB: 2 rows x 4 columns of blocks
      {{8192, 4096}, 2048, 512},   // 128 MiB: 4 x 8
      {{65536, 300}, 2048, 300},   // 75 MiB, rows of 1200 B: 32 blocks, columns stay whole (>= 1 KiB)
      {{65536, 600}, 2048, 300},   // 150 MiB: 64 blocks, 32 x 2 (2 columns of blocks keep 1200 B rows)
      {{3000000}, 750000, 1},      // 1-D, 11.4 MiB: 4 runs of elements
      {{64, 64, 1024}, 32, 32},    // 16 MiB, 3-D: 2 x 2, each block row 32 columns of 1024 elements
  };
  for (const Case& c : cases) {
    const BlockGrid g = choose_block_grid(full_rect(c.count));
    EXPECT_EQ(g.rows_per_block, c.rows_per_block) << shape_string(c.count);
    EXPECT_EQ(g.cols_per_block, c.cols_per_block) << shape_string(c.count);
    EXPECT_LE(g.rows_per_block * g.cols_per_block * g.inner * 4, kChecksumBlockBytes) << shape_string(c.count);
  }
  // The bench's case: [4096, 2048] stored blocks read by column quarters of the tensor (half of
  // a stored block's columns) or by row halves read whole blocks only.
  const Rect stored{{4096, 2048}, {4096, 2048}};
  const BlockGrid g = choose_block_grid(stored);
  EXPECT_EQ(span_elements(g, blocks_touched(g, stored, Rect{{4096, 3072}, {4096, 1024}})), 4096 * 1024);
  EXPECT_EQ(span_elements(g, blocks_touched(g, stored, Rect{{6144, 2048}, {2048, 2048}})), 2048 * 2048);
}

TEST(ReadPlan, PredictsFilesAndBytesPerNewRank) {
  // [8, 4] stored as two row tiles by ranks 0 and 1, checksum blocks of 2 rows x 4 columns
  // (32 bytes, whole rows as format version 1 has them), and [4, 8] stored whole by rank 0 in
  // blocks of 2 x 2.
  TensorInfo t;
  t.name = "w";
  t.global_shape = {8, 4};
  t.sources.push_back(StoredRect{0, "shard-00000.h5", "/slice-00000", Rect{{0, 0}, {4, 4}}, 2, 4, {1, 2}, 0});
  t.sources.push_back(StoredRect{1, "shard-00001.h5", "/slice-00000", Rect{{4, 0}, {4, 4}}, 2, 4, {3, 4}, 0});
  TensorInfo tiles;
  tiles.name = "v";
  tiles.global_shape = {4, 8};
  tiles.sources.push_back(
      StoredRect{0, "shard-00000.h5", "/slice-00001", Rect{{0, 0}, {4, 8}}, 2, 2, {1, 2, 3, 4, 5, 6, 7, 8}, 0});
  const std::vector<std::vector<RectRequest>> ranks = {
      {RectRequest{"w", Rect{{0, 0}, {8, 2}}}},  // left half: both files, every row of both
      {RectRequest{"w", Rect{{3, 2}, {2, 2}}}},  // rows 3..4, right half: one block from each file
      {RectRequest{"v", Rect{{0, 2}, {4, 4}}}},  // columns 2..5: the 4 blocks holding them
      {RectRequest{"v", Rect{{1, 3}, {2, 2}}}},  // rows 1..2, columns 3..4: 4 blocks around them
  };
  const ReadPlan verified = plan_reads({t, tiles}, ranks, true);
  ASSERT_EQ(verified.ranks.size(), 4u);
  EXPECT_EQ(verified.ranks[0].files, (std::vector<std::string>{"shard-00000.h5", "shard-00001.h5"}));
  EXPECT_EQ(verified.ranks[0].bytes_wanted, 8 * 2 * 4);
  EXPECT_EQ(verified.ranks[0].bytes_read, 8 * 4 * 4);
  EXPECT_EQ(verified.ranks[1].bytes_wanted, 2 * 2 * 4);
  EXPECT_EQ(verified.ranks[1].bytes_read, 2 * (2 * 4 * 4));  // rows 2..3 of tile 0, rows 0..1 of tile 1
  EXPECT_EQ(verified.ranks[2].bytes_read, verified.ranks[2].bytes_wanted);
  EXPECT_EQ(verified.ranks[2].bytes_read, 4 * 4 * 4);
  EXPECT_EQ(verified.ranks[3].bytes_read, 4 * 4 * 4);
  EXPECT_EQ(verified.bytes_stored, 2 * 8 * 4 * 4);
  const ReadPlan plain = plan_reads({t, tiles}, ranks, false);
  EXPECT_EQ(plain.bytes_read, plain.bytes_wanted);
  EXPECT_NE(format_read_plan(verified).find("rank 1: 2 files (shard-00000.h5, shard-00001.h5)"), std::string::npos)
      << format_read_plan(verified);
  EXPECT_THROW(plan_reads({t}, {{RectRequest{"nope", Rect{{0, 0}, {1, 1}}}}}), std::exception);
}

// ---- replica spreading ----

using Key = std::tuple<std::string, Shape, Shape>;

// A model as the 4D plan holds it: two linear weights (roles xy and yx), a LayerNorm gain
// [C/G_x] replicated over y and z, each replicated over the data axis.
std::vector<std::vector<HeldSlice>> hold_4d(const Grid& g, int data, int64_t c) {
  std::vector<std::vector<HeldSlice>> held;
  const Shape fc = {c, 4 * c}, proj = {4 * c, c}, ln = {c};
  for (int d = 0; d < data; ++d)
    for (int iz = 0; iz < g.z; ++iz)
      for (int iy = 0; iy < g.y; ++iy)
        for (int ix = 0; ix < g.x; ++ix) {
          std::vector<HeldSlice> h;
          h.push_back(HeldSlice{"fc", fc, grid_shard(fc, g, ix, iy, iz)});
          h.push_back(HeldSlice{"proj", proj, grid_shard(proj, Grid{g.y, g.x, g.z}, iy, ix, iz)});
          h.push_back(HeldSlice{"ln", ln, Rect{{ix * (c / g.x)}, {c / g.x}}});
          held.push_back(std::move(h));
        }
  return held;
}

TEST(Replicas, EveryDistinctRectangleIsWrittenOnceAndTheTensorsAreCovered) {
  for (int data = 1; data <= 4; ++data) {
    for (const Grid& g : grids_up_to(8)) {
      const auto held = hold_4d(g, data, 840);
      const auto writes = assign_writers(held);
      ASSERT_EQ(writes.size(), held.size());
      std::map<Key, int> written;
      std::map<std::string, int64_t> covered;
      std::set<Key> distinct;
      for (size_t r = 0; r < held.size(); ++r) {
        for (const HeldSlice& s : held[r]) distinct.insert(Key{s.name, s.rect.offset, s.rect.count});
        for (size_t i : writes[r]) {
          ASSERT_LT(i, held[r].size());
          const HeldSlice& s = held[r][i];
          ++written[Key{s.name, s.rect.offset, s.rect.count}];
          covered[s.name] += element_count(s.rect);
        }
      }
      EXPECT_EQ(written.size(), distinct.size());
      for (const auto& [key, n] : written) EXPECT_EQ(n, 1) << std::get<0>(key);
      EXPECT_EQ(covered["fc"], 840 * 3360);
      EXPECT_EQ(covered["proj"], 3360 * 840);
      EXPECT_EQ(covered["ln"], 840);
    }
  }
}

TEST(Replicas, BytesAreBalancedWithinEachReplicaGroup) {
  // Ranks holding identical sets (the data replicas of one tensor-parallel position) differ
  // by at most one rectangle's bytes; equal rectangles split evenly.
  for (int data = 2; data <= 4; ++data) {
    for (const Grid& g : grids_up_to(4)) {
      const auto held = hold_4d(g, data, 840);
      const auto writes = assign_writers(held);
      const size_t tp = held.size() / static_cast<size_t>(data);
      for (size_t pos = 0; pos < tp; ++pos) {
        int64_t lo = INT64_MAX, hi = 0, biggest = 0;
        for (int d = 0; d < data; ++d) {
          const size_t r = static_cast<size_t>(d) * tp + pos;
          int64_t bytes = 0;
          for (size_t i : writes[r]) bytes += element_count(held[r][i].rect) * 4;
          for (const HeldSlice& s : held[r]) biggest = std::max(biggest, element_count(s.rect) * 4);
          lo = std::min(lo, bytes);
          hi = std::max(hi, bytes);
        }
        EXPECT_LE(hi - lo, biggest) << "grid " << g.x << "x" << g.y << "x" << g.z << " data " << data;
      }
    }
  }
  // 4 replicas of 8 equal rectangles: two each.
  std::vector<std::vector<HeldSlice>> same(4);
  for (auto& h : same)
    for (int64_t i = 0; i < 8; ++i) h.push_back(HeldSlice{"t", {8, 5}, Rect{{i, 0}, {1, 5}}});
  for (const auto& w : assign_writers(same)) EXPECT_EQ(w.size(), 2u);
}

TEST(Replicas, DeterministicAndIndependentOfListOrder) {
  auto held = hold_4d(Grid{2, 1, 2}, 3, 840);
  const auto first = assign_writers(held);
  EXPECT_EQ(assign_writers(held), first);
  // Reverse each rank's list: the same (name, rect) pairs are written by the same ranks.
  auto reversed = held;
  for (auto& h : reversed) std::reverse(h.begin(), h.end());
  const auto second = assign_writers(reversed);
  for (size_t r = 0; r < held.size(); ++r) {
    std::set<Key> a, b;
    for (size_t i : first[r]) a.insert(Key{held[r][i].name, held[r][i].rect.offset, held[r][i].rect.count});
    for (size_t i : second[r])
      b.insert(Key{reversed[r][i].name, reversed[r][i].rect.offset, reversed[r][i].rect.count});
    EXPECT_EQ(a, b) << "rank " << r;
  }
}

TEST(Replicas, InconsistentInputIsRefused) {
  std::vector<std::vector<HeldSlice>> shapes = {{HeldSlice{"t", {4, 4}, Rect{{0, 0}, {4, 4}}}},
                                                {HeldSlice{"t", {4, 5}, Rect{{0, 0}, {4, 4}}}}};
  EXPECT_THROW(assign_writers(shapes), std::invalid_argument);
  std::vector<std::vector<HeldSlice>> twice = {
      {HeldSlice{"t", {4, 4}, Rect{{0, 0}, {4, 4}}}, HeldSlice{"t", {4, 4}, Rect{{0, 0}, {4, 4}}}}};
  EXPECT_THROW(assign_writers(twice), std::invalid_argument);
}

}  // namespace
}  // namespace axonn
