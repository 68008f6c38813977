#pragma once
// CommGrid's NCCL half (comm_grid.hpp), apart so that comm_grid.cpp includes no CUDA
// header. In a build without CUDA, connect_nccl_axes throws CommError saying so.
#include <array>
#include <chrono>
#include <functional>
#include <memory>

#include "comm/communicator.hpp"
#include "comm/exchange.hpp"
#include "comm/group_spec.hpp"
#include "layout/layout.hpp"

namespace axonn {

class NcclCommunicator;

using CollectiveRecorder = std::function<void(const CollectiveRecord&)>;

struct NcclAxes {
  std::array<std::unique_ptr<Communicator>, kCommAxisCount> comms;  // by CommAxis
  std::array<NcclCommunicator*, kCommAxisCount> device{};           // the same objects
};

// Collective over the job, on the current CUDA device. groups[a] is this rank's group on
// axis a; groups of more than one rank get NCCL communicators, all connected in one
// bootstrap (nccl_groups.hpp), groups of one a device-local communicator that records
// nothing. recorder_for(a) gives axis a's recorder. The communicators of one grid share
// one failure flag: when one aborts, the others abort at teardown rather than finalize.
// `key` names the bootstrap's exchange (connect_nccl_groups), different for every grid a job
// connects.
NcclAxes connect_nccl_axes(Exchange& exchange, const std::array<GroupSpec, kCommAxisCount>& groups,
                           std::chrono::milliseconds timeout, const std::string& key,
                           const std::function<CollectiveRecorder(CommAxis)>& recorder_for);

// NcclCommunicator::order_with(compute_stream) on every axis (CommGrid::order_with_compute);
// compute_stream is a cudaStream_t or nullptr.
void order_nccl_axes_with(const std::array<NcclCommunicator*, kCommAxisCount>& axes, void* compute_stream);

// What CommGrid says when asked for NCCL in a build without CUDA.
inline constexpr const char* kNoCudaBackend =
    "this axonn build has no CUDA backend (AXONN_HAVE_CUDA is off: nvcc, the CUDA runtime or NCCL was not found "
    "at configure time); install the CUDA Toolkit and NCCL under /usr/local/cuda and reconfigure, or use the gloo "
    "backend";

}  // namespace axonn
