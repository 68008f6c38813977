#include "trainer/train/host_exchange.hpp"

#include <algorithm>
#include <string>

namespace axonn {

std::vector<float> all_gather_floats(Backend& backend, Communicator& group, const std::vector<float>& mine) {
  const size_t n = mine.size();
  if (backend.device_is_host()) {
    std::vector<float> all(n * static_cast<size_t>(group.size()));
    group.all_gather(mine.data(), all.data(), n, ElementType::float32);
    return all;
  }
  DeviceBuffer<float> in(backend, mine), all(backend, n * static_cast<size_t>(group.size()));
  group.all_gather(in.data(), all.data(), n, ElementType::float32);
  // Waited for here, under the communicator's timeout, before the copy on the compute
  // stream (ordered after the all-gather) reads the result.
  group.synchronize();
  return all.download();
}

std::vector<int64_t> all_gather_integers(Backend& backend, Communicator& group, const std::vector<int64_t>& mine) {
  // value = high * 2^20 + low with 0 <= low < 2^20: both are exact in float32's 24-bit mantissa.
  std::vector<float> parts;
  for (const int64_t v : mine) {
    parts.push_back(static_cast<float>(v >> 20));
    parts.push_back(static_cast<float>(v & 0xFFFFF));
  }
  const std::vector<float> all = all_gather_floats(backend, group, parts);
  std::vector<int64_t> values;
  for (size_t i = 0; i < all.size(); i += 2)
    values.push_back(static_cast<int64_t>(all[i]) * (int64_t{1} << 20) + static_cast<int64_t>(all[i + 1]));
  return values;
}

std::vector<int64_t> all_gather_integers(Backend& backend, Communicator& group, int64_t value) {
  return all_gather_integers(backend, group, std::vector<int64_t>{value});
}

std::vector<std::vector<int64_t>> all_gather_integer_lists(Backend& backend, Communicator& group,
                                                           const std::vector<int64_t>& mine) {
  const std::vector<int64_t> sizes = all_gather_integers(backend, group, static_cast<int64_t>(mine.size()));
  const size_t longest = static_cast<size_t>(std::max<int64_t>(1, *std::max_element(sizes.begin(), sizes.end())));
  std::vector<int64_t> padded = mine;
  padded.resize(longest, 0);
  const std::vector<int64_t> all = all_gather_integers(backend, group, padded);
  std::vector<std::vector<int64_t>> lists(sizes.size());
  for (size_t r = 0; r < sizes.size(); ++r) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(r * longest);
    lists[r].assign(first, first + static_cast<std::ptrdiff_t>(sizes[r]));
  }
  return lists;
}

std::vector<std::string> all_gather_bytes(Backend& backend, Communicator& group, const std::string& mine) {
  const std::vector<int64_t> sizes = all_gather_integers(backend, group, static_cast<int64_t>(mine.size()));
  const size_t longest = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));
  if (longest == 0) return std::vector<std::string>(sizes.size());
  const size_t floats = (longest + 2) / 3;
  std::vector<float> packed(floats, 0.0f);
  for (size_t i = 0; i < mine.size(); ++i)
    packed[i / 3] += static_cast<float>(static_cast<uint32_t>(static_cast<unsigned char>(mine[i])) << (8 * (i % 3)));
  const std::vector<float> all = all_gather_floats(backend, group, packed);
  std::vector<std::string> out(sizes.size());
  for (size_t r = 0; r < sizes.size(); ++r) {
    out[r].resize(static_cast<size_t>(sizes[r]));
    for (size_t i = 0; i < out[r].size(); ++i)
      out[r][i] = static_cast<char>((static_cast<uint32_t>(all[r * floats + i / 3]) >> (8 * (i % 3))) & 0xFF);
  }
  return out;
}

}  // namespace axonn
