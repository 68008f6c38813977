// comm/cuda_device.hpp for the emulated CUDA backend: one device, no NCCL.
#include "comm/cuda_device.hpp"

namespace axonn {

void set_cuda_check_rank(int) {}
std::string cuda_check_where() { return "the CUDA emulator"; }
int cuda_device_count(std::string*) { return 1; }
int select_cuda_device(int local_rank, int) { return local_rank; }

}  // namespace axonn
