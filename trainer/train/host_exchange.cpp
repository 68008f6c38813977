#include "trainer/train/host_exchange.hpp"

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

}  // namespace axonn
