// Where a CUDA/NCCL failure happened, for its message (built with or without CUDA).
#include <unistd.h>

#include <atomic>
#include <climits>

#include "comm/cuda_device.hpp"

namespace axonn {
namespace {

std::atomic<int> check_rank{-1};

}  // namespace

void set_cuda_check_rank(int world_rank) { check_rank = world_rank; }

std::string cuda_check_where() {
  char host[HOST_NAME_MAX + 1] = {};
  gethostname(host, sizeof host - 1);
  const int rank = check_rank;
  return std::string("host ") + host + " rank " + (rank < 0 ? std::string("?") : std::to_string(rank));
}

}  // namespace axonn
