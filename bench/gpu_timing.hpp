#pragma once
// What the op benchmarks on one GPU share (bench_ops_gpu and its --attention): a call's time on
// the backend's stream, and activation buffers filled from a hash.
#include <cstdint>
#include <functional>
#include <vector>

#include "bench_stats.hpp"
#include "trainer/backend.hpp"

namespace axonn::bench {

// Seconds per call of `op`: the median over 5 rounds of `calls` calls, each round synchronized,
// after 3 untimed calls.
inline double seconds_per_call(Backend& backend, int calls, const std::function<void()>& op) {
  for (int i = 0; i < 3; ++i) op();
  backend.synchronize();
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i) op();
    backend.synchronize();
    rounds.push_back(seconds_since(start) / calls);
  }
  return median(rounds);
}

// An activation buffer of `count` elements of the backend's activation type, holding values
// in [-0.5, 0.5) from a hash (not constants: the statistics of a constant row are degenerate,
// and tensor cores draw less power on repeated values).
class Activations {
 public:
  Activations(Backend& backend, int64_t count) : bytes_(backend, static_cast<size_t>(count) * 4) {
    std::vector<float> host(static_cast<size_t>(count));
    uint32_t x = static_cast<uint32_t>(count) * 2654435761u;
    for (float& h : host) {
      x = x * 1664525u + 1013904223u;
      h = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
    }
    const DeviceBuffer<float> values(backend, host);
    ptr_ = ActPtr(bytes_.data(), backend.activation_type());
    backend.convert(ptr_, values.data(), count);
  }
  ActPtr ptr() const { return ptr_; }

 private:
  DeviceBuffer<std::byte> bytes_;  // sized for float32, the larger type
  ActPtr ptr_;
};

}  // namespace axonn::bench
