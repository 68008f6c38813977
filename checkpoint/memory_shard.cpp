#include "checkpoint/memory_shard.hpp"

#include <cstring>
#include <limits>
#include <stdexcept>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/checksum.hpp"
#include "core/printable.hpp"

namespace axonn {
namespace {

constexpr char kMagic[8] = {'A', 'X', 'O', 'N', 'N', 'M', 'E', 'M'};
constexpr uint64_t kVersion = 1;
constexpr const char* kOperation = "memory copy";

class Writer {
 public:
  explicit Writer(std::vector<char>& into) : out(into) { out.clear(); }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    u64(bits);
  }
  void bytes(const void* data, size_t n) {
    u64(n);
    raw(data, n);
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  void i64s(const std::vector<int64_t>& v) {
    for (int64_t x : v) i64(x);
  }
  void raw(const void* data, size_t n) {
    if (n == 0) return;
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, data, n);
  }
  std::vector<char>& out;
};

class Reader {
 public:
  Reader(std::span<const char> in, const std::string& name) : in_(in), name_(name) {}
  uint64_t u64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(in_[at_ + static_cast<size_t>(i)])} << (8 * i);
    at_ += 8;
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  double f64() {
    const uint64_t bits = u64();
    double v = 0;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    need(n);
    std::string s(in_.data() + at_, n);
    at_ += n;
    return s;
  }
  std::vector<int64_t> i64s(uint64_t n) {
    need(n * 8);
    std::vector<int64_t> v;
    for (uint64_t i = 0; i < n; ++i) v.push_back(i64());
    return v;
  }
  uint64_t count(const char* what) {  // a count of items that take at least 8 bytes each
    const uint64_t n = u64();
    if (n > (in_.size() - at_) / 8)
      fail(std::string("its ") + what + " count " + std::to_string(n) + " is past its end");
    return n;
  }
  size_t at() const { return at_; }
  [[noreturn]] void fail(const std::string& why) const {
    throw FormatError(name_, kOperation, name_ + " is not a whole memory copy: " + why);
  }

 private:
  void need(uint64_t n) const {
    if (n > in_.size() - at_) fail("it ends at byte " + std::to_string(in_.size()) + ", inside its header");
  }
  std::span<const char> in_;
  const std::string& name_;
  size_t at_ = 0;
};

void write_metadata(Writer& w, const Metadata& m) {
  w.str(m.layout);
  w.str(m.model_config);
  w.i64(m.data_cursor);
  w.bytes(m.rng_state.data(), m.rng_state.size());
  w.u64(m.ints.size());
  for (const auto& [key, value] : m.ints) {
    w.str(key);
    w.i64(value);
  }
  w.u64(m.reals.size());
  for (const auto& [key, value] : m.reals) {
    w.str(key);
    w.f64(value);
  }
  w.u64(m.strings.size());
  for (const auto& [key, value] : m.strings) {
    w.str(key);
    w.str(value);
  }
}

Metadata read_metadata(Reader& r) {
  Metadata m;
  m.layout = r.str();
  m.model_config = r.str();
  m.data_cursor = r.i64();
  const std::string rng = r.str();
  m.rng_state.assign(rng.begin(), rng.end());
  // Each map's keys in ascending order, as encode writes them: a shard reads back as one.
  auto key_after = [&r](const auto& map, const char* what) {
    std::string key = r.str();
    if (!map.empty() && !(map.rbegin()->first < key))
      r.fail(std::string("its metadata's ") + what + " keys are not in ascending order");
    return key;
  };
  for (uint64_t n = r.count("integer"), i = 0; i < n; ++i) {
    std::string key = key_after(m.ints, "integer");
    m.ints[key] = r.i64();
  }
  for (uint64_t n = r.count("real"), i = 0; i < n; ++i) {
    std::string key = key_after(m.reals, "real");
    m.reals[key] = r.f64();
  }
  for (uint64_t n = r.count("string"), i = 0; i < n; ++i) {
    std::string key = key_after(m.strings, "string");
    m.strings[key] = r.str();
  }
  return m;
}

}  // namespace

void encode_memory_shard(const MemoryShardHeader& header, const std::string& save_token,
                         std::span<const TensorSlice> slices, const Metadata* metadata, std::vector<char>& out) {
  Writer w(out);
  w.raw(kMagic, sizeof kMagic);
  w.u64(kVersion);
  w.i64(header.step);
  w.i64(header.rank);
  w.i64(header.world);
  w.str(save_token);
  w.u64(slices.size());
  size_t data_bytes = 0;
  for (const TensorSlice& s : slices) {
    const size_t bytes = static_cast<size_t>(element_count(s.rect)) * sizeof(float);
    w.str(s.name);
    w.u64(s.global_shape.size());
    w.i64s(s.global_shape);
    w.i64s(s.rect.offset);
    w.i64s(s.rect.count);
    w.u64(xxh3_64(s.data, bytes));
    data_bytes += bytes;
  }
  w.u64(metadata != nullptr ? 1 : 0);
  if (metadata != nullptr) write_metadata(w, *metadata);
  w.u64(xxh3_64(w.out.data(), w.out.size()));
  w.out.reserve(w.out.size() + data_bytes);
  for (const TensorSlice& s : slices) w.raw(s.data, static_cast<size_t>(element_count(s.rect)) * sizeof(float));
}

std::vector<char> encode_memory_shard(const MemoryShardHeader& header, const std::string& save_token,
                                      std::span<const TensorSlice> slices, const Metadata* metadata) {
  std::vector<char> out;
  encode_memory_shard(header, save_token, slices, metadata, out);
  return out;
}

MemoryShardHeader decode_memory_shard_header(std::span<const char> bytes, const std::string& name) {
  Reader r(bytes, name);
  if (bytes.size() < kMemoryShardHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    r.fail("it does not start with AXONNMEM");
  r.u64();  // the magic
  if (const uint64_t version = r.u64(); version != kVersion)
    r.fail("its version is " + std::to_string(version) + "; this build reads version " + std::to_string(kVersion));
  MemoryShardHeader h;
  h.step = r.i64();
  h.rank = r.i64();
  h.world = r.i64();
  if (h.step < 0 || h.rank < 0 || h.world <= h.rank)
    r.fail("step " + std::to_string(h.step) + ", rank " + std::to_string(h.rank) + " of " + std::to_string(h.world));
  return h;
}

namespace {

// The shard's header and slice table, parsed and its hash checked; the slices' data pointers
// are left null. `elements_at_most`: a count past it is a damaged header (and no product of
// counts below it overflows).
struct ParsedTable {
  MemoryShard shard;
  std::vector<uint64_t> xxh3;  // [slices] of their data
  size_t data_at = 0;          // where the data starts: the table's bytes
  int64_t elements = 0;        // floats of data the slices hold
};
ParsedTable parse_table(std::span<const char> bytes, const std::string& name, int64_t elements_at_most) {
  ParsedTable t;
  MemoryShard& shard = t.shard;
  shard.header = decode_memory_shard_header(bytes, name);
  Reader r(bytes.subspan(kMemoryShardHeaderBytes), name);
  shard.save_token = r.str();
  for (uint64_t n = r.count("slice"), i = 0; i < n; ++i) {
    TensorSlice slice;
    slice.name = r.str();
    const std::string tensor = "tensor '" + escaped_excerpt(slice.name, 64) + "'";
    const uint64_t dims = r.count("dimension");
    slice.global_shape = r.i64s(dims);
    slice.rect.offset = r.i64s(dims);
    slice.rect.count = r.i64s(dims);
    t.xxh3.push_back(r.u64());
    try {
      validate_tensor_name(slice.name);
      validate_rect(slice.global_shape, slice.rect, tensor);
    } catch (const std::invalid_argument&) {
      r.fail(tensor + " has a bad name or a rectangle outside its global shape");
    }
    int64_t count = 1;
    for (const int64_t c : slice.rect.count) {
      if (c > elements_at_most / count) r.fail(tensor + "'s rectangle holds more elements than the file has bytes");
      count *= c;
    }
    if (count > elements_at_most - t.elements) r.fail("its slices hold more elements than the file has bytes");
    t.elements += count;
    shard.slices.push_back(std::move(slice));
  }
  const uint64_t has_metadata = r.u64();
  if (has_metadata > 1) r.fail("its metadata flag is " + std::to_string(has_metadata) + ", not 0 or 1");
  if (has_metadata == 1) shard.metadata = read_metadata(r);
  const size_t header_end = kMemoryShardHeaderBytes + r.at();
  const uint64_t header_hash = r.u64();
  if (header_hash != xxh3_64(bytes.data(), header_end)) r.fail("its header's XXH3-64 differs from the one stored");
  t.data_at = header_end + 8;
  return t;
}

}  // namespace

MemoryShard decode_memory_shard_table(std::span<const char> bytes, const std::string& name, size_t* table_bytes) {
  ParsedTable t = parse_table(bytes, name, std::numeric_limits<int64_t>::max() / 4);
  if (table_bytes != nullptr) *table_bytes = t.data_at;
  return std::move(t.shard);
}

MemoryShard verify_memory_shard(std::span<const char> bytes, const std::string& name, size_t* table_bytes) {
  ParsedTable t = parse_table(bytes, name, static_cast<int64_t>(bytes.size() / sizeof(float)));
  if (table_bytes != nullptr) *table_bytes = t.data_at;
  if (bytes.size() - t.data_at != static_cast<size_t>(t.elements) * sizeof(float)) {
    Reader(bytes, name)
        .fail("it holds " + std::to_string(bytes.size() - t.data_at) + " bytes of data where its slices need " +
              std::to_string(t.elements * 4));
  }
  const char* at = bytes.data() + t.data_at;
  for (size_t i = 0; i < t.shard.slices.size(); ++i) {
    const size_t n = static_cast<size_t>(element_count(t.shard.slices[i].rect)) * sizeof(float);
    if (xxh3_64(at, n) != t.xxh3[i])
      throw ChecksumMismatch(name, kOperation,
                             "checksum mismatch in " + name + ", tensor " +
                                 escaped_excerpt(t.shard.slices[i].name, 64) +
                                 ": its data's XXH3-64 differs from the one the copy stored; the memory copy is "
                                 "damaged");
    at += n;
  }
  return std::move(t.shard);
}

MemoryShard decode_memory_shard(std::span<const char> bytes, const std::string& name, size_t* table_bytes) {
  size_t data_at = 0;
  MemoryShard shard = verify_memory_shard(bytes, name, &data_at);
  if (table_bytes != nullptr) *table_bytes = data_at;
  shard.data.resize((bytes.size() - data_at) / sizeof(float));
  if (!shard.data.empty()) std::memcpy(shard.data.data(), bytes.data() + data_at, shard.data.size() * sizeof(float));
  const float* at = shard.data.data();
  for (TensorSlice& slice : shard.slices) {
    slice.data = at;
    at += element_count(slice.rect);
  }
  return shard;
}

}  // namespace axonn
