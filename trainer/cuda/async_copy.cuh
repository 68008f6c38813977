#pragma once
// Asynchronous global -> shared copies in PTX (cp.async, sm_80 and later): a thread issues
// 16-byte copies that complete in the background while it computes, and waits for them in
// the groups it committed (PTX ISA, "Data Movement and Conversion Instructions: cp.async").
// The attention kernels stage the next key (or query) tile this way while the tensor cores
// work on the current one. The CUDA emulator
// (tests/cuda_emulator/include/trainer/cuda/async_copy.cuh) defers each copy to the wait
// that covers it, so a kernel that reads a tile before waiting for it reads stale data there.
#include <cuda_runtime.h>

namespace axonn::cuda {

// dst (shared) = the 16 bytes at src (global), or 16 zero bytes when !valid (src is not
// read, but must still be a valid address). Both 16-byte aligned. Not visible to this
// thread until a wait covers its group, nor to the others until a barrier after that.
__device__ inline void copy_16_async(void* dst, const void* src, bool valid) {
  const auto shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(src), "r"(src_bytes));
}

// Closes the group of this thread's copies issued since the last commit.
__device__ inline void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` of this thread's committed groups are still in flight (the
// newest ones): wait_for_copies<0>() waits for all.
template <int kPending>
__device__ inline void wait_for_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace axonn::cuda
