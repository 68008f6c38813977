#pragma once
// The element types that buffers hold: the layout model's weights and activations
// (layout_inputs.hpp, a job's training.dtype), the trainer's activations
// (trainer/activation_ptr.hpp) and the collectives' buffers (comm/communicator.hpp), so one
// name travels from a job's dtype to a buffer and its collective.
#include <cstddef>

namespace axonn {

enum class ElementType { float32, bfloat16 };

constexpr size_t element_size(ElementType type) { return type == ElementType::float32 ? 4 : 2; }

// "float32" or "bfloat16", for errors and logs.
constexpr const char* element_type_name(ElementType type) {
  return type == ElementType::float32 ? "float32" : "bfloat16";
}

}  // namespace axonn
