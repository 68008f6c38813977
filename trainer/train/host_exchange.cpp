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

}  // namespace axonn
