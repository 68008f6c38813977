#pragma once
// Activation storage on the GPU: an ActPtr's elements are float32 or bfloat16, and the math
// is float32 either way (llm.c's mixed precision). A kernel is a template on its storage type
// T, reads through load() and writes through store() (bf16: rounded to nearest even); the op
// picks T from the activations' type with with_storage(). Included by .cu files: C++17.
#include <cuda_bf16.h>

#include <initializer_list>
#include <string>

#include "trainer/activation_ptr.hpp"
#include "trainer/op_checks.hpp"

namespace axonn::cuda {

using bf16 = __nv_bfloat16;

__device__ inline float load(const float* p) { return *p; }
__device__ inline float load(const bf16* p) { return __bfloat162float(*p); }
__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(bf16* p, float v) { *p = __float2bfloat16_rn(v); }
// v as store() would keep it in T: what a later load() of it gives.
template <typename T>
__device__ inline float rounded(float v);
template <>
__device__ inline float rounded<float>(float v) {
  return v;
}
template <>
__device__ inline float rounded<bf16>(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// The element pointer of an activation whose type the caller checked (with_storage).
template <typename T>
T* typed(ActPtr p) {
  return static_cast<T*>(p.raw());
}
template <typename T>
const T* typed(ConstActPtr p) {
  return static_cast<const T*>(p.raw());
}

// The activations of one op share one type: the first one's. Throws naming the op and both
// types otherwise (a float32 buffer passed beside bf16 ones would be read as garbage).
inline ElementType common_type(const char* op, std::initializer_list<ConstActPtr> acts) {
  const ElementType type = acts.begin()->type();
  for (ConstActPtr a : acts)
    if (a.type() != type)
      op_checks::fail(op, std::string("activations of mixed types (") + element_type_name(type) + " and " +
                              element_type_name(a.type()) + "); pass every activation of the op in one type");
  return type;
}

// body(T{}) with T the storage type of `type`: float or bf16.
template <typename Body>
void with_storage(ElementType type, Body&& body) {
  if (type == ElementType::float32)
    body(float{});
  else
    body(bf16{});
}

}  // namespace axonn::cuda
