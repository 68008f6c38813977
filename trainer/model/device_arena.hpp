#pragma once
// The buffers a part of the model allocates once, at construction, and owns until it is
// destroyed: float32 (statistics, scratch), int32 (routing indices) and activations in the
// backend's activation_type(). Uninitialized, like Backend::alloc.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainer/backend.hpp"

namespace axonn {

class DeviceArena {
 public:
  explicit DeviceArena(Backend& backend) : backend_(&backend) {}

  float* floats(int64_t elements) { return static_cast<float*>(bytes(elements, sizeof(float))); }
  int32_t* ints(int64_t elements) { return static_cast<int32_t*>(bytes(elements, sizeof(int32_t))); }
  ActPtr act(int64_t elements) {
    const ElementType type = backend_->activation_type();
    return ActPtr(bytes(elements, element_size(type)), type);
  }

 private:
  void* bytes(int64_t elements, size_t element_bytes) {
    buffers_.emplace_back(*backend_, static_cast<size_t>(elements) * element_bytes);
    return buffers_.back().data();
  }

  Backend* backend_;
  std::vector<DeviceBuffer<std::byte>> buffers_;
};

}  // namespace axonn
