#pragma once
// A pointer to activations whose element type the backend picks at run time: float32 on the
// CPU; float32 or bfloat16 on CUDA (mixed precision stores activations and their gradients
// in bf16, llm.c's layout, and keeps parameters, their gradients and statistics in float32).
// The model's code is the same for both, so it holds activations as ActPtr and offsets them
// in elements, like a T*:
//   ActPtr qkv = ...;  ActPtr k = qkv + h * d;      // h·d elements on, whatever their size
// A float* converts to an ActPtr of float32 implicitly, so float buffers (parameter
// gradients, the CPU backend's activations, tests' inputs) pass wherever an op takes
// activations. Backends read it back with f32() (float32 only) or raw() (after checking
// type()).
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "layout/element_type.hpp"
#include "trainer/backend_error.hpp"

namespace axonn {

template <bool Const>
class BasicActPtr {
  using Byte = std::conditional_t<Const, const std::byte, std::byte>;
  using Float = std::conditional_t<Const, const float, float>;
  using Void = std::conditional_t<Const, const void, void>;

 public:
  BasicActPtr() = default;
  BasicActPtr(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): a null activation
  BasicActPtr(Float* p)           // NOLINT(google-explicit-constructor): float buffers are float32 activations
      : p_(reinterpret_cast<Byte*>(p)) {}
  BasicActPtr(Void* p, ElementType type) : p_(static_cast<Byte*>(p)), type_(type) {}
  // ActPtr -> ConstActPtr, like T* -> const T*.
  template <bool C = Const, typename = std::enable_if_t<C>>
  BasicActPtr(const BasicActPtr<false>& p)  // NOLINT(google-explicit-constructor)
      : p_(static_cast<Byte*>(p.raw())), type_(p.type()) {}

  ElementType type() const { return type_; }
  size_t element_bytes() const { return element_size(type_); }
  Void* raw() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }

  // The float pointer of a float32 activation; a backend that computes in float32 only
  // calls it, and `op` names it in the error for any other type.
  Float* f32(const char* op) const {
    if (type_ != ElementType::float32)
      throw BackendError(std::string(op) + ": activations of type " + element_type_name(type_) +
                         " where this backend computes in float32 only");
    return reinterpret_cast<Float*>(p_);
  }

  BasicActPtr operator+(int64_t elements) const {
    return BasicActPtr(p_ + elements * static_cast<int64_t>(element_bytes()), type_);
  }

 private:
  Byte* p_ = nullptr;
  ElementType type_ = ElementType::float32;
};

using ActPtr = BasicActPtr<false>;
using ConstActPtr = BasicActPtr<true>;

}  // namespace axonn
