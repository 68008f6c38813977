#include "comm/nccl_grid.hpp"

#include <vector>

#include "comm/cuda_device.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/nccl_groups.hpp"

namespace axonn {

NcclAxes connect_nccl_axes(Exchange& exchange, const std::array<GroupSpec, kCommAxisCount>& groups,
                           std::chrono::milliseconds timeout, const std::string& key,
                           const std::function<CollectiveRecorder(CommAxis)>& recorder_for) {
  // Said plainly here rather than by the first CUDA call that fails.
  std::string why;
  if (cuda_device_count(&why) == 0) throw CommError("no CUDA device: " + why + " on " + cuda_check_where());
  std::vector<GroupSpec> specs;
  for (const GroupSpec& g : groups)
    if (g.members.size() > 1) specs.push_back(g);
  std::vector<ncclComm_t> connected;
  if (!specs.empty()) connected = connect_nccl_groups(exchange, specs, timeout, key);

  auto failed = std::make_shared<std::atomic<bool>>(false);
  NcclAxes axes;
  size_t next = 0;  // next communicator in `connected` to hand over
  try {
    for (size_t a = 0; a < groups.size(); ++a) {
      const GroupSpec& group = groups[a];
      std::unique_ptr<NcclCommunicator> comm;
      if (group.members.size() > 1) {
        ncclComm_t handle = connected[next];
        connected[next++] = nullptr;  // the communicator owns it now, also if its constructor throws
        comm = std::make_unique<NcclCommunicator>(group, group_rank_of(group, exchange.rank()), handle, timeout,
                                                  recorder_for(static_cast<CommAxis>(a)), failed);
      } else {
        comm = std::make_unique<NcclCommunicator>(group, 0, nullptr, timeout, nullptr, failed);
      }
      axes.device[a] = comm.get();
      axes.comms[a] = std::move(comm);
    }
  } catch (...) {
    *failed = true;  // the ones built so far abort at teardown
    for (ncclComm_t c : connected)
      if (c) (void)ncclCommAbort(c);
    throw;
  }
  return axes;
}

void order_nccl_axes_with(const std::array<NcclCommunicator*, kCommAxisCount>& axes, void* compute_stream) {
  for (NcclCommunicator* c : axes) c->order_with(static_cast<cudaStream_t>(compute_stream));
}

}  // namespace axonn
