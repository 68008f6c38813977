#pragma once
// This process's CUDA device, and device memory for checks and tests, for code that
// includes no CUDA header (the CLI, tests). In a build without CUDA (AXONN_HAVE_CUDA off)
// every call reports that there is no device and why.
#include <cstddef>
#include <string>

namespace axonn {

// The world rank that CUDA/NCCL failure messages name ("?" until set; CommGrid sets it).
void set_cuda_check_rank(int world_rank);
// "host <name> rank <r>", as those messages print it.
std::string cuda_check_where();

// Usable CUDA devices (after CUDA_VISIBLE_DEVICES). 0 when there are none; then
// *why_none (if given) says why: the CUDA runtime's error, or that the build has no CUDA.
int cuda_device_count(std::string* why_none = nullptr);

// Makes device `local_rank` current for this thread (one GPU per rank on a node) and
// returns it. Throws CommError "no CUDA device: ..." without a GPU, and names the counts
// when the node has more ranks than GPUs (NCCL cannot put two ranks of one communicator
// on one GPU).
int select_cuda_device(int local_rank, int local_size);

// What the CUDA runtime reports about one device, read without making it current or
// creating a context on it (so `axonn run` can ask before its ranks start).
struct CudaDeviceInfo {
  std::string name;          // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  double max_clock_hz = 0;   // the SMs' maximum clock
  double memory_bytes = 0;   // total device memory
};

// Device `device` (0 <= device < cuda_device_count()). Throws CommError with the runtime's
// error, or, in a build without CUDA, saying so.
CudaDeviceInfo cuda_device_info(int device);

// `bytes` of memory on the current CUDA device; copies to and from the host are
// synchronous (they return when the data is there). Not copyable. (Untyped, for the
// communicators' checks; the trainer's buffers are DeviceBuffer<T> of trainer/backend.hpp.)
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes);
  ~DeviceBytes();
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  void* data() { return data_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host, size_t bytes);    // host -> device, bytes <= this->bytes()
  void download(void* host, size_t bytes) const;  // device -> host
  void fill_bytes(int value);                     // memset of the whole buffer

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace axonn
