// libFuzzer target for our reads of index.h5's attributes (read_index: the header, the
// metadata, the tensor table with its stored rectangles and checksum blocks, the shard
// list) and for the read plan every resume and `axonn ckpt plan` derives from them. Anyone
// who can write the checkpoint directory controls these values.
//
// HDF5's own parser is not the subject (Debian's 1.10 is not hardened against damaged
// files): the input is a list of edits, made through our attribute writer, to a valid
// index that write_index wrote at start-up, held in memory (HDF5's core driver and file
// image). Each edit removes or rewrites one attribute of the root or of a tensor's virtual
// dataset, as an integer, integer array (1-D or 2-D), unsigned, float, string, string list
// or bytes, or moves one value of an integer array (so the others stay consistent), or
// replaces a tensor's dataset by one of another shape. Beyond ASan and UBSan:
// read_index returns or throws CheckpointError (anything else escapes and aborts); what it
// returns keeps the invariants the reader relies on, and plan_reads over it returns or
// throws CheckpointError.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/index_file.hpp"
#include "checkpoint/read_plan.hpp"
#include "checkpoint/step_dir.hpp"
#include "fuzz_checks.hpp"

namespace {

using axonn::fuzz::require;
namespace h5 = axonn::h5;
namespace format = axonn::format;

constexpr const char* kName = "index.h5";

// A small checkpoint's index: a matrix split over two ranks by rows, a vector, and a 3-D
// tensor split over two ranks along dimension 1, each with a few checksum blocks.
axonn::IndexContents base_contents() {
  axonn::IndexContents c;
  c.format_version = format::kVersion;
  c.step = 40;
  c.save_token = "host-1234-5678";
  c.metadata.layout = "2x1x1x1";
  c.metadata.model_config = "layers=2 hidden=64 heads=4 vocab=256 sequence=64";
  c.metadata.data_cursor = 480;
  c.metadata.rng_state = {1, 2, 3, 4, 5, 6, 7, 8};
  c.metadata.ints["lr_schedule.step"] = 40;
  c.metadata.reals["lr_schedule.last_lr"] = 3e-4;
  c.metadata.strings["note"] = "fuzz";
  auto source = [](int rank, int slice, axonn::Rect rect, int64_t rows_per_block, int64_t cols_per_block) {
    axonn::StoredRect s;
    s.rank = rank;
    s.file = axonn::shard_file_name(rank);
    s.dataset = format::kSlicePrefix + std::string("0000") + std::to_string(slice);
    s.rect = std::move(rect);
    s.rows_per_block = rows_per_block;
    s.cols_per_block = cols_per_block;
    for (int64_t b = 0; b < s.blocks().count(); ++b)
      s.block_hashes.push_back(0x9e3779b97f4a7c15ull * static_cast<uint64_t>(b + 1) + static_cast<uint64_t>(slice));
    s.xxh3 = axonn::combine_hashes(s.block_hashes);
    return s;
  };
  c.tensors.push_back({"blocks/0/attn.cache", {6, 5, 9}, {source(0, 0, {{0, 0, 0}, {6, 2, 9}}, 3, 2),
                                                          source(1, 0, {{0, 2, 0}, {6, 3, 9}}, 6, 3)}});
  c.tensors.push_back({"ln_f.weight", {16}, {source(0, 1, {{0}, {16}}, 8, 1)}});
  c.tensors.push_back({"wte", {25, 16}, {source(0, 2, {{0, 0}, {13, 16}}, 4, 8),
                                         source(1, 1, {{13, 0}, {12, 16}}, 4, 16)}});
  for (int rank = 0; rank < 2; ++rank)
    c.shards.push_back({rank, axonn::shard_file_name(rank), 0x1234u + static_cast<uint64_t>(rank), 1000, 0});
  return c;
}

// The bytes of base_contents() as write_index writes them (through a scratch file, once).
std::vector<char> base_image() {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/axonn-fuzz-index-XXXXXX";
  require(mkdtemp(dir.data()) != nullptr);
  const std::filesystem::path path = std::filesystem::path(dir) / kName;
  axonn::write_index(path, base_contents());
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove_all(dir);
  require(!bytes.empty());
  return bytes;
}

// A writable in-memory copy of `image`; nothing reaches the disk.
h5::Handle open_image(std::vector<char>& image) {
  h5::Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  require(fapl.get() >= 0);
  require(H5Pset_fapl_core(fapl.get(), 64 * 1024, false) >= 0);
  require(H5Pset_file_image(fapl.get(), image.data(), image.size()) >= 0);
  h5::Handle file(H5Fopen(kName, H5F_ACC_RDWR, fapl.get()), H5Fclose);
  require(file.get() >= 0);
  return file;
}

// Mostly values near the valid ones (so the rest of the index can stay consistent), sometimes
// any value, sometimes an extreme one.
int64_t some_int(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0:
    case 1:
      return in.ConsumeIntegralInRange<int64_t>(-2, 64);
    case 2:
      return in.ConsumeIntegral<int64_t>();
    default: {
      static const int64_t kExtremes[] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                                          std::numeric_limits<int64_t>::max() - 1, int64_t{1} << 62,
                                          int64_t{1} << 31, int64_t{1} << 40, -1, 0};
      return kExtremes[in.ConsumeIntegralInRange<size_t>(0, std::size(kExtremes) - 1)];
    }
  }
}

std::vector<int64_t> some_ints(FuzzedDataProvider& in, size_t n) {
  std::vector<int64_t> v;
  for (size_t i = 0; i < n; ++i) v.push_back(some_int(in));
  return v;
}

const char* const kRootAttrs[] = {
    format::kAttrMagic,           format::kAttrVersion,        format::kAttrKind,
    format::kAttrStep,            format::kAttrSaveToken,      format::kAttrChecksumAlgorithm,
    format::kAttrLayout,          format::kAttrModelConfig,    format::kAttrDataCursor,
    format::kAttrRngState,        format::kAttrTensorNames,    format::kAttrShardRanks,
    format::kAttrShardFiles,      format::kAttrShardChecksums, format::kAttrShardBytes,
    "meta.int.lr_schedule.step", "meta.real.lr_schedule.last_lr", "meta.str.note"};
const char* const kTensorAttrs[] = {
    format::kAttrSourceRank,         format::kAttrSourceDataset,      format::kAttrSourceOffset,
    format::kAttrSourceCount,        format::kAttrSourceRowsPerBlock, format::kAttrSourceColsPerBlock,
    format::kAttrSourceXxh3,         format::kAttrSourceBlockHashes};

// Replaces tensor `name`'s virtual dataset by an empty one of `dims` (no attributes).
void replace_dataset(h5::Id file, const std::string& name, const std::vector<int64_t>& dims) {
  require(H5Ldelete(file, name.c_str(), H5P_DEFAULT) >= 0);
  h5::create_virtual_f32(file, name, dims, {}, kName);
}

// One edit, as the input describes it, to the root or to a tensor's dataset (opened once per
// input, in `open`: opening one costs more than most edits). An edit HDF5 refuses (an empty
// attribute name, say) throws CheckpointError from our writer and is skipped.
void edit(FuzzedDataProvider& in, h5::Id file, const std::vector<std::string>& tensors,
          std::vector<h5::Handle>& open) {
  const size_t object = in.ConsumeIntegralInRange<size_t>(0, tensors.size());
  if (object > 0 && open[object - 1].get() < 0) open[object - 1] = h5::open_dataset(file, tensors[object - 1], kName);
  const h5::Attrs attrs(object > 0 ? open[object - 1].get() : file, kName);
  std::string name;
  if (in.ConsumeIntegralInRange(0, 7) == 0) {
    name = in.ConsumeRandomLengthString(24);
  } else if (object == 0) {
    name = kRootAttrs[in.ConsumeIntegralInRange<size_t>(0, std::size(kRootAttrs) - 1)];
  } else {
    name = kTensorAttrs[in.ConsumeIntegralInRange<size_t>(0, std::size(kTensorAttrs) - 1)];
  }
  const size_t n = in.ConsumeIntegralInRange<size_t>(0, 12);
  switch (in.ConsumeIntegralInRange(0, 11)) {
    case 0:
      attrs.remove(name);
      break;
    case 1:
      attrs.set_i64(name, some_int(in));
      break;
    case 2:
      attrs.set_i64s(name, some_ints(in, n));
      break;
    case 3: {  // 2-D, as source_offset and source_count are stored
      const int64_t rows = in.ConsumeIntegralInRange<int64_t>(0, 4), cols = in.ConsumeIntegralInRange<int64_t>(0, 4);
      attrs.set_i64s(name, some_ints(in, static_cast<size_t>(rows * cols)), {rows, cols});
      break;
    }
    case 4: {
      std::vector<uint64_t> v;
      for (size_t i = 0; i < n; ++i) v.push_back(in.ConsumeIntegral<uint64_t>());
      attrs.set_u64s(name, v);
      break;
    }
    case 5:
      attrs.set_u64(name, in.ConsumeIntegral<uint64_t>());
      break;
    case 6:
      attrs.set_f64(name, in.ConsumeFloatingPoint<double>());
      break;
    case 7:
      attrs.set_str(name, in.ConsumeRandomLengthString(64));
      break;
    case 8: {
      std::vector<std::string> v;
      for (size_t i = 0; i < n % 5; ++i) v.push_back(in.ConsumeRandomLengthString(32));
      attrs.set_strs(name, v);
      break;
    }
    case 9:
      attrs.set_u8s(name, in.ConsumeBytes<uint8_t>(n));
      break;
    case 10: {  // one value of an existing integer attribute moved a little, the rest kept consistent
      std::vector<int64_t> v = attrs.get_i64s(name);
      if (v.empty()) break;
      const size_t at = in.ConsumeIntegralInRange<size_t>(0, v.size() - 1);
      const auto nudged = static_cast<uint64_t>(v[at]) + static_cast<uint64_t>(in.ConsumeIntegralInRange<int64_t>(-3, 3));
      v[at] = in.ConsumeBool() ? static_cast<int64_t>(nudged) : some_int(in);  // wraps, as a damaged file may
      attrs.set_i64s(name, v);
      break;
    }
    default:
      if (object > 0) {
        std::vector<int64_t> dims;
        for (size_t d = in.ConsumeIntegralInRange<size_t>(0, 3); d > 0; --d)
          dims.push_back(in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(1, 32)
                                          : in.ConsumeIntegralInRange<int64_t>(1, int64_t{1} << 40));
        open[object - 1] = h5::Handle();
        replace_dataset(file, tensors[object - 1], dims);
      }
  }
}

// The format's rule for a stored rectangle (checkpoint/README.md), written out here rather
// than asked of validate_rect, the reader's own check: the tensor's rank, and in every
// dimension an offset of at least 0, a count of at least 1, and offset + count within the extent.
bool inside_tensor(const std::vector<int64_t>& shape, const axonn::Rect& r) {
  if (r.offset.size() != shape.size() || r.count.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] < 1 || r.offset[d] < 0 || r.count[d] < 1 || r.count[d] > shape[d] ||
        r.offset[d] > shape[d] - r.count[d])
      return false;
  return true;
}

void check_index(const axonn::IndexContents& c) {
  require(c.format_version >= format::kOldestReadableVersion && c.format_version <= format::kVersion);
  for (const axonn::TensorInfo& t : c.tensors) {
    require(!t.global_shape.empty());
    for (const axonn::StoredRect& s : t.sources) {
      require(inside_tensor(t.global_shape, s.rect));
      require(s.rows_per_block >= 1 && s.cols_per_block >= 1);
      require(static_cast<int64_t>(s.block_hashes.size()) == s.blocks().count());
      require(axonn::combine_hashes(s.block_hashes) == s.xxh3);
    }
  }
  // What a resume reads: rank 0 every tensor whole, rank 1 the first row of each.
  std::vector<std::vector<axonn::RectRequest>> per_rank(2);
  for (const axonn::TensorInfo& t : c.tensors) {
    per_rank[0].push_back({t.name, axonn::full_rect(t.global_shape)});
    axonn::Rect first_row = axonn::full_rect(t.global_shape);
    first_row.count[0] = 1;
    per_rank[1].push_back({t.name, first_row});
  }
  for (bool verified : {true, false}) {
    try {
      const axonn::ReadPlan plan = axonn::plan_reads(c.tensors, per_rank, verified);
      require(plan.bytes_read >= 0 && plan.bytes_wanted >= 0);
    } catch (const axonn::CheckpointError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::vector<char> image = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return base_image();
  }();
  static const std::vector<std::string> tensors = [] {
    std::vector<std::string> names;
    for (const axonn::TensorInfo& t : base_contents().tensors) names.push_back(t.name);
    return names;
  }();
  FuzzedDataProvider in(data, size);
  h5::Handle file = open_image(image);
  {
    std::vector<h5::Handle> open(tensors.size());
    for (int edits = 0; edits < 24 && in.remaining_bytes() > 0; ++edits) {
      try {
        edit(in, file.get(), tensors, open);
      } catch (const axonn::CheckpointError&) {
      }
    }
  }
  try {
    check_index(axonn::read_index(file.get(), kName));
  } catch (const axonn::CheckpointError& e) {
    require(std::string(e.what()).find(kName) != std::string::npos);  // the message names the file
  }
  return 0;
}
