#pragma once
// trainer/cuda/async_copy.cuh on the CPU: each copy is recorded when issued and done at the
// wait that covers its group (source read and destination written then), so a kernel that
// reads its destination before the wait, or before the barrier after it, reads what was
// there (0xff-filled shared memory at first). Alignment is checked as the hardware does.
#include <cstring>

#include "cuda_emulator.hpp"

namespace axonn::cuda {

inline void copy_16_async(void* dst, const void* src, bool valid) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0)
    cuda_emulator::die("cp.async: a 16-byte copy's source or destination is not 16-byte aligned");
  cuda_emulator::current_fiber().open_copies.push_back({dst, src, valid});
}

inline void commit_copies() {
  cuda_emulator::Fiber& me = cuda_emulator::current_fiber();
  me.copy_groups.push_back(std::move(me.open_copies));
  me.open_copies.clear();
}

template <int kPending>
void wait_for_copies() {
  auto& groups = cuda_emulator::current_fiber().copy_groups;
  while (groups.size() > static_cast<size_t>(kPending)) {
    for (const cuda_emulator::AsyncCopy& c : groups.front()) {
      if (c.valid)
        std::memcpy(c.dst, c.src, 16);
      else
        std::memset(c.dst, 0, 16);
    }
    groups.erase(groups.begin());
  }
}

}  // namespace axonn::cuda
