#include "comm/exchange_blob.hpp"

#include <cstdint>
#include <cstring>

#include "comm/communicator.hpp"

namespace axonn {
namespace {

void append_u32(std::vector<char>& out, uint32_t v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

uint32_t read_u32(const std::vector<char>& in, size_t& at) {
  if (at + sizeof(uint32_t) > in.size()) throw CommError("bootstrap: truncated key-value blob");
  uint32_t v = 0;
  std::memcpy(&v, in.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

std::vector<char> read_bytes(const std::vector<char>& in, size_t& at, uint32_t n) {
  if (at + n > in.size()) throw CommError("bootstrap: truncated key-value blob");
  std::vector<char> out(in.begin() + static_cast<long>(at), in.begin() + static_cast<long>(at + n));
  at += n;
  return out;
}

}  // namespace

std::vector<char> pack_pairs(const BlobPairs& pairs) {
  std::vector<char> out;
  append_u32(out, static_cast<uint32_t>(pairs.size()));
  for (const auto& [key, value] : pairs) {
    append_u32(out, static_cast<uint32_t>(key.size()));
    out.insert(out.end(), key.begin(), key.end());
    append_u32(out, static_cast<uint32_t>(value.size()));
    out.insert(out.end(), value.begin(), value.end());
  }
  return out;
}

BlobPairs unpack_pairs(const std::vector<char>& blob) {
  BlobPairs pairs;
  size_t at = 0;
  const uint32_t count = read_u32(blob, at);
  for (uint32_t i = 0; i < count; ++i) {
    const std::vector<char> key = read_bytes(blob, at, read_u32(blob, at));
    pairs[std::string(key.begin(), key.end())] = read_bytes(blob, at, read_u32(blob, at));
  }
  return pairs;
}

}  // namespace axonn
